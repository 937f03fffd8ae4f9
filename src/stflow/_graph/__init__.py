"""Graph mode: what a context does differently when its work is recorded as graphs.

This package owns the graph-mode state and mechanisms:

- ``recording``   the recording backend: scopes recorded as graphs over a real
                  backend's graph support, its graphs, nodes and streams in ``recorded``
- ``launches``    launching what it recorded: executables cached by topology, the
                  retirement of launched graphs, the end of a context
- ``scopes``      epochs, graph scopes, loops and launchable graphs of a runtime: the
                  ``ScopeTracker`` and what it notes of every task
- ``scope``       one scope (``Scope``, ``ScopeKind``) and a thread's stack of them
                  (``Recording``)
- ``lifetime``    opening, closing (launching, lowering) and discarding a scope
- ``mode``        ``GraphMode``, the mode object a graph-mode runtime calls where the
                  modes differ (admission, pools, bodies, endings, reductions)
- ``stackable``   ``stackable_context``: work nested in graph scopes and loops
- ``stackable_data``  its data and tasks: ``stackable_logical_data``, ``stackable_task``
- ``loops``       the blocks of its scopes: ``graph_scope()``, ``while_loop()``,
                  ``repeat(count)``
- ``launchable``  its launchable graphs (``LaunchableGraph``): recorded once, launched
                  many times
- ``task_graph``  ``task_graph()`` / ``TaskGraph``: record once, launch many times
- ``cond``        loop conditions: ``cond(ld, op, threshold)`` and ``&``/``|``/``~``

It may import the parts below it (``_handles``, ``_engine``, ``_core``, ``_places``,
the backends); no stream-mode module imports it, except the one place the context
chooses the mode (a lazy import in ``_handles/context.py``) and the lazy re-exports of
the public names.
"""
