"""The null backend: every operation completes the moment it is enqueued.

No threads, no device, no waiting: copies are ``memmove`` calls made at once, host
functions and ``cuda_kernel`` launches (Python callables) run at once on the calling
thread, and every event has completed when it is recorded. Running the work in
submission order is a valid schedule of any task flow, so results are those of the
sequential program.

Its devices are ``K`` virtual devices (``STFLOW_EMULATED_DEVICES``, default 2) whose
memory is host memory kept separate from user arrays and poisoned when fresh or freed
(``_host_memory.py``), so the runtime's copies are real and a forgotten one shows, as
on the emulated backend; unlike there, nothing runs concurrently, so it cannot reveal a
missing dependency. What it is for:

- measuring the runtime's own cost: a task on the null backend costs exactly the
  Python work of submit → acquire → release (``benchmarks/runtime_overhead.py``);
- a deterministic single-threaded backend for debugging a program's logic;
- proof that the backend contract (``_base.py``) is complete: this module implements
  it from that file alone.

Graph mode works here too: while a stream captures, what is enqueued on it becomes
a node of the graph instead of running (the graph engine of the emulated backend,
``_emulated_graphs.py``), and a launched graph runs at once, its nodes in a seeded
random order that respects the edges, so a missing edge inside a graph can show even
on this backend. Launched Python work (``Backend.launch_callable``: ``task.run``
bodies) runs at once, or becomes a node while its stream captures.

Select it with ``stf.context(backend="null")`` or ``STFLOW_BACKEND=null``.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._base import (
    Allocation,
    Backend,
    CompositeAllocation,
    CurrentDevice,
    Event,
    KernelLaunch,
    Stream,
    callback_state,
)
from ._emulated_green import EmulatedPartitions
from ._host_memory import (
    HostMemory,
    HostView,
    combine_at,
    copy_elements,
    launch_work,
    python_kernel,
)

__all__ = ["NullBackend", "get_backend"]


class NullStream(Stream):
    """A stream of the null backend: ``capture`` is the graph capture it is in, if any
    (``_emulated_graphs.Capture``)."""

    __slots__ = ("capture", "__weakref__")

    def __init__(
        self,
        handle: int,
        device: int,
        error_sink: Callable[..., None] | None = None,
    ) -> None:
        super().__init__(handle, device, max(device, 0), error_sink)
        self.capture: Any = None


class NullBackend(EmulatedPartitions, Backend):
    """``devices`` virtual devices; every operation completes when enqueued."""

    name = "null"
    bodies_wait_on_host = False
    cuda_contexts = False

    def __init__(self, devices: int = 2) -> None:
        self._devices = devices
        self._handles = itertools.count(0x4E0010, 0x10)
        self._streams: weakref.WeakValueDictionary[int, NullStream] = (
            weakref.WeakValueDictionary()
        )
        self._foreign: dict[int, NullStream] = {}
        self._memory = HostMemory()
        self._local = CurrentDevice()
        self.live_streams = 0
        """Streams created and not yet destroyed (for leak checks)."""

    # -- devices -----------------------------------------------------------------
    @property
    def device_count(self) -> int:
        return self._devices

    def describe(self) -> str:
        return f"null backend, {self._devices} virtual device(s), synchronous"

    def current_device(self) -> int:
        return self._local.device

    def set_current_device(self, device: int) -> None:
        self._local.device = device

    # -- streams and events ------------------------------------------------------
    def create_stream(
        self,
        device: int,
        error_sink: Callable[..., None] | None = None,
        partition: Any = None,
    ) -> Stream:
        self.live_streams += 1
        stream = NullStream(next(self._handles), device, error_sink)
        stream.partition = partition
        self._streams[stream.handle] = stream
        return stream

    def destroy_stream(self, stream: Stream) -> None:
        if stream.handle not in self._foreign:
            self.live_streams -= 1
            self._streams.pop(stream.handle, None)

    def stream_from_handle(self, handle: int) -> NullStream:
        stream = self._streams.get(handle) or self._foreign.get(handle)
        if stream is None:
            stream = self._foreign[handle] = NullStream(handle, 0)
        return stream

    def record(self, stream: Stream) -> Event:
        seq = stream.recorded = stream.recorded + 1
        event = Event(stream, seq)
        stream.last_event = event
        return event

    def wait(self, stream: Stream, event: Event) -> None:
        """Nothing to do: ``event`` has completed."""

    def query(self, event: Event) -> bool:
        return True

    def synchronize(self, event: Event) -> None:
        """Nothing to do: ``event`` has completed."""

    # -- memory ------------------------------------------------------------------
    def allocate(
        self, device: int, nbytes: int, stream: Stream | None, dtype: np.dtype
    ) -> Allocation:
        return self._memory.allocate(device, nbytes, dtype)

    def composite_granularity(self, devices: Sequence[int]) -> int:
        return 4096

    def allocate_composite(
        self,
        device: int,
        chunk_devices: Sequence[int],
        chunk: int,
        nbytes: int,
        dtype: np.dtype,
    ) -> CompositeAllocation:
        return self._memory.allocate_composite(
            device, chunk_devices, chunk, nbytes, dtype
        )

    def free(self, allocation: Allocation, stream: Stream | None) -> None:
        self._memory.release(allocation)

    def locate(self, ptr: int) -> int:
        return self._memory.locate(ptr)

    # -- graphs ------------------------------------------------------------------
    @functools.cached_property
    def graphs(self) -> Any:
        """Graph construction and launch: the emulated backend's graph engine, whose
        launches run here at once (:meth:`enqueue_call`)."""
        from ._emulated_graphs import EmulatedGraphs

        return EmulatedGraphs(self)

    def enqueue_call(self, stream: Stream, fn: Callable[[], None]) -> None:
        """Run ``fn()`` as device work on ``stream`` now; on a capturing stream it
        becomes a node of the graph instead."""
        capture = stream.capture  # type: ignore[attr-defined]
        if capture is not None:
            capture.add(fn)
        else:
            self._run(stream, fn, ())

    def _captured(self, stream: Stream, fn: Callable[..., Any], *args: Any) -> bool:
        """True when ``stream`` captures: ``fn(*args)`` became a node of its graph."""
        capture = stream.capture  # type: ignore[attr-defined]
        if capture is None:
            return False
        capture.add(functools.partial(fn, *args))
        return True

    # -- copies and device work --------------------------------------------------
    def copy(
        self,
        dst: int,
        src: int,
        nbytes: int,
        stream: Stream,
        source_ready: bool = False,
    ) -> None:
        if nbytes and not self._captured(stream, ctypes.memmove, dst, src, nbytes):
            ctypes.memmove(dst, src, nbytes)

    def copy_strided(
        self,
        dst: int,
        dst_strides: tuple[int, ...] | None,
        src: int,
        src_strides: tuple[int, ...] | None,
        shape: tuple[int, ...],
        itemsize: int,
        stream: Stream,
        source_ready: bool = False,
    ) -> None:
        args = (dst, dst_strides, src, src_strides, shape, itemsize)
        if 0 not in shape and not self._captured(stream, copy_elements, *args):
            copy_elements(*args)

    def fill(self, ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
        if nbytes and not self._captured(stream, _fill, ptr, nbytes, pattern):
            _fill(ptr, nbytes, pattern)

    def combine(
        self, dst: int, src: int, count: int, dtype: np.dtype, op: str, stream: Stream
    ) -> None:
        self.enqueue_call(
            stream, functools.partial(combine_at, dst, src, count, dtype, op)
        )

    def launch_host_func(self, stream: Stream, fn: Callable[[], None]) -> None:
        self.enqueue_call(stream, fn)

    def launch_kernel(self, stream: Stream, launch: KernelLaunch) -> None:
        kernel, values = python_kernel(launch, self.host_array)
        self.enqueue_call(stream, functools.partial(kernel, *values))

    def launch_callable(
        self, stream: Stream, fn: Callable[..., Any], args: tuple, source: str
    ) -> None:
        """Run ``fn(*args)`` now (everything before it in stream order has completed),
        its task views as NumPy arrays of their memory; a node of the graph while the
        stream captures."""
        launch_work(self, stream, NullStream, fn, args, source)

    def set_loop_condition(self, handle: int, value: Any) -> None:
        from ._emulated_graphs import set_conditional

        set_conditional(handle, value)

    @staticmethod
    def _run(stream: Stream, fn: Callable[..., Any], args: tuple) -> None:
        """Run ``fn(*args)`` as device work: no submissions from it, failures to the
        stream's error sink."""
        state = callback_state
        previous = state.active
        state.active = True
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - raised at the next sync point
            sink = stream.error_sink
            if sink is None:
                raise
            sink(exc)
        finally:
            state.active = previous

    # -- views -------------------------------------------------------------------
    def task_view(
        self,
        allocation: Allocation,
        offset: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        readonly: bool,
    ) -> HostView:
        return HostView(
            allocation,
            allocation.ptr + offset,
            shape,
            dtype,
            readonly,
            allocation.strides,
        )


def _fill(ptr: int, nbytes: int, pattern: bytes) -> None:
    memory = (ctypes.c_uint8 * nbytes).from_address(ptr)
    target = np.ctypeslib.as_array(memory).reshape(-1, len(pattern))
    target[:] = np.frombuffer(pattern, dtype=np.uint8)


_backend: NullBackend | None = None
_backend_lock = threading.Lock()


def get_backend() -> NullBackend:
    """The process-wide null backend, created on first use."""
    global _backend
    if _backend is None:
        with _backend_lock:
            if _backend is None:
                from .._core.config import config

                _backend = NullBackend(config().emulated_devices)
    return _backend
