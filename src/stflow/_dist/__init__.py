"""The distributed layer: one sequential task flow over MPI ranks.

- ``context``     ``distributed_context``: ownership, the collective call checks,
                  the task flow every rank follows
- ``handles``     its data, dependencies, tasks and kernels
- ``exchanges``   this rank's messages: sends and receives posted at tasks
- ``staging``     how a value moves between local data and MPI messages (chosen once)
- ``collective``  checking that every rank makes the same calls

Built on a local ``context`` per rank: imports ``_handles``, ``_interchange``,
``_core``, ``_places`` and the backend contract.
"""
