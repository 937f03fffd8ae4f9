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

CUDA backend
    Each launch is a ``cuLaunchKernel`` on the task stream, at ``launch()`` time, so
    several launches run in call order. ``kernel`` is a ``cuda.core`` ``Kernel`` (a
    ``CUkernel`` is resolved to the ``CUfunction`` of the task's device), a CuPy
    ``RawKernel`` (its compiled function for that device), or an ``int`` ``CUfunction``.

Emulated backend
    ``kernel`` must be a Python callable. It is called as ``kernel(*args)`` in stream
    order (through :func:`stflow.emulated.launch`), after the prerequisites, with a
    NumPy array of the instance in place of every pointer ``k.get_arg(i)`` returned
    (read-only for ``read()`` dependencies) and ctypes scalars replaced by their
    values. A CUDA function handle raises ``BackendUnavailableError``.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Callable, cast

import numpy as np

from ._errors import BackendUnavailableError
from ._task import _ENDED, task
from .backends._base import Allocation

__all__ = ["cuda_kernel"]

_EXTRAS = "install stflow[cu12] or stflow[cu13] (cuda-core)"


class _DoubleComplex(ctypes.Structure):
    _fields_ = [("real", ctypes.c_double), ("imag", ctypes.c_double)]


def _absent(name: str) -> property:
    """A name ``task`` has and ``cuda_kernel`` has not (as in the reference)."""
    def missing(self: Any) -> Any:
        raise AttributeError(f"'cuda_kernel' object has no attribute '{name}': a "
                             "cuda_kernel describes launches with launch(); use "
                             "ctx.task() for a body that enqueues work on a stream")
    return property(missing)


def _dims(value: Any, what: str) -> tuple[int, int, int]:
    """``grid`` / ``block``: an int or 1-3 values converted with ``int()``, all > 0."""
    if isinstance(value, np.generic):
        raise TypeError(f"launch: {what} must be an int or a tuple of ints, got the "
                        f"NumPy scalar {value!r}; convert it with int()")
    if isinstance(value, int):
        values: list[Any] = [value]
    elif isinstance(value, (str, bytes)):
        raise TypeError(f"launch: {what} must be an int or a tuple of 1 to 3 ints, "
                        f"got the string {value!r}")
    else:
        try:
            values = list(value)
        except TypeError:
            raise TypeError(f"launch: {what} must be an int or a tuple of 1 to 3 ints, "
                            f"got {type(value).__name__}") from None
    if not 1 <= len(values) <= 3:
        raise ValueError(f"launch: {what} must have 1 to 3 dimensions, got "
                         f"{len(values)}")
    try:
        dims = [int(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"launch: {what} {value!r} has a value that is not an "
                         "integer") from exc
    if any(d <= 0 for d in dims):
        raise ValueError(f"launch: every {what} dimension must be positive, got "
                         f"{tuple(dims)}")
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _pack(arg: Any, index: int) -> Any:
    """The ctypes object holding ``arg`` as the kernel receives it."""
    if isinstance(arg, int):
        value = int(arg)
        if -2**63 <= value < 2**63:
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
            raise TypeError(f"launch: argument {index} is a NumPy {arg.dtype} scalar, "
                            "which has no fixed C layout")
        data = arg.tobytes()
        return (ctypes.c_char * len(data)).from_buffer_copy(data)
    if isinstance(arg, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union)):
        return type(arg).from_buffer_copy(arg)        # the value now, not later
    handle = _foreign_pointer(arg)
    if handle is not None:
        return ctypes.c_uint64(handle)
    raise TypeError(
        f"launch: argument {index} of type {type(arg).__name__} cannot be passed to a "
        "kernel; pass k.get_arg(i) for data, a Python int/float/complex, a NumPy or "
        "ctypes scalar (ctypes.c_int(n) for a 32-bit int) or a cuda.core Buffer")


def _foreign_pointer(arg: Any) -> int | None:
    """The pointer of a ``cuda.core`` ``Buffer`` or a graph conditional handle."""
    name = type(arg).__name__
    module = type(arg).__module__ or ""
    if module.startswith("cuda.core") and name == "Buffer":
        return int(arg.handle)
    if module.startswith("cuda.bindings") and name == "CUgraphConditionalHandle":
        return int(arg)
    return None


def _emulated_value(arg: Any, arrays: dict[int, np.ndarray]) -> Any:
    """What an emulated kernel receives for ``arg``."""
    if isinstance(arg, ctypes._SimpleCData):
        arg = arg.value
    elif isinstance(arg, (ctypes.Structure, ctypes.Union, ctypes.Array)):
        return type(arg).from_buffer_copy(arg)     # captured at the call (API 3.17)
    if type(arg) is int and arg in arrays:
        return arrays[arg]
    return arg


def _is_cuda_function(kernel: Any) -> bool:
    if isinstance(kernel, int):
        return True
    module = type(kernel).__module__ or ""
    return module.startswith(("cuda.core", "cuda.bindings", "cupy"))


class cuda_kernel(task):
    """A task whose body describes kernel launches (``k.launch(...)``).

    Build it with ``ctx.cuda_kernel(*deps, symbol=...)``; ``cuda_kernel(ctx)`` builds
    an empty one. ``with`` starts and ends it as for a task.

    Notes
    -----
    Launches are enqueued on the task stream in call order, after the task's
    prerequisites; ``end()`` records the task's completion after them and releases
    the packed arguments. There is no ``stream_ptr()``, ``args_cai()`` or grid
    helper, as in the reference.
    """

    __slots__ = ("_launches",)
    _launches: list[Any]

    def _setup(self, runtime: Any, args: tuple, symbol: str | None) -> None:
        self._launches = []
        super()._setup(runtime, args, symbol)

    def _label(self) -> str:
        return (f"cuda_kernel {self._symbol!r}" if self._symbol
                else f"cuda_kernel #{self._id}")

    _what = _label

    stream_ptr = _absent("stream_ptr")
    args_cai = _absent("args_cai")
    get_grid_dims = _absent("get_grid_dims")
    get_stream_at_index = _absent("get_stream_at_index")
    get_stream_ptrs = _absent("get_stream_ptrs")

    def __repr__(self) -> str:
        phase = ("new", "started", "ended")[self._phase]
        return f"<stflow.cuda_kernel {self._symbol!r} {phase}, {len(self._deps)} deps>"

    def end(self) -> None:
        """Release the dependencies (after the launches) and the packed arguments."""
        try:
            super().end()
        finally:
            if self._phase == _ENDED:
                self._launches.clear()

    def launch(self, kernel: Any, grid: Any, block: Any, args: Any, shmem: int = 0
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
        dims = _dims(grid, "grid") + _dims(block, "block")
        if isinstance(shmem, bool) or not isinstance(shmem, int):
            raise TypeError(f"launch: shmem must be an int, got {type(shmem).__name__}")
        if shmem < 0:
            raise ValueError(f"launch: shmem must be >= 0 bytes, got {shmem}")
        if isinstance(args, (str, bytes)) or not hasattr(args, "__iter__"):
            raise TypeError(f"launch: args must be a tuple of kernel arguments, got "
                            f"{type(args).__name__}")
        args = tuple(args)
        packed = [_pack(arg, i) for i, arg in enumerate(args)]
        if self._runtime.backend.name == "emulated":
            self._launch_emulated(kernel, args)
        else:
            self._launch_cuda(kernel, dims, packed, shmem)

    # -- the emulated backend ------------------------------------------------------
    def _launch_emulated(self, kernel: Any, args: tuple) -> None:
        if _is_cuda_function(kernel):
            raise BackendUnavailableError(
                f"{self._label()}: {type(kernel).__name__} is a CUDA function, which "
                "needs the CUDA backend; on the emulated backend launch a Python "
                "callable (called as kernel(*args) with NumPy arrays for k.get_arg(i))")
        if not callable(kernel):
            raise TypeError(f"launch: kernel must be a Python callable on the emulated "
                            f"backend, got {type(kernel).__name__}")
        arrays = self._dependency_arrays()
        values = tuple(_emulated_value(arg, arrays) for arg in args)
        from .emulated import launch
        launch(self._native_stream().handle, kernel, *values)

    def _dependency_arrays(self) -> dict[int, np.ndarray]:
        """Address of each dependency's instance -> a NumPy array of it."""
        backend = self._runtime.backend
        writes: dict[int, bool] = {}
        found: dict[int, tuple[Allocation, tuple, np.dtype]] = {}
        for d, access in zip(self._deps, self._per_dependency):
            if access.ld._is_token or access.instance is None:
                continue
            allocation = access.instance.allocation
            if allocation is None or not allocation.ptr:
                continue
            found[allocation.ptr] = (allocation, cast(tuple, access.ld._shape),
                                     cast(np.dtype, access.ld._dtype))
            writes[allocation.ptr] = writes.get(allocation.ptr, False) or bool(d.mode & 2)
        return {ptr: backend.host_array(allocation, shape, dtype, not writes[ptr])
                for ptr, (allocation, shape, dtype) in found.items()}

    # -- the CUDA backend ----------------------------------------------------------
    def _launch_cuda(self, kernel: Any, dims: tuple[int, ...], packed: list[Any],
                     shmem: int) -> None:
        if "cuda.core" not in sys.modules:
            try:
                import cuda.core  # noqa: F401
            except ImportError as exc:
                raise BackendUnavailableError(
                    f"cuda_kernel.launch needs cuda.core; {_EXTRAS}") from exc
        from .backends import _cuda_driver as _cu
        task_stream = self._native_stream()
        stream: Any = getattr(task_stream, "real", task_stream)   # graph mode: capture
        function = self._function(kernel, getattr(stream, "cuda_device", 0))
        pointers = (ctypes.c_void_p * max(len(packed), 1))(
            *[ctypes.addressof(value) for value in packed])
        self._launches.append((packed, pointers))
        _cu.check(_cu.driver.cuLaunchKernel(
            function, *dims, shmem, stream.native,
            ctypes.addressof(pointers) if packed else 0, 0),
            f"{self._label()}: cuLaunchKernel")

    def _function(self, kernel: Any, device: int) -> Any:
        """The ``CUfunction`` of ``kernel`` for ``device``."""
        from .backends import _cuda_driver as _cu
        driver = _cu.driver
        if isinstance(kernel, bool):
            raise TypeError("launch: kernel must be a cuda.core Kernel, a CuPy "
                            "RawKernel or an int CUfunction, got bool")
        if isinstance(kernel, int):
            return driver.CUfunction(kernel)
        if isinstance(kernel, driver.CUfunction):
            return kernel
        resolve: Callable[[], Any] | None = None
        handle = getattr(kernel, "handle", None)
        if handle is not None and (type(kernel).__module__ or "").startswith("cuda.core"):
            if isinstance(handle, driver.CUfunction):
                return handle
            if isinstance(handle, driver.CUkernel):
                def resolve() -> Any:
                    return _cu.check(driver.cuKernelGetFunction(handle),
                                     f"{self._label()}: resolving a CUkernel to the "
                                     f"CUfunction of device {device}")
            else:
                return driver.CUfunction(int(handle))
        elif hasattr(kernel, "kernel") and (type(kernel).__module__ or "").startswith(
                "cupy"):
            def resolve() -> Any:
                return driver.CUfunction(int(kernel.kernel.ptr))
        if resolve is None:
            raise TypeError(f"launch: kernel must be a cuda.core Kernel, a CuPy "
                            f"RawKernel or an int CUfunction on the CUDA backend, got "
                            f"{type(kernel).__name__}")
        backend = self._runtime.backend
        previous = backend.current_device()
        backend.set_current_device(device)      # also when the thread has no context
        try:
            return resolve()
        finally:
            if previous != device:
                backend.set_current_device(previous)
