"""Device memory that lives in host memory: the emulated and null backends.

A :class:`HostMemory` hands out NumPy byte buffers as device allocations, *separate*
from the host memory of user arrays, so that a forgotten copy gives a wrong answer as
on a GPU. Fresh and freed buffers are *poisoned* (:func:`~._base.poison`: NaN for
floating types, ``0xA5`` bytes otherwise) so that reading uninitialised or freed
memory shows.
It remembers which device each buffer belongs to (:meth:`HostMemory.locate`).

Task bodies see such memory through :class:`HostView` objects: ``__array_interface__``
and CPU DLPack instead of the CUDA Array Interface.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core.errors import BackendUnavailableError, ScopeError, add_note, work_ids
from .._core.layout import dense_strides
from .._interchange.views import ViewLifetime
from ._base import (
    HOST,
    Allocation,
    CompositeAllocation,
    KernelLaunch,
    Stream,
    callback_state,
    describable,
    pointer_array,
    poison,
)

__all__ = [
    "HostMemory",
    "HostView",
    "Launched",
    "copy_elements",
    "element_array",
    "launch_work",
    "launched_arguments",
    "poison",
    "python_kernel",
]


class HostView(ViewLifetime):
    """A task's view of device memory that lives in host memory (emulated, null).

    Exposes ``__array_interface__`` (v3) and CPU DLPack instead of the CUDA Array
    Interface, so ``numpy.asarray(view)`` is a zero-copy view of the device memory,
    writable unless the dependency is ``read()``.

    Notes
    -----
    The view is valid between the task's ``start()`` and ``end()``; afterwards it raises
    :class:`ScopeError`. Arrays already made from it keep the memory alive. The view of
    a task recorded into a graph refuses host access (its work runs when the graph
    runs) but can still be handed to launched work (``stflow.emulated.launch``).
    """

    __slots__ = (
        "_allocation",
        "ptr",
        "shape",
        "dtype",
        "readonly",
        "strides",
        "stream",
        "_invalid",
        "_host_refused",
    )

    def __init__(
        self,
        allocation: Allocation,
        ptr: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        readonly: bool,
        strides: tuple[int, ...] | None = None,
    ) -> None:
        # Keep the buffer itself: arrays made from the view outlive a free() of the
        # allocation (they then see the poison pattern, never released memory).
        self._allocation = allocation.owner
        self.ptr = ptr
        self.shape = shape
        self.dtype = dtype
        self.readonly = readonly
        self.strides = strides  # bytes; None: C order (see stflow._core.layout)
        self.stream = 0
        self._invalid: str | None = None
        self._host_refused: str | None = None

    def _refuse_host_access(self, why: str) -> None:
        self._host_refused = why

    def _host_access_refused(self) -> bool:
        return self._host_refused is not None

    def _check_host_access(self) -> None:
        why = self._invalid or self._host_refused
        if why is not None:
            raise ScopeError(why)

    @property
    def __array_interface__(self) -> dict:
        self._check_host_access()
        if not describable(self.dtype):
            # The interface cannot express this dtype (padded records): without the
            # attribute, NumPy builds the array through __array__, exactly.
            raise AttributeError("__array_interface__")
        return {
            "version": 3,
            "shape": self.shape,
            "typestr": self.dtype.str,
            "descr": self.dtype.descr,
            "data": (self.ptr, self.readonly),
            "strides": self.strides,
        }

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        self._check_host_access()
        array = pointer_array(
            self.ptr,
            self.shape,
            self.dtype,
            self.readonly,
            self._allocation,
            self.strides,
        )
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        return array.copy() if copy else array

    def __getitem__(self, key: str) -> Any:
        return self.__array_interface__[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.__array_interface__.get(key, default)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Any = None,
        dl_device: Any = None,
        copy: Any = None,
    ) -> Any:
        array = np.asarray(self)
        kwargs: dict[str, Any] = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        if dl_device is not None:
            kwargs["dl_device"] = dl_device
        if copy is not None:
            kwargs["copy"] = copy
        return array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __repr__(self) -> str:
        return (
            f"HostView(ptr=0x{self.ptr:x}, shape={self.shape}, "
            f"dtype={self.dtype}, readonly={self.readonly})"
        )


def launched_arguments(args: tuple) -> tuple:
    """The arguments of launched work (``Backend.launch_callable``): each task view as
    a NumPy array of its memory (checked: its task has not ended), anything else as
    it is."""
    for argument in args:
        if isinstance(argument, HostView):
            return tuple(map(_launched_argument, args))
    return args


def _launched_argument(argument: Any) -> Any:
    if not isinstance(argument, HostView):
        return argument
    argument._check()
    return pointer_array(
        argument.ptr,
        argument.shape,
        argument.dtype,
        argument.readonly,
        argument._allocation,
        argument.strides,
    )


class Launched:
    """Work launched on a stream: ``fn(*arguments)``, a failure noted with its source
    and given to the stream's error sink with its submission order."""

    __slots__ = ("fn", "arguments", "stream", "source", "order")

    def __init__(
        self,
        fn: Callable[..., Any],
        arguments: Sequence[Any],
        stream: Stream,
        source: str,
        order: int,
    ) -> None:
        self.fn = fn
        self.arguments = arguments
        self.stream = stream
        self.source = source
        self.order = order

    def __call__(self) -> None:
        try:
            self.fn(*self.arguments)
        except BaseException as exc:  # noqa: BLE001 - raised at the next sync point
            sink = self.stream.error_sink
            if sink is None:
                raise
            add_note(exc, f"raised by {self.source}")
            sink(exc, self.order)


def launch_work(
    backend: Any,
    stream: Stream,
    own: type,
    fn: Callable[..., Any],
    args: tuple,
    source: str,
) -> None:
    """``Backend.launch_callable`` of the host-memory backends: ``fn(*args)`` enqueued
    on ``stream`` (a recording stream's handle stands for the backend's stream of
    type ``own``), its task views as NumPy arrays of their memory."""
    if callback_state.active:
        raise ScopeError(
            "launch() called from work running in stream order; "
            "enqueue from the task body instead"
        )
    if not isinstance(stream, own):
        stream = backend.stream_from_handle(int(stream.handle))
    work = Launched(fn, launched_arguments(args), stream, source, next(work_ids))
    backend.enqueue_call(stream, work)


class HostMemory:
    """Device allocations as NumPy buffers, and where each address lives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: list[int] = []  # sorted
        self._ranges: dict[int, tuple[int, int]] = {}  # start -> (end, device)

    def allocate(self, device: int, nbytes: int, dtype: np.dtype) -> Allocation:
        """A poisoned buffer of ``nbytes`` on ``device``."""
        buffer = np.empty(max(nbytes, 1), dtype=np.uint8)
        poison(buffer, dtype)
        ptr = buffer.ctypes.data
        with self._lock:
            if ptr not in self._ranges:  # else a dropped, never freed buffer's
                bisect.insort(self._starts, ptr)
            self._ranges[ptr] = (ptr + buffer.nbytes, device)
        return Allocation(ptr, nbytes, device, dtype, buffer)

    def allocate_composite(
        self,
        device: int,
        chunk_devices: Sequence[int],
        chunk: int,
        nbytes: int,
        dtype: np.dtype,
    ) -> CompositeAllocation:
        """A poisoned buffer of ``nbytes`` whose ``i``-th ``chunk`` bytes are
        registered on ``chunk_devices[i]`` (:meth:`locate` answers per chunk)."""
        buffer = np.empty(max(nbytes, 1), dtype=np.uint8)
        poison(buffer, dtype)
        ptr = buffer.ctypes.data
        end = ptr + buffer.nbytes
        runs: list[int] = []
        with self._lock:
            for index, device in enumerate(chunk_devices):
                start = ptr + index * chunk
                if start >= end:
                    break
                if runs and self._ranges[runs[-1]][1] == device:
                    self._ranges[runs[-1]] = (min(start + chunk, end), device)
                    continue
                bisect.insort(self._starts, start)
                self._ranges[start] = (min(start + chunk, end), device)
                runs.append(start)
        return CompositeAllocation(
            ptr, nbytes, device, dtype, chunk, tuple(chunk_devices), tuple(runs), buffer
        )

    def release(self, allocation: Allocation) -> None:
        """Poison ``allocation`` and forget it (arrays still viewing it keep the
        buffer alive and see the poison)."""
        buffer = allocation.owner
        if buffer is not None:
            poison(buffer, allocation.dtype)
        starts = (
            allocation.pieces
            if isinstance(allocation, CompositeAllocation)
            else (allocation.ptr,)
        )
        with self._lock:
            for start in starts:
                if self._ranges.pop(start, None) is not None:
                    index = bisect.bisect_left(self._starts, start)
                    del self._starts[index]
        allocation.owner = None

    def locate(self, ptr: int) -> int:
        """The device of the buffer holding ``ptr``; ``HOST`` for any other address."""
        device = self.allocated(ptr)
        return HOST if device is None else device

    def allocated(self, ptr: int) -> int | None:
        """The device of the allocation holding ``ptr``, ``None`` when no allocation
        of this memory does (user memory)."""
        with self._lock:
            index = bisect.bisect_right(self._starts, ptr) - 1
            if index >= 0:
                end, device = self._ranges[self._starts[index]]
                if ptr < end:
                    return device
        return None


def combine_at(dst: int, src: int, count: int, dtype: np.dtype, op: str) -> None:
    """``dst[i] = op(dst[i], src[i])`` on host-addressable memory (now)."""
    from .._core.reduce import OPS

    if not count:
        return
    nbytes = count * np.dtype(dtype).itemsize
    target = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(dst)).view(
        dtype
    )
    source = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(src)).view(
        dtype
    )
    OPS[op].ufunc(target, source, out=target)


_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def element_array(
    ptr: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...] | None,
    itemsize: int,
    readonly: bool = False,
) -> np.ndarray:
    """The elements of a layout as an array of ``itemsize``-byte words (raw bytes
    with a last axis of ``itemsize`` when no word type fits), over host-addressable
    memory, without a copy."""
    word = _WORDS.get(itemsize)
    if strides is None:
        strides = dense_strides(shape, itemsize)
    if (
        word is not None
        and ptr % itemsize == 0
        and all(s % itemsize == 0 for s in strides)
    ):
        return pointer_array(ptr, shape, np.dtype(word), readonly, None, strides)
    return pointer_array(
        ptr,
        tuple(shape) + (itemsize,),
        np.dtype(np.uint8),
        readonly,
        None,
        tuple(strides) + (1,),
    )


def copy_elements(
    dst: int,
    dst_strides: tuple[int, ...] | None,
    src: int,
    src_strides: tuple[int, ...] | None,
    shape: tuple[int, ...],
    itemsize: int,
) -> None:
    """Copy the elements of ``shape`` between two layouts in host-addressable memory
    (now): only the elements' bytes are written."""
    np.copyto(
        element_array(dst, shape, dst_strides, itemsize),
        element_array(src, shape, src_strides, itemsize, readonly=True),
    )


def python_kernel(
    launch: KernelLaunch,
    host_array: Callable[[Allocation, tuple[int, ...], np.dtype, bool], np.ndarray],
) -> tuple[Callable[..., Any], tuple]:
    """The Python callable of a ``cuda_kernel`` launch and the values it is called with.

    Every argument that is the address of one of the task's instances becomes a NumPy
    array of that instance (read-only unless the task writes it); ctypes scalars
    become their values, ctypes structures copies taken now.

    Raises
    ------
    BackendUnavailableError
        The kernel is a CUDA function.
    TypeError
        The kernel is not callable.
    """
    kernel = launch.kernel
    if isinstance(kernel, int) or (type(kernel).__module__ or "").startswith(
        ("cuda.core", "cuda.bindings", "cupy")
    ):
        raise BackendUnavailableError(
            f"{launch.label}: {type(kernel).__name__} is a CUDA function, which needs "
            "the CUDA backend; here launch a Python callable (called as kernel(*args) "
            "with NumPy arrays for k.get_arg(i))"
        )
    if not callable(kernel):
        raise TypeError(
            f"launch: kernel must be a Python callable on a backend without "
            f"a GPU, got {type(kernel).__name__}"
        )
    writable: dict[int, bool] = {}
    found: dict[int, tuple[Allocation, tuple[int, ...], np.dtype]] = {}
    for allocation, shape, dtype, writes in launch.buffers:
        if allocation.ptr:
            found[allocation.ptr] = (allocation, shape, dtype)
            writable[allocation.ptr] = writable.get(allocation.ptr, False) or writes
    arrays = {
        ptr: host_array(allocation, shape, dtype, not writable[ptr])
        for ptr, (allocation, shape, dtype) in found.items()
    }
    return kernel, tuple(_kernel_value(arg, arrays) for arg in launch.args)


def _kernel_value(arg: Any, arrays: dict[int, np.ndarray]) -> Any:
    """What a Python kernel receives for ``arg``."""
    if isinstance(arg, ctypes._SimpleCData):
        arg = arg.value
    elif isinstance(arg, (ctypes.Structure, ctypes.Union, ctypes.Array)):
        return type(arg).from_buffer_copy(arg)  # the value at the call
    if type(arg) is int and arg in arrays:
        return arrays[arg]
    return arg
