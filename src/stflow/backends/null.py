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

Select it with ``stf.context(backend="null")`` or ``STFLOW_BACKEND=null``.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
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
from ._host_memory import HostMemory, HostView, combine_at, copy_elements, python_kernel

__all__ = ["NullBackend", "get_backend"]


class NullBackend(EmulatedPartitions, Backend):
    """``devices`` virtual devices; every operation completes when enqueued."""

    name = "null"
    bodies_wait_on_host = False
    cuda_contexts = False

    def __init__(self, devices: int = 2) -> None:
        self._devices = devices
        self._handles = itertools.count(0x4E0010, 0x10)
        self._foreign: dict[int, Stream] = {}
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
        stream = Stream(next(self._handles), device, max(device, 0), error_sink)
        stream.partition = partition
        return stream

    def destroy_stream(self, stream: Stream) -> None:
        if stream.handle not in self._foreign:
            self.live_streams -= 1

    def stream_from_handle(self, handle: int) -> Stream:
        stream = self._foreign.get(handle)
        if stream is None:
            stream = self._foreign[handle] = Stream(handle, 0)
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

    # -- copies and device work --------------------------------------------------
    def copy(self, dst: int, src: int, nbytes: int, stream: Stream) -> None:
        if nbytes:
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
    ) -> None:
        if 0 not in shape:
            copy_elements(dst, dst_strides, src, src_strides, shape, itemsize)

    def fill(self, ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
        if nbytes:
            memory = (ctypes.c_uint8 * nbytes).from_address(ptr)
            target = np.ctypeslib.as_array(memory).reshape(-1, len(pattern))
            target[:] = np.frombuffer(pattern, dtype=np.uint8)

    def combine(
        self, dst: int, src: int, count: int, dtype: np.dtype, op: str, stream: Stream
    ) -> None:
        self._run(stream, combine_at, (dst, src, count, dtype, op))

    def launch_host_func(self, stream: Stream, fn: Callable[[], None]) -> None:
        self._run(stream, fn, ())

    def launch_kernel(self, stream: Stream, launch: KernelLaunch) -> None:
        kernel, values = python_kernel(launch, self.host_array)
        self._run(stream, kernel, values)

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
