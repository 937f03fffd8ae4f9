"""The emulated backend: an asynchronous device model on the CPU.

It is a real device, not a mock, so that CI can prove the runtime's ordering:

State
    ``K`` virtual devices (``STFLOW_EMULATED_DEVICES``, default 2). Their memory is
    ordinary process memory but *separate* from host memory: forgetting a copy gives a
    wrong answer, as on a GPU. Fresh and freed buffers are poisoned (NaN for floating
    types, ``0xA5`` bytes otherwise) so reading uninitialised or freed memory shows.

Streams
    Each stream is a FIFO of operations: *calls* (copies, host callbacks, launched
    work) and *waits* (the head of the stream blocks until an event has completed).
    An event is a position in its stream, not an operation: it completes when the
    stream has completed every operation enqueued before it was recorded (so a
    record costs the scheduler nothing, and an event on an idle stream is complete
    at once).

The scheduler
    One thread, the whole algorithm in :meth:`_Scheduler.run`: under a lock, collect
    the streams whose head operation is ready (a call, or a wait whose event has
    completed), pick one with a seeded random generator
    (``STFLOW_EMULATION_SEED``), and run its head; calls run outside the lock,
    satisfied waits complete at once. Because the choice between ready streams is
    random, a dependency the runtime forgot to enforce changes the result for some
    seed. The host blocks on an event with :meth:`EmulatedBackend.synchronize`, which
    sleeps on the same condition variable.

Task bodies run on the caller's thread (``bodies_wait_on_host``): the runtime records
an event after a task's prerequisites and blocks on it, while the scheduler keeps
running other streams, so a missing edge is a real race.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import random
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core.access import READ
from .._core.errors import ScopeError, add_note, work_ids
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
from ._emulated_guard import ReadGuard
from ._host_memory import (
    HostMemory,
    HostView,
    combine_at,
    copy_elements,
    element_array,
    launch_work,
    poison,
    python_kernel,
)

__all__ = ["EmulatedBackend", "EmulatedView", "get_backend", "poison"]


class EmulatedView(HostView):
    """What task bodies get on the emulated backend: a :class:`HostView` whose missing
    ``__cuda_array_interface__`` says why.

    The memory is host memory, so the view has no CUDA Array Interface: reading the
    attribute raises an ``AttributeError`` (``hasattr`` stays false, so libraries and
    adapters that probe for it choose their host path) whose message names the
    emulated backend and what to use instead.
    """

    __slots__ = ()

    @property
    def __cuda_array_interface__(self) -> Any:
        raise AttributeError(
            f"{self!r} is a task view of stflow's emulated backend, whose memory is host "
            "memory: it has no __cuda_array_interface__. Use numpy.asarray(view) "
            "(__array_interface__, zero-copy), DLPack (torch.from_dlpack(view)), the "
            "adapters (stflow.interop.pytorch / numba / cupy), or t.run(fn), which "
            "gives NumPy arrays here and CuPy arrays on CUDA; CUDA libraries need "
            "backend='cuda'",
            name="__cuda_array_interface__",
            obj=self,
        )

    def __repr__(self) -> str:
        return (
            f"EmulatedView(ptr=0x{self.ptr:x}, shape={self.shape}, "
            f"dtype={self.dtype}, readonly={self.readonly})"
        )


_CALL, _WAIT = 0, 2
COMPOSITE_CHUNK = 256
"""Bytes per chunk of a composite instance: small, so that small test data already
spread over several virtual devices."""
_HOLD_SECONDS = 50e-6


class EmulatedStream(Stream):
    __slots__ = ("queue", "capture", "enqueued", "completed", "calls", "__weakref__")

    def __init__(
        self, handle: int, device: int, error_sink: Callable[..., None] | None = None
    ) -> None:
        super().__init__(handle, device, max(device, 0), error_sink)
        self.queue: deque[tuple[int, Any]] = deque()
        self.capture: Any = None  # a graph capture (``_emulated_graphs``)
        self.enqueued = 0  # operations ever enqueued (an event's position counts them)
        self.completed = 0  # of which completed, in order
        self.calls = 0  # calls queued or running (pending_calls)


class EmulatedEvent(Event):
    """A position in its stream: complete once the stream has completed the
    ``position`` operations enqueued before the event was recorded."""

    __slots__ = ("position",)

    def __init__(self, stream: EmulatedStream, seq: int, position: int) -> None:
        self.stream = stream  # Event.__init__ inlined: one is made per task
        self.seq = seq
        self.producer = None
        self.position = position

    @property
    def done(self) -> bool:
        return self.stream.completed >= self.position  # type: ignore[attr-defined]


class _Scheduler:
    """Runs ready stream operations in a seeded random order on one thread."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        lock = threading.Lock()
        self.cv = threading.Condition(lock)  # host threads waiting for events
        self.work = threading.Condition(lock)  # the scheduler waiting for work
        self.active: dict[EmulatedStream, None] = {}  # streams with queued work
        self.waiters = 0  # host threads blocked on events
        self.idle = False  # the scheduler waits for work (nothing is ready)
        self.thread = threading.Thread(
            target=self.run, name="stflow-emulated-device", daemon=True
        )
        self.thread.start()

    def enqueue(self, stream: EmulatedStream, kind: int, payload: Any) -> None:
        with self.cv:
            stream.queue.append((kind, payload))
            stream.enqueued += 1
            if kind == _CALL:
                stream.calls += 1
            if stream not in self.active:
                self.active[stream] = None
            if self.idle:
                self.work.notify()

    def complete_markers(self, stream: EmulatedStream) -> bool:
        """Complete the satisfied waits at the head of ``stream``.

        Called with the lock held by a host thread about to block: when nothing but
        satisfied waits precede what it waits for, there is no device work to wait
        for. Returns True when anything completed.
        """
        queue = stream.queue
        completed = False
        while queue:
            kind, payload = queue[0]
            if kind == _CALL or not payload.done:
                break
            queue.popleft()
            stream.completed += 1
            completed = True
        if completed:
            if not queue:
                self.active.pop(stream, None)
            self._completed()
        return completed

    def _completed(self) -> None:
        """After operations completed (the lock held): events may be complete, and
        waits on them ready."""
        if self.waiters:
            self.cv.notify_all()
        if self.idle:
            self.work.notify()

    def run(self) -> None:
        callback_state.active = True
        cv = self.cv
        work = self.work
        active = self.active
        while True:
            with cv:
                while True:
                    ready = [
                        s for s in active if s.queue[0][0] != _WAIT or s.queue[0][1].done
                    ]
                    if ready:
                        # Let the host run ahead now and then: work it forgot to wait
                        # for is then still pending when it touches the data (a host
                        # thread that blocks ends the pause).
                        if self.waiters or self.rng.random() < 0.5:
                            break
                        work.wait(_HOLD_SECONDS)
                        continue
                    self.idle = True
                    work.wait()
                    self.idle = False
                stream = ready[0] if len(ready) == 1 else self.rng.choice(ready)
                kind, payload = stream.queue[0]
                if kind != _CALL:  # a satisfied wait
                    stream.queue.popleft()
                    stream.completed += 1
                    if self.waiters:
                        cv.notify_all()
                    if not stream.queue:
                        del active[stream]
                    continue
            try:
                payload()
            except BaseException as exc:  # noqa: BLE001 - reported, never lost
                try:
                    _report(stream, exc)
                except BaseException:  # noqa: BLE001 - the device must keep running
                    import traceback

                    sys.stderr.write(
                        "stflow: could not report an error of emulated "
                        "device work:\n" + traceback.format_exc()
                    )
            finally:
                with cv:
                    stream.queue.popleft()
                    stream.completed += 1
                    stream.calls -= 1
                    if not stream.queue:
                        del active[stream]
                    if self.waiters:
                        cv.notify_all()


def _report(stream: Stream, exc: BaseException) -> None:
    sink = stream.error_sink
    if sink is not None:
        sink(exc)
    else:  # pragma: no cover - work on a stream nobody owns
        import warnings

        warnings.warn(
            f"stflow: error in emulated device work with no owner: {exc!r}",
            RuntimeWarning,
            stacklevel=1,
        )


class EmulatedBackend(EmulatedPartitions, Backend):
    """K virtual devices driven by one seeded random scheduler thread."""

    name = "emulated"
    bodies_wait_on_host = True
    guards_reads = True
    cuda_contexts = False

    def __init__(self, devices: int, seed: int) -> None:
        self.seed = seed
        self._devices = devices
        self._scheduler = _Scheduler(seed)
        self._handles = itertools.count(0x5F0010, 0x10)
        self._streams: weakref.WeakValueDictionary[int, EmulatedStream] = (
            weakref.WeakValueDictionary()
        )
        self._memory = HostMemory()
        self._pinned: list[tuple[int, int]] = []  # register_host's ranges
        self._local = CurrentDevice()
        self._default_stream = self.create_stream(0)

    @property
    def device_count(self) -> int:
        return self._devices

    def describe(self) -> str:
        return f"emulated backend, {self._devices} virtual device(s), seed {self.seed}"

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
    ) -> EmulatedStream:
        stream = EmulatedStream(next(self._handles), device, error_sink)
        stream.partition = partition  # an SM partition of a virtual device: a label
        self._streams[stream.handle] = stream
        return stream

    def destroy_stream(self, stream: Stream) -> None:
        self._streams.pop(stream.handle, None)

    def stream_from_handle(self, handle: int) -> EmulatedStream:
        if handle == 0:
            return self._default_stream
        stream = self._streams.get(handle)
        if stream is None:
            raise ValueError(
                f"0x{handle:x} is not a stream of the emulated backend; on this backend "
                "use stream handles that stflow gave you (task.stream_ptr(), fence())"
            )
        return stream

    def record(self, stream: Stream) -> EmulatedEvent:
        stream.recorded += 1
        event = EmulatedEvent(stream, stream.recorded, stream.enqueued)  # type: ignore[arg-type, attr-defined]
        stream.last_event = event
        return event

    def wait(self, stream: Stream, event: Event) -> None:
        if not event.done:  # type: ignore[attr-defined]
            self._scheduler.enqueue(stream, _WAIT, event)  # type: ignore[arg-type]

    def query(self, event: Event) -> bool:
        return event.done  # type: ignore[attr-defined]

    def synchronize(self, event: Event) -> None:
        if event.done:  # type: ignore[attr-defined]
            return
        if callback_state.active:
            raise ScopeError(
                "device work must not block on the device; do not wait "
                "for stflow work from a host callback or launched function"
            )
        scheduler = self._scheduler
        cv = scheduler.cv
        with cv:
            if scheduler.complete_markers(event.stream):  # type: ignore[arg-type]
                if event.done:  # type: ignore[attr-defined]
                    return
            scheduler.waiters += 1
            scheduler.work.notify()  # end a pause of the scheduler
            try:
                while not event.done:  # type: ignore[attr-defined]
                    cv.wait()
            finally:
                scheduler.waiters -= 1

    def enqueue_call(self, stream: Stream, fn: Callable[[], None]) -> None:
        """Enqueue ``fn()`` on ``stream``; exceptions go to ``stream.error_sink``.

        On a capturing stream, ``fn`` becomes a node of the graph instead.
        """
        capture = stream.capture  # type: ignore[attr-defined]
        if capture is not None:
            capture.add(fn)
        else:
            self._scheduler.enqueue(stream, _CALL, fn)  # type: ignore[arg-type]

    @functools.cached_property
    def graphs(self) -> Any:
        """Graph construction and launch (:class:`~._emulated_graphs.EmulatedGraphs`)."""
        from ._emulated_graphs import EmulatedGraphs

        return EmulatedGraphs(self)

    # -- memory ------------------------------------------------------------------
    def allocate(
        self, device: int, nbytes: int, stream: Stream | None, dtype: np.dtype
    ) -> Allocation:
        return self._memory.allocate(device, nbytes, dtype)

    def composite_granularity(self, devices: Sequence[int]) -> int:
        return COMPOSITE_CHUNK

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
        if stream is None:
            self._memory.release(allocation)
        else:
            memory = self._memory
            self.enqueue_call(stream, lambda: memory.release(allocation))

    def locate(self, ptr: int) -> int:
        return self._memory.locate(ptr)

    # -- page-locking, played only where asked (``pinned_host_required``) --------------
    def register_host(self, array: np.ndarray) -> Any:
        """Page-lock nothing, but note the range where host instances must be
        page-locked (tests set ``pinned_host_required`` to play CUDA's rules): then
        :meth:`is_pinned` answers as CUDA would."""
        if not self.pinned_host_required:
            return None
        ptr = int(array.__array_interface__["data"][0])
        token = (ptr, ptr + array.nbytes)
        self._pinned.append(token)
        return token

    def unregister_host(self, token: Any) -> None:
        self._pinned.remove(token)

    def is_pinned(self, ptr: int, nbytes: int) -> bool:
        """The runtime's own host allocations are (as ``cuMemAllocHost``'s on CUDA),
        and user memory inside a range :meth:`register_host` noted."""
        if self._memory.allocated(ptr) is not None:
            return True
        end = ptr + max(nbytes, 1)
        return any(start <= ptr and end <= stop for start, stop in self._pinned)

    # -- copies and host work ----------------------------------------------------
    def copy(
        self,
        dst: int,
        src: int,
        nbytes: int,
        stream: Stream,
        source_ready: bool = False,
    ) -> None:
        # A ready source is read now, as the CUDA backend's staging may: a wrong
        # claim of the runtime then shows as a wrong result.
        if nbytes:
            source: Any = ctypes.string_at(src, nbytes) if source_ready else src

            def move() -> None:
                ctypes.memmove(dst, source, nbytes)

            self.enqueue_call(stream, move)

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
        if 0 in shape:
            return
        if source_ready:  # read now (see copy)
            taken = element_array(src, shape, src_strides, itemsize).copy()

            def move() -> None:
                np.copyto(element_array(dst, shape, dst_strides, itemsize), taken)

            self.enqueue_call(stream, move)
            return
        self.enqueue_call(
            stream,
            functools.partial(
                copy_elements, dst, dst_strides, src, src_strides, shape, itemsize
            ),
        )

    def combine(
        self, dst: int, src: int, count: int, dtype: np.dtype, op: str, stream: Stream
    ) -> None:
        if count:
            self.enqueue_call(stream, lambda: combine_at(dst, src, count, dtype, op))

    def fill(self, ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
        if not nbytes:
            return
        values = np.frombuffer(pattern, dtype=np.uint8)

        def fill() -> None:
            memory = (ctypes.c_uint8 * nbytes).from_address(ptr)
            target = np.ctypeslib.as_array(memory).reshape(-1, len(pattern))
            target[:] = values

        self.enqueue_call(stream, fill)

    def launch_host_func(self, stream: Stream, fn: Callable[[], None]) -> None:
        self.enqueue_call(stream, fn)

    def launch_callable(
        self, stream: Stream, fn: Callable[..., Any], args: tuple, source: str
    ) -> None:
        """Enqueue ``fn(*args)`` on ``stream``; its :class:`EmulatedView` arguments
        arrive as NumPy arrays of their memory (also the views of a task recorded
        into a graph, which refuse host access: the work reads them when the graph
        runs)."""
        launch_work(self, stream, EmulatedStream, fn, args, source)

    def set_loop_condition(self, handle: int, value: Any) -> None:
        from ._emulated_graphs import set_conditional

        set_conditional(handle, value)

    def launch_kernel(self, stream: Stream, launch: KernelLaunch) -> None:
        """Enqueue ``launch.kernel(*args)``, a Python callable, in stream order (see
        :func:`~._host_memory.python_kernel` for what it receives)."""
        kernel, values = python_kernel(launch, self.host_array)
        sink = stream.error_sink
        order = next(work_ids)  # errors are reported in submission order

        def run() -> None:
            try:
                kernel(*values)
            except BaseException as exc:  # noqa: BLE001 - raised at the next sync point
                if sink is None:
                    raise
                add_note(exc, f"raised by a kernel launched from {launch.label}")
                sink(exc, order)

        self.enqueue_call(stream, run)

    # -- timestamps --------------------------------------------------------------
    def timestamp(self, stream: Stream | None) -> list[Any]:
        """``[seconds, event]``: the host clock read when ``stream`` gets here."""
        if stream is None:
            return [time.perf_counter(), None]
        stamp: list[Any] = [float("nan"), None]

        def take() -> None:
            stamp[0] = time.perf_counter()

        self.enqueue_call(stream, take)
        stamp[1] = EmulatedEvent(stream, -1, stream.enqueued)  # type: ignore[arg-type, attr-defined]
        return stamp

    def timestamp_seconds(self, stamp: list[Any]) -> float:
        """The seconds of a timestamp; blocks until the stream has reached it."""
        if stamp[1] is not None:
            self.synchronize(stamp[1])
        return float(stamp[0])

    # -- views -------------------------------------------------------------------
    def task_view(
        self,
        allocation: Allocation,
        offset: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        readonly: bool,
    ) -> HostView:
        return EmulatedView(
            allocation,
            allocation.ptr + offset,
            shape,
            dtype,
            readonly,
            allocation.strides,
        )

    # -- the read-only check: read() data must not change ------------------------------
    def pending_calls(self, stream: Stream) -> bool:
        """True when work (not only markers) is still queued on ``stream``."""
        return isinstance(stream, EmulatedStream) and stream.calls > 0

    def guard_reads(self, plan: Any) -> ReadGuard | None:
        """The guard of the instances a started task only reads (see
        :class:`ReadGuard`), not armed yet; ``None`` when the task reads nothing."""
        entries: list[tuple[Any, Allocation]] = []
        seen: set[int] = set()
        for access in plan.accesses:
            if access.mode != READ:
                continue
            instance = access.instance
            allocation = None if instance is None else instance.allocation
            if allocation is None or not access.state.nbytes or allocation.ptr in seen:
                continue
            seen.add(allocation.ptr)
            entries.append((access.state, allocation))
        return ReadGuard(self, entries) if entries else None


_backend: EmulatedBackend | None = None
_backend_lock = threading.Lock()


def get_backend() -> EmulatedBackend:
    """The process-wide emulated backend, created on first use."""
    global _backend
    if _backend is None:
        with _backend_lock:
            if _backend is None:
                from .._core.config import config

                cfg = config()
                _backend = EmulatedBackend(cfg.emulated_devices, cfg.emulation_seed)
    return _backend
