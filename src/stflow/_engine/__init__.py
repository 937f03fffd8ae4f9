"""The engine: the runtime behind a context.

Owns the state of one context and the mechanisms that act on it:

- ``runtime``     :class:`Runtime`: its parts, and the plan → enact hot path
- ``copies``      instances given memory within the budget, and the copies between
                  them (a plan's moves, internal copies, write-back)
- ``registry``    the logical data of a runtime: creation, page-locking, retirement
- ``memory``      device memory against a per-device budget
- ``eviction``    room on a device within its budget (which instances go)
- ``reductions``  reductions at work: partials, combining, where results land
- ``endings``     the synchronisation points: fence, wait, finalize, tear-down
- ``threads``     waiting for other host threads' work (held data, wait cycles)
- ``resources``   stream resources outside and across contexts
- ``mode``        ``Mode``: stream mode's answers where the modes differ (hooks that
                  do nothing); graph mode's subclass is in ``_graph``

Imports ``_core``, ``_interchange`` (describing user buffers), ``_instruments``,
``_places`` and the backend contract. Graph mode reaches it through the mode object
the context chooses (``_graph``); nothing here imports graph mode or user-facing
handles.
"""
