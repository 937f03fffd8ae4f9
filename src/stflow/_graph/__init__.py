"""Graph mode: work recorded as CUDA graphs and launched.

- ``scopes``      epochs, graph scopes, loops and launchable graphs of a runtime
- ``stackable``   ``stackable_context``: work nested in graph scopes and loops
- ``task_graph``  ``task_graph()`` / ``TaskGraph``: record once, launch many times
- ``cond``        loop conditions: ``cond(ld, op, threshold)`` and ``&``/``|``/``~``

Imports ``_handles``, ``_engine``, ``_core``, ``_places`` and the backends.
"""
