"""Graph mode: what a context does differently when its work is recorded as graphs.

This package owns the graph-mode state and mechanisms: the recording backend
(``recording.py`` over ``recorded.py``), the scopes of a recording runtime
(``scopes.py``), the mode object a graph-mode runtime calls at the points where the
modes differ (``mode.py``), and the public API built on them (``stackable.py``,
``task_graph.py``, ``cond.py``).

It may import the stream-mode modules of ``stflow`` and ``backends._base``; no
stream-mode module imports it, except the one place the context chooses the mode
(a lazy import in ``_context.py``) and the lazy re-exports of the public names.
"""
