"""``cuda_kernel``: a task whose body describes kernel launches.

``ctx.cuda_kernel(*deps)`` takes the arguments of ``ctx.task`` and acquires its
dependencies the same way (execution place, per-dependency places, ordering); the
body calls ``k.launch(kernel, grid, block, args, shmem=0)`` instead of using a stream.

Marshalling
    ``args`` are converted when ``launch`` is called, like ``cuda.core`` kernel
    arguments: a ``cuda.core`` ``Buffer`` becomes its pointer, a Python ``int`` (so
    also ``bool``) a pointer-sized integer, ``float`` a ``double``, ``complex`` a
    ``double complex``, NumPy and ctypes scalars their exact C type, a graph
    conditional handle a pointer-sized integer; anything else is a ``TypeError``. The
    packed values are kept until ``end()``.

Each launch is a :class:`~stflow.backends._base.KernelLaunch` handed to the backend's
``launch_kernel``.

CUDA backend
    Each launch is a ``cuLaunchKernel`` on the task stream, at ``launch()`` time, so
    several launches run in call order. ``kernel`` is a ``cuda.core`` ``Kernel`` (a
    ``CUkernel`` is resolved to the ``CUfunction`` of the task's device), a CuPy
    ``RawKernel`` (its compiled function for that device), or an ``int`` ``CUfunction``.

Emulated backend
    ``kernel`` must be a Python callable. It is called as ``kernel(*args)`` in stream
    order on the task stream, after the prerequisites, with a
    NumPy array of the instance in place of every pointer ``k.get_arg(i)`` returned
    (read-only for ``read()`` dependencies) and ctypes scalars replaced by their
    values. A CUDA function handle raises ``BackendUnavailableError``.
"""

from __future__ import annotations

import ctypes
from typing import Any, cast

import numpy as np

from .._core.access import WRITE
from ..backends._base import Allocation, KernelLaunch
from .bundles import is_view
from .task import _ENDED, task

__all__ = ["cuda_kernel"]


class _DoubleComplex(ctypes.Structure):
    _fields_ = [("real", ctypes.c_double), ("imag", ctypes.c_double)]


def _absent(name: str) -> property:
    """A name ``task`` has and ``cuda_kernel`` has not (as in the reference)."""

    def missing(self: Any) -> Any:
        raise AttributeError(
            f"'cuda_kernel' object has no attribute '{name}': a "
            "cuda_kernel describes launches with launch(); use "
            "ctx.task() for a body that enqueues work on a stream"
        )

    return property(missing)


def _dims(value: Any, what: str) -> tuple[int, int, int]:
    """``grid`` / ``block``: an int or 1-3 values converted with ``int()``, all > 0."""
    if isinstance(value, np.generic):
        raise TypeError(
            f"launch: {what} must be an int or a tuple of ints, got the "
            f"NumPy scalar {value!r}; convert it with int()"
        )
    if isinstance(value, int):
        values: list[Any] = [value]
    elif isinstance(value, (str, bytes)):
        raise TypeError(
            f"launch: {what} must be an int or a tuple of 1 to 3 ints, "
            f"got the string {value!r}"
        )
    else:
        try:
            values = list(value)
        except TypeError:
            raise TypeError(
                f"launch: {what} must be an int or a tuple of 1 to 3 ints, "
                f"got {type(value).__name__}"
            ) from None
    if not 1 <= len(values) <= 3:
        raise ValueError(f"launch: {what} must have 1 to 3 dimensions, got {len(values)}")
    try:
        dims = [int(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"launch: {what} {value!r} has a value that is not an integer"
        ) from exc
    if any(d <= 0 for d in dims):
        raise ValueError(
            f"launch: every {what} dimension must be positive, got {tuple(dims)}"
        )
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _pack(arg: Any, index: int) -> Any:
    """The ctypes object holding ``arg`` as the kernel receives it."""
    if isinstance(arg, int):
        value = int(arg)
        if -(2**63) <= value < 2**63:
            return ctypes.c_int64(value)
        if value < 2**64:
            return ctypes.c_uint64(value)
        raise ValueError(f"launch: argument {index} ({value}) does not fit in 64 bits")
    if isinstance(arg, float):
        return ctypes.c_double(arg)
    if isinstance(arg, complex):
        return _DoubleComplex(arg.real, arg.imag)
    if isinstance(arg, np.generic):
        if arg.dtype.hasobject or arg.dtype.itemsize == 0:
            raise TypeError(
                f"launch: argument {index} is a NumPy {arg.dtype} scalar, "
                "which has no fixed C layout"
            )
        data = arg.tobytes()
        return (ctypes.c_char * len(data)).from_buffer_copy(data)
    if isinstance(arg, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union)):
        return type(arg).from_buffer_copy(arg)  # the value now, not later
    handle = _foreign_pointer(arg)
    if handle is not None:
        return ctypes.c_uint64(handle)
    raise TypeError(
        f"launch: argument {index} of type {type(arg).__name__} cannot be passed to a "
        "kernel; pass k.get_arg(i) for data, a Python int/float/complex, a NumPy or "
        "ctypes scalar (ctypes.c_int(n) for a 32-bit int) or a cuda.core Buffer"
    )


def _foreign_pointer(arg: Any) -> int | None:
    """The pointer of a ``cuda.core`` ``Buffer`` or a graph conditional handle."""
    name = type(arg).__name__
    module = type(arg).__module__ or ""
    if module.startswith("cuda.core") and name == "Buffer":
        return int(arg.handle)
    if module.startswith("cuda.bindings") and name == "CUgraphConditionalHandle":
        return int(arg)
    return None


def _flatten_bundles(args: tuple) -> tuple:
    """``args`` with each bundle's named tuple (``k.get_arg(slot)`` of a bundle)
    replaced by its fields' values in field order, fields without memory left out."""
    flat: list[Any] = []
    for arg in args:
        if is_view(arg):
            flat.extend(field for field in arg if field is not None)
        else:
            flat.append(arg)
    return tuple(flat)


class cuda_kernel(task):
    """A task whose body describes kernel launches (``k.launch(...)``).

    Build it with ``ctx.cuda_kernel(*deps, symbol=...)``; ``cuda_kernel(ctx)`` builds
    an empty one. ``with`` starts and ends it as for a task.

    Notes
    -----
    Launches are enqueued on the task stream in call order, after the task's
    prerequisites; ``end()`` records the task's completion after them and releases
    the packed arguments. There is no ``stream_ptr()``, ``args_cai()`` or grid
    helper, as in the reference; ``views()`` (stflow-only) gives the dependencies'
    views as a tuple, as for a task.
    """

    __slots__ = ("_launches",)
    _launches: list[KernelLaunch]

    def _setup(self, runtime: Any, args: tuple, symbol: Any) -> None:
        self._launches = []
        super()._setup(runtime, args, symbol)

    def _label(self) -> str:
        return (
            f"cuda_kernel {self._symbol!r}"
            if self._symbol
            else f"cuda_kernel #{self._id}"
        )

    stream_ptr = _absent("stream_ptr")
    args_cai = _absent("args_cai")
    get_grid_dims = _absent("get_grid_dims")
    get_stream_at_index = _absent("get_stream_at_index")
    get_stream_ptrs = _absent("get_stream_ptrs")

    def __repr__(self) -> str:
        phase = ("new", "started", "ended")[self._phase]
        return f"<stflow.cuda_kernel {self._symbol!r} {phase}, {len(self._deps)} deps>"

    def __exit__(self, *exc: Any) -> None:
        """Release the dependencies (after the launches) and the packed arguments."""
        try:
            super().__exit__(*exc)
        finally:
            if self._phase == _ENDED:
                self._launches.clear()

    def launch(
        self, kernel: Any, grid: Any, block: Any, args: Any, shmem: int = 0
    ) -> None:
        """Launch ``kernel`` on ``grid`` x ``block`` with ``args`` (see the module).

        Raises
        ------
        ScopeError
            Outside ``start()`` ... ``end()``.
        TypeError
            A bad kernel or argument type (NumPy integer grid or block included).
        ValueError
            Non-positive or more than 3 grid / block dimensions, negative ``shmem``.
        BackendUnavailableError
            A CUDA function on the emulated backend, or ``cuda.core`` missing.
        CudaError
            The driver refused the launch.
        """
        self._check_window("launch()")
        grid_dims = _dims(grid, "grid")
        block_dims = _dims(block, "block")
        if isinstance(shmem, bool) or not isinstance(shmem, int):
            raise TypeError(f"launch: shmem must be an int, got {type(shmem).__name__}")
        if shmem < 0:
            raise ValueError(f"launch: shmem must be >= 0 bytes, got {shmem}")
        if isinstance(args, (str, bytes)) or not hasattr(args, "__iter__"):
            raise TypeError(
                f"launch: args must be a tuple of kernel arguments, got "
                f"{type(args).__name__}"
            )
        args = tuple(args)
        if self._layout is not None:  # a bundle's fields: consecutive arguments
            args = _flatten_bundles(args)
        packed = [_pack(arg, i) for i, arg in enumerate(args)]
        launch = KernelLaunch(
            kernel,
            grid_dims,
            block_dims,
            shmem,
            args,
            packed,
            self._buffers(),
            self._label(),
        )
        self._runtime.backend.launch_kernel(self._native_stream(), launch)
        self._launches.append(launch)

    def _buffers(self) -> list[tuple[Allocation, tuple[int, ...], np.dtype, bool]]:
        """The instances of the task's dependencies, and whether each is written."""
        buffers = []
        assert self._plan is not None
        for d, access in zip(self._deps, self._plan.per_dependency):
            instance = access.instance
            if instance is None or instance.allocation is None:
                continue
            buffers.append(
                (
                    instance.allocation,
                    cast(tuple, d.ld._shape),
                    cast(np.dtype, d.ld._dtype),
                    bool(d.mode & WRITE),
                )
            )
        return buffers
