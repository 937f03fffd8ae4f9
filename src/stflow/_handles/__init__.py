"""The handles: the objects a user holds and the calls that submit work.

- ``context``       the public ``context``: data creation, tasks, fence/wait/finalize
- ``logical_data``  logical data and its dependencies (``ld.read()``, ``ld.rw()``...)
- ``bundles``       several logical data as one dependency and one task argument
- ``task``          tasks: acquire → body → release
- ``callbacks``     ``host_launch``: a host function in stream order on its data
- ``bodies``        backend-neutral task bodies (``task.run(fn)``)
- ``kernel``        ``cuda_kernel``: tasks whose body describes kernel launches
- ``tiles``         tiles of a 2-D array as a grid of logical data, registered in place

Imports ``_engine`` (every handle is a thin view of a runtime), ``_instruments``,
``_interchange``, ``_core``, ``_places`` and the backend contract. Two lazy imports
go up, named in ``tests/unit/test_architecture.py``: task bodies get CuPy arrays from
``interop.cupy``, and ``tiles`` asks whether its context is distributed.
"""
