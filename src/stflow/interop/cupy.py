"""CuPy arrays for task arguments (CUDA backend only).

A task view becomes a zero-copy CuPy array attributed to the *current* device
(:func:`as_cupy`): a task may touch data on a peer device or in pinned host memory,
which the current device reaches directly, whereas ``cupy.asarray`` would silently
copy memory that lives on another device (and the body's writes would be lost).
:class:`cupy_task` makes the task's device and stream CuPy's current ones, so the
body's CuPy operations are ordered after the task's prerequisites and before its end.
The stream is wrapped with ``cupy.cuda.Stream.from_external`` (CuPy 14), or
``cupy.cuda.ExternalStream`` on older CuPy.

The emulated backend has no GPU memory for CuPy: every function here raises
``BackendUnavailableError`` there (use NumPy on ``numpy.asarray(view)`` instead).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.errors import BackendUnavailableError
from .._core.layout import extent
from .._interchange.views import CudaStream
from ._common import (
    TaskScope,
    backend_of,
    gpu_memory,
    import_framework,
    task_device,
    views_of,
)

__all__ = ["as_cupy", "cupy_arg", "cupy_arguments", "cupy_stream", "cupy_task"]


def _cupy(gpu: bool, backend: str) -> Any:
    if not gpu:
        raise BackendUnavailableError(
            f"CuPy arrays need the CUDA backend; this task runs on the {backend} backend "
            "(use numpy.asarray(view) in the body, or a context with backend='cuda')"
        )
    return import_framework("cupy", "cupy", "CuPy")


def cupy_stream(handle: Any) -> Any:
    """A CuPy stream object for a raw stream handle, not owned by CuPy
    (``with cupy_stream(t.stream_ptr()): ...``)."""
    cupy = _CUPY[0] if _CUPY else _load_cupy()
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:  # CuPy 14 and later
        return from_external(CudaStream(int(handle)))
    return cupy.cuda.ExternalStream(int(handle))


_CUPY: list[Any] = []
"""The CuPy module once imported (``as_cupy`` runs for every view of every body)."""


def _load_cupy() -> Any:
    cupy = import_framework("cupy", "cupy", "CuPy")
    _CUPY.append(cupy)
    return cupy


def as_cupy(view: Any) -> Any:
    """A zero-copy CuPy array over a view (CUDA Array Interface), on the current device.

    Notes
    -----
    The array borrows the memory: ``view``'s owner must outlive it. It is attributed
    to the current device, which reaches peer-device memory (peer access) and pinned
    host or managed memory (unified addressing) directly.
    """
    cupy = _CUPY[0] if _CUPY else _load_cupy()
    interface = view.__cuda_array_interface__
    shape = tuple(interface["shape"])
    dtype = np.dtype(interface["typestr"])
    strides = interface.get("strides")  # a registered strided buffer
    memory = cupy.cuda.UnownedMemory(
        interface["data"][0],
        extent(shape, strides, dtype.itemsize),
        view,
        device_id=cupy.cuda.Device().id,
    )
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides=strides)


_BODY_CACHE_LIMIT = 4096
_body_streams: dict[int, Any] = {}
_body_arrays: dict[tuple[Any, ...], Any] = {}


def body_stream(handle: int) -> Any:
    """``cupy_stream(handle)``, made once per stream handle (``task.run`` on CUDA
    makes one per task otherwise: the pool hands the same few streams out again)."""
    stream = _body_streams.get(handle)
    if stream is None:
        if len(_body_streams) >= _BODY_CACHE_LIMIT:
            _body_streams.clear()
        stream = _body_streams[handle] = cupy_stream(handle)
    return stream


def allocation_array(
    cupy: Any, allocation: Any, shape: tuple[int, ...], dtype: Any, device: int
) -> Any:
    """A CuPy array over ``allocation`` (an instance's memory) for a ``task.run``
    body on ``device``: an array made once per allocation and device and handed to
    every body of that instance, so a body costs no CAI dictionary, memory object or
    view of the task. A body that changes the array's ``shape`` or ``dtype`` in place
    makes the next body get a new one (the array does not keep the allocation alive:
    a body must not keep its arrays beyond the task)."""
    per_device = allocation.arrays  # kept on the allocation, goes with it
    if per_device is None:
        per_device = allocation.arrays = {}
    base = per_device.get(device)
    if base is None or base.shape != shape or base.dtype != dtype:
        dtype = np.dtype(dtype)
        strides = allocation.strides
        memory = cupy.cuda.UnownedMemory(
            allocation.ptr, extent(shape, strides, dtype.itemsize), None, device_id=device
        )
        base = per_device[device] = cupy.ndarray(
            shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides=strides
        )
    return base


def body_array(view: Any) -> Any:
    """A CuPy array over a task view for a ``task.run`` body: a fresh ``view()`` of
    an array made once per (address, shape, dtype, strides, device), so the memory
    objects are not built again for every task reading the same instance.

    The array does not keep the view alive (the instance's memory is the runtime's:
    a body must not keep its arrays beyond the task, as with any view)."""
    cupy = _CUPY[0] if _CUPY else _load_cupy()
    interface = view.__cuda_array_interface__
    device = cupy.cuda.runtime.getDevice()
    key = (
        interface["data"][0],
        tuple(interface["shape"]),
        interface["typestr"],
        interface.get("strides"),
        device,
    )
    base = _body_arrays.get(key)
    if base is None:
        shape = key[1]
        dtype = np.dtype(key[2])
        memory = cupy.cuda.UnownedMemory(
            key[0], extent(shape, key[3], dtype.itemsize), key, device_id=device
        )
        base = cupy.ndarray(
            shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides=key[3]
        )
        if len(_body_arrays) >= _BODY_CACHE_LIMIT:
            _body_arrays.clear()
        _body_arrays[key] = base
    return base.view()


def cupy_arg(task: Any, index: int) -> Any:
    """A zero-copy CuPy array of dependency ``index`` of a started task."""
    _cupy(gpu_memory(task), backend_of(task).name)
    return as_cupy(task.get_arg_cai(index))


def cupy_arguments(task: Any) -> Any:
    """CuPy arrays of the non-token dependencies, like ``args_cai()``: ``None``, one
    array, or a tuple."""
    _cupy(gpu_memory(task), backend_of(task).name)
    arrays = tuple(as_cupy(view) for view in views_of(task))
    if not arrays:
        return None
    return arrays[0] if len(arrays) == 1 else arrays


class cupy_task(TaskScope):
    """``with cupy_task(ctx, *deps, symbol=None) as arrays:`` a task whose body uses
    CuPy.

    Entering starts the task, makes its device and stream CuPy's current ones and
    yields a tuple of CuPy arrays, one per non-token dependency (empty without data
    dependencies).

    Raises
    ------
    BackendUnavailableError
        On the emulated backend, or without CuPy (``pip install 'stflow[cupy]'``);
        raised before the task is created.

    Notes
    -----
    Exit leaves the stream and device scope, then ends the task; the body's exception
    wins over a scope-exit error, which wins over an ``end()`` error.
    """

    def __init__(self, ctx: Any, *args: Any, symbol: str | None = None) -> None:
        backend = ctx._live().backend
        self._module = _cupy(backend.gpu_memory, backend.name)
        super().__init__(ctx, args, symbol)

    def open_scope(self, scope: Any) -> None:
        cupy = self._module
        scope.enter_context(cupy.cuda.Device(task_device(self.task)))
        scope.enter_context(cupy_stream(int(self.task.stream_ptr())))

    def result(self) -> Any:
        return tuple(as_cupy(view) for view in views_of(self.task))
