"""The runtime behind a context: streams, data, acquire and release.

A :class:`Runtime` owns everything a context needs and is shared by the context and
its borrowed handles. The two halves of every task are here:

``prologue`` (acquire)
    wait until no started-but-unfinished task conflicts with the accesses; ask the
    coherence layer what each access needs; choose the task's stream (preferably one
    that carries a prerequisite); make it wait for the prerequisites it does not
    already imply; allocate missing instances and copy valid data in, in stream order.

``epilogue`` (release)
    record the end event on the task's stream and hand it to the coherence and
    ordering state of every accessed data.

Everything between them (the task body, a host callback) is the caller's business.
Submission is serialised by one lock per runtime; stflow never holds it while running
user code.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import deque
from typing import Any, cast

import numpy as np

from ._coherence import DataState, Instance
from ._deps import READ, WRITE, choose_stream, merge_events, needs_wait
from ._instrument import (DotRecorder, Instrument, NvtxRanges, Statistics,
                          TraceRecorder, WorkRecord, direction)
from ._errors import (BackendUnavailableError, ContextFinalizedError, PlaceError,
                      ScopeError, ShapeError, raise_collected)
from ._logical_data import logical_data
from ._places import AFFINE, data_place
from ._sources import check_dtype, describe_buffer
from .backends._base import (HOST, MANAGED, USER_PAGEABLE, Allocation, Backend, Event,
                             Stream, callback_state)

__all__ = ["Access", "Runtime", "STREAMS_PER_PLACE"]

STREAMS_PER_PLACE = 4
"""Compute streams created (lazily) per execution place."""

_runtime_ids = itertools.count(1)
work_ids = itertools.count(1)
"""Idents of tasks, host callbacks and internal copies (unique in the process)."""
_BYTES = np.dtype(np.uint8)


class Access:
    """One logical data accessed by one task: what, how, where, and the instance."""

    __slots__ = ("ld", "state", "mode", "device", "instance", "source")

    def __init__(self, ld: logical_data, mode: int, device: int) -> None:
        self.ld = ld
        self.state: DataState = ld._state  # type: ignore[assignment]
        self.mode = mode
        self.device = device
        self.instance: Instance | None = None
        self.source: Instance | None = None


class _Counters:
    """Plain counters behind ``ctx.statistics()`` (cheap enough for the hot path)."""

    __slots__ = ("tasks", "host_callbacks", "copies", "bytes", "allocations",
                 "allocated_bytes", "waits_issued", "waits_skipped", "fences")

    def __init__(self) -> None:
        self.tasks = 0
        self.host_callbacks = 0
        self.copies = {"h2d": 0, "d2h": 0, "d2d": 0, "h2h": 0}
        self.bytes = {"h2d": 0, "d2h": 0, "d2d": 0, "h2h": 0}
        self.allocations = 0
        self.allocated_bytes = 0
        self.waits_issued = 0
        self.waits_skipped = 0
        self.fences = 0


class _Pool:
    """The streams of one execution place."""

    __slots__ = ("streams", "members", "next")

    def __init__(self, streams: list[Stream]) -> None:
        self.streams = streams
        self.members = frozenset(streams)
        self.next = 0


def _describe_place(device: int) -> str:
    if device >= 0:
        return f"device {device}"
    return {HOST: "the host", MANAGED: "managed memory",
            USER_PAGEABLE: "the host"}.get(device, str(device))


class Runtime:
    """The state and mechanisms of one context (see the module docstring)."""

    def __init__(self, backend: Backend, caller_stream: Stream | None) -> None:
        self.id = next(_runtime_ids)
        self.backend = backend
        self.lock = threading.RLock()
        self.cv = threading.Condition(self.lock)
        self.pools: dict[int, _Pool] = {}
        self.streams: list[Stream] = []
        self.data: dict[int, DataState] = {}
        self.keys = itertools.count(1)
        self.retired: deque[int] = deque()
        self.retired_keepalive: list[Any] = []
        self.active_tasks: dict[Any, int] = {}   # started task -> thread ident
        self.waiters = 0                           # threads blocked in _block()
        self.errors: list[BaseException] = []
        self.errors_lock = threading.Lock()
        self.finalized = False
        self.closing = False
        self.caller_stream = caller_stream
        self.entry_event: Event | None = None
        self.fence_stream: Stream | None = None
        self.host_registrations: list[Any] = []   # page-locked user buffers
        self.pinned_roots: dict[int, np.ndarray] = {}
        self.instruments: list[Instrument] = []
        self.open_records: dict[int, WorkRecord] = {}
        self.counters = _Counters()
        self._attach_configured_instruments()
        if caller_stream is not None:
            self.entry_event = backend.record(caller_stream)

    # -- instruments and statistics ----------------------------------------------
    def _attach_configured_instruments(self) -> None:
        from ._config import config
        cfg = config()
        if cfg.dot_file:
            self.attach(DotRecorder(cfg.dot_file))
        if cfg.trace_file:
            self.attach(TraceRecorder(cfg.trace_file))
        if cfg.nvtx != "0" and self.backend.name == "cuda":
            try:
                self.attach(NvtxRanges())
            except ImportError:
                if cfg.nvtx == "1":
                    raise BackendUnavailableError(
                        "STFLOW_NVTX=1 needs the nvtx package: pip install "
                        "stflow[nvtx]") from None

    def attach(self, instrument: Instrument) -> None:
        """Add an instrument; it sees the work submitted from now on."""
        with self.lock:
            instrument.attach(self)
            self.instruments.append(instrument)

    def _open_record(self, ident: int, kind: str, label: str, device: int,
                     stream: Stream, accesses: list[Access],
                     prerequisites: list[Event]) -> WorkRecord:
        predecessors = []
        for event in prerequisites:
            producer = getattr(event, "producer", None)
            if producer is not None and producer not in predecessors:
                predecessors.append(producer)
        record = WorkRecord(
            ident, kind, label, device, stream.handle,
            [(access.ld._key, access.ld._label(), access.mode, access.device)
             for access in accesses],
            predecessors, native_stream=stream)
        self.open_records[ident] = record
        for instrument in self.instruments:
            instrument.work_submitted(record)
        return record

    def statistics(self) -> Statistics:
        """The counters of this context so far."""
        counters = self.counters
        seed = getattr(self.backend, "seed", None)
        return Statistics(
            backend=self.backend.name, tasks=counters.tasks,
            host_callbacks=counters.host_callbacks,
            copies_h2d=counters.copies["h2d"], copies_d2h=counters.copies["d2h"],
            copies_d2d=counters.copies["d2d"], copies_h2h=counters.copies["h2h"],
            bytes_h2d=counters.bytes["h2d"], bytes_d2h=counters.bytes["d2h"],
            bytes_d2d=counters.bytes["d2d"], bytes_h2h=counters.bytes["h2h"],
            allocations=counters.allocations, allocated_bytes=counters.allocated_bytes,
            evictions=0, waits_issued=counters.waits_issued,
            waits_skipped=counters.waits_skipped, fences=counters.fences, seed=seed)

    def _allocate(self, device: int, nbytes: int, stream: Stream, dtype: np.dtype,
                  record: WorkRecord | None) -> Allocation:
        allocation = self.backend.allocate(device, nbytes, stream, dtype)
        counters = self.counters
        counters.allocations += 1
        counters.allocated_bytes += nbytes
        if record is not None:
            for instrument in self.instruments:
                instrument.allocation(record, device, nbytes)
        return allocation

    def _copy(self, target: Instance, source: Instance, nbytes: int, stream: Stream,
              record: WorkRecord | None, data: str) -> None:
        self.backend.copy(target.allocation.ptr, source.allocation.ptr,
                          nbytes, stream)
        way = direction(source.device, target.device)
        self.counters.copies[way] += 1
        self.counters.bytes[way] += nbytes
        if record is not None:
            record.transfers.append((data, source.device, target.device, nbytes))
            for instrument in self.instruments:
                instrument.transfer(record, data, source.device, target.device, nbytes)

    # -- errors ------------------------------------------------------------------
    def capture(self, exc: BaseException) -> None:
        """Keep an asynchronous failure for the next synchronisation point."""
        with self.errors_lock:
            self.errors.append(exc)

    def take_errors(self) -> list[BaseException]:
        with self.errors_lock:
            errors, self.errors = self.errors, []
        return errors

    def raise_errors(self, where: str) -> None:
        if self.errors:
            raise_collected(self.take_errors(), where)

    # -- checks ------------------------------------------------------------------
    def check_submit(self, what: str) -> None:
        """Refuse work from a host callback or on a finalized context.

        The callback check comes first: a callback still running while the context
        finalizes is reported for what it did wrong, not as a finalized-context error.
        """
        if callback_state.active:
            raise ScopeError(
                f"{what} called from a host callback or launched function; work "
                "running in stream order must not submit to a context"
            )
        if self.finalized or self.closing:
            raise ContextFinalizedError(
                f"{what} called on a finalized context; create a new context"
            )

    def check_device(self, device: int, what: Any) -> int:
        if device >= self.backend.device_count:
            raise PlaceError(
                f"{what}: device {device} does not exist on the {self.backend.name} "
                f"backend ({self.backend.device_count} device(s))"
            )
        return device

    # -- streams -----------------------------------------------------------------
    def new_stream(self, device: int) -> Stream:
        stream = self.backend.create_stream(device)
        stream.error_sink = self.capture
        if self.entry_event is not None:
            self.backend.wait(stream, self.entry_event)
        self.streams.append(stream)
        return stream

    def pool(self, device: int) -> _Pool:
        pool = self.pools.get(device)
        if pool is None:
            pool = self.pools[device] = _Pool(
                [self.new_stream(device) for _ in range(STREAMS_PER_PLACE)])
        return pool

    # -- data --------------------------------------------------------------------
    def _adopt(self, ld: logical_data | None, state: DataState | None,
               shape: tuple | None, dtype: np.dtype | None, readonly: bool,
               name: str | None, source: Any) -> logical_data:
        key = next(self.keys)
        if ld is None:
            ld = object.__new__(logical_data)
        ld._runtime = self
        ld._state = state
        ld._shape = shape
        ld._dtype = dtype
        ld._readonly = readonly
        ld._symbol = name
        ld._is_token = shape is None
        ld._source = source
        ld._key = key
        if state is not None:
            state.label = ld._label()
            self.data[key] = state
            finalizer = weakref.finalize(ld, _retire, weakref.ref(self), key)
            finalizer.atexit = False
        return ld

    def register(self, ld: logical_data | None, buf: Any, dplace: Any, name: Any,
                 shape: Any = None, dtype: Any = None) -> logical_data:
        """Register a user buffer as the reference instance of a new logical data."""
        self.check_submit("logical_data()")
        _check_name(name)
        if dplace is not None and not isinstance(dplace, data_place):
            raise TypeError(f"dplace must be a data_place or None, got "
                            f"{type(dplace).__name__}")
        source = describe_buffer(buf, self.producer_stream)
        if shape is not None and not hasattr(shape, "__iter__"):
            raise TypeError(f"logical_data: shape must be a tuple of ints such as "
                            f"{source.shape}, got {shape!r}")
        if shape is not None and tuple(shape) != source.shape:
            raise ShapeError(f"shape={tuple(shape)} does not match the buffer's shape "
                             f"{source.shape}")
        if dtype is not None and np.dtype(dtype) != source.dtype:
            raise ShapeError(f"dtype={np.dtype(dtype)} does not match the buffer's "
                             f"dtype {source.dtype}")
        backend = self.backend
        if backend.name == "emulated" and (
                source.interface == "cai" or source.dlpack_device not in (None, (1, 0))):
            raise BackendUnavailableError(
                f"a {type(buf).__name__} in GPU memory needs the CUDA backend; this "
                "context runs on the emulated backend (install stflow[cu12] or "
                "stflow[cu13] on a machine with a GPU, or pass a NumPy array)"
            )
        device = backend.locate(source.ptr) if source.ptr else HOST
        if dplace is not None:
            wanted = dplace.device_id
            if wanted == AFFINE or wanted < MANAGED:
                raise PlaceError(f"{dplace!r} cannot hold a user buffer; give the place "
                                 "where the buffer lives, or omit dplace")
            if wanted != device:
                raise PlaceError(
                    f"dplace={dplace!r} contradicts the buffer, which lives in "
                    f"{_describe_place(device)}; omit dplace to infer it"
                )
        self.sync_producer(source.stream)
        if device == HOST and source.ptr and source.interface != "cai":
            owner = source.keepalive[-1] if isinstance(source.keepalive, tuple) else None
            pinned = (self._pin_host(owner, source.ptr, source.nbytes)
                      if isinstance(owner, np.ndarray)
                      else backend.is_pinned(source.ptr, source.nbytes))
            if not pinned and backend.pinned_host_required:
                device = USER_PAGEABLE
        state = DataState(source.nbytes)
        reference = state.set_reference(device, Allocation(
            source.ptr, source.nbytes, device, source.dtype, source.keepalive))
        if source.ordered_on is not None:    # a DLPack producer's pending work
            with self.lock:
                reference.ready = {source.ordered_on: backend.record(source.ordered_on)}
        return self._adopt(ld, state, source.shape, source.dtype, source.readonly,
                           name, source.keepalive)

    def producer_stream(self, device: tuple[int, int]) -> Stream | None:
        """The stream a DLPack producer in GPU memory (DLPack ``device``) is asked to
        order its pending work on; ``None`` where GPU memory cannot be used."""
        if self.backend.name != "cuda":
            return None
        ordinal = device[1] if device[0] in (2, 13) else HOST
        if ordinal != HOST:
            self.check_device(ordinal, "logical_data")
        with self.lock:
            pool = self.pool(ordinal)
            return pool.streams[pool.next]

    def _pin_host(self, array: np.ndarray, ptr: int, nbytes: int) -> bool:
        """Page-lock the memory of a user host array; True when it is page-locked.

        The whole array owning the memory is registered, once per context: slices of
        one array (blocks of a matrix) share pages at their edges, and the driver
        refuses overlapping registrations. Registrations are undone at finalize,
        after the host has synchronised; a caller-stream context, which does not
        synchronise, registers nothing.
        """
        backend = self.backend
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not root.flags.c_contiguous:
            root = array
        key = int(root.__array_interface__["data"][0])
        if key in self.pinned_roots:
            return True
        if self.caller_stream is None:
            token = backend.register_host(root)
            if token is not None:
                self.pinned_roots[key] = root
                self.host_registrations.append(token)
                return True
        return backend.is_pinned(ptr, nbytes)

    def sync_producer(self, stream: int | None) -> None:
        """Wait for a CUDA Array Interface producer's stream (backends may override)."""
        if stream is not None:
            sync = getattr(self.backend, "synchronize_handle", None)
            if sync is not None:
                sync(stream)

    def empty(self, shape: Any, dtype: Any, name: Any,
              what: str = "logical_data_empty") -> logical_data:
        """A logical data without a user buffer or initial value."""
        self.check_submit(f"{what}()")
        _check_name(name)
        shape = check_shape(shape, what)
        dtype = check_dtype(np.float64 if dtype is None else dtype, what)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self._adopt(None, DataState(nbytes), shape, dtype, False, name, None)

    def token(self) -> logical_data:
        self.check_submit("token()")
        return self._adopt(None, DataState(0), None, None, False, None, None)

    def owns(self, ld: logical_data, what: str) -> None:
        if ld._runtime is not self:
            from ._errors import ContextMismatchError
            if ld._runtime.finalized:
                raise ContextFinalizedError(
                    f"{what}: logical data {ld._label()} belongs to a finalized context")
            raise ContextMismatchError(
                f"{what}: logical data {ld._label()} belongs to another context; "
                "create it in this context (ctx.logical_data(...))"
            )

    # -- acquire and release -----------------------------------------------------
    def _wait_for_conflicts(self, accesses: list[Access], owner_label: Any) -> None:
        """Block while a started task of another thread conflicts with ``accesses``."""
        while True:
            conflict = None
            for access in accesses:
                for other, mode in access.state.active.items():
                    if (mode | access.mode) & WRITE:
                        conflict = (access, other)
                        break
                if conflict:
                    break
            if conflict is None:
                return
            access, other = conflict
            if self.active_tasks.get(other) == threading.get_ident():
                raise ScopeError(
                    f"{owner_label} accesses logical data {access.ld._label()}, which "
                    f"{other._label()} (started, not yet ended on this thread) also "
                    "accesses with a conflicting mode; end that task first"
                )
            self._block()

    def _block(self) -> None:
        """Wait (lock held) until a started task ends."""
        self.waiters += 1
        try:
            self.cv.wait()
        finally:
            self.waiters -= 1

    def prologue(self, accesses: list[Access], device: int, owner: Any,
                 owner_label: Any, ident: int,
                 kind: str = "task") -> tuple[Stream, list[Event], bool]:
        """Acquire ``accesses`` for work ``ident`` on execution place ``device``.

        Returns
        -------
        (stream, prerequisites, enqueued)
            The stream the work must run on, the events it was ordered after, and
            whether anything (waits, allocations, copies) was enqueued for it.
        """
        for access in accesses:
            if access.state.active:
                self._wait_for_conflicts(accesses, owner_label)
                break
        prerequisites: list[Event] = []
        prepare = False                    # allocations or copies to enqueue
        for access in accesses:
            if access.ld._is_token:
                prerequisites.extend(access.state.tracker.prerequisites(access.mode))
                continue
            instance, source, needed = access.state.plan_access(access.mode,
                                                                 access.device)
            access.instance = instance
            access.source = source
            if source is not None or instance.allocation is None:
                prepare = True
            if needed:
                prerequisites.extend(needed)
        pool = self.pools.get(device) or self.pool(device)
        if prerequisites:
            stream, pool.next = choose_stream(pool.streams, pool.members, prerequisites,
                                              pool.next)
        else:
            streams = pool.streams
            stream = streams[pool.next % len(streams)]
            pool.next += 1
        backend = self.backend
        enqueued = False
        if prerequisites:
            counters = self.counters
            for event in (merge_events(prerequisites) if len(prerequisites) > 1
                          else prerequisites):
                if needs_wait(stream, event):
                    backend.wait(stream, event)
                    counters.waits_issued += 1
                    enqueued = True
                else:
                    counters.waits_skipped += 1
        record = None
        if self.instruments:
            record = self._open_record(ident, kind, str(owner_label), device, stream,
                                       accesses, prerequisites)
        copied = False
        for access in accesses if prepare else ():
            target = access.instance
            if target is None:
                continue
            if target.allocation is None:
                target.allocation = self._allocate(
                    target.device, access.state.nbytes, stream,
                    access.ld._dtype or _BYTES, record)
                enqueued = True
            if access.source is not None:
                self._copy(target, access.source, access.state.nbytes, stream, record,
                           access.ld._label())
                copied = True
        if copied:
            event = backend.record(stream)
            if record is not None:
                event.producer = ident
            for access in accesses:
                if access.source is not None and access.instance is not None:
                    access.state.copied(access.instance, access.source, event)
            enqueued = True
        if record is not None:
            for instrument in self.instruments:
                instrument.work_body(record)
        if owner is not None:
            for access in accesses:
                access.state.active[owner] = access.mode
            self.active_tasks[owner] = threading.get_ident()
        return stream, prerequisites, enqueued

    def epilogue(self, accesses: list[Access], stream: Stream, owner: Any,
                 ident: int) -> Event:
        """Release ``accesses``: record the end event and update data state."""
        event = self.backend.record(stream)
        if self.instruments:
            event.producer = ident
            record = self.open_records.pop(ident, None)
            if record is not None:
                for instrument in self.instruments:
                    instrument.work_ended(record)
        for access in accesses:
            access.state.released(access.instance, access.mode, event)
            if owner is not None:
                access.state.active.pop(owner, None)
        if owner is not None:
            self.active_tasks.pop(owner, None)
            if self.waiters:
                self.cv.notify_all()
        return event

    def resolve_device(self, dplace: data_place | None, exec_device: int,
                       affine_device: int, what: Any) -> int:
        if dplace is None:
            return affine_device
        device = dplace._device
        if device == AFFINE:
            return affine_device
        if device >= 0:
            self.check_device(device, what)
        elif device not in (HOST, MANAGED):
            raise PlaceError(f"{what}: {dplace!r} cannot hold an instance")
        return device

    # -- whole-context operations ------------------------------------------------
    def _copy_into(self, state: DataState, target: Instance, source: Instance,
                   prerequisites: list[Event], dtype: np.dtype | None, label: str,
                   keep: bool = True) -> Event:
        """Copy ``source`` into ``target`` on a stream of the target's place.

        ``keep=False`` copies into a temporary buffer that is not an instance.
        """
        pool = self.pool(target.device if target.device >= 0 else HOST)
        stream, pool.next = choose_stream(pool.streams, pool.members, prerequisites,
                                          pool.next)
        backend = self.backend
        for event in merge_events(prerequisites):
            if needs_wait(stream, event):
                backend.wait(stream, event)
                self.counters.waits_issued += 1
            else:
                self.counters.waits_skipped += 1
        record = None
        ident = next(work_ids)
        if self.instruments:
            record = self._open_record(ident, "writeback" if keep else "wait",
                                       f"{'write-back' if keep else 'wait'} {label}",
                                       target.device, stream, [], prerequisites)
        if target.allocation is None:
            target.allocation = self._allocate(target.device, state.nbytes, stream,
                                               dtype or _BYTES, record)
        self._copy(target, source, state.nbytes, stream, record, label)
        if record is not None:
            for instrument in self.instruments:
                instrument.work_body(record)
        event = backend.record(stream)
        if record is not None:
            event.producer = ident
            self.open_records.pop(ident, None)
            for instrument in self.instruments:
                instrument.work_ended(record)
        if keep:
            state.copied(target, source, event)
        state.tracker.release(READ, event)
        return event

    def writeback(self, state: DataState) -> None:
        plan = state.writeback_plan()
        if plan is not None:
            reference, source, prerequisites = plan
            self._copy_into(state, reference, source, prerequisites,
                            reference.allocation.dtype, state.label)

    def drain_retired(self) -> None:
        """Write back and free the data whose logical_data objects were collected."""
        retired = self.retired
        while retired:
            state = self.data.pop(retired.popleft(), None)
            if state is None:
                continue
            self.writeback(state)
            events = merge_events([*state.tracker.all_events(),
                                   *(e for i in state.instances.values()
                                     for e in i.ready.values())])
            owned = [i.allocation for i in state.instances.values()
                     if i.allocation is not None and not i.is_reference]
            if owned:
                pool = self.pool(HOST)
                stream, pool.next = choose_stream(pool.streams, pool.members, events,
                                                  pool.next)
                for event in events:
                    if needs_wait(stream, event):
                        self.backend.wait(stream, event)
                for allocation in owned:
                    self.backend.free(allocation, stream)
            if state.reference is not None:
                self.retired_keepalive.append(state.reference.allocation)

    def outstanding_events(self) -> list[Event]:
        return [s.last_event for s in self.streams if s.last_event is not None]

    def fence(self) -> int:
        """A stream that completes once everything submitted so far has completed."""
        with self.lock:
            self.check_submit("fence()")
            self.drain_retired()
            stream = self.fence_stream
            if stream is None:
                stream = self.fence_stream = self.new_stream(
                    max(self.backend.current_device(), 0))
            for event in self.outstanding_events():
                if needs_wait(stream, event):
                    self.backend.wait(stream, event)
            self.counters.fences += 1
            for instrument in self.instruments:
                instrument.fence()
        self.raise_errors("fence()")
        return int(stream.handle)

    def wait(self, ld: Any) -> np.ndarray:
        """Block until ``ld`` can be read; return a host copy of its value."""
        if not isinstance(ld, logical_data):
            raise TypeError(f"wait() expects a logical_data, got {type(ld).__name__}")
        if ld._is_token:
            raise TypeError(f"wait() on token {ld._label()}: a token holds no data; "
                            "order on it with fence()")
        event = None
        with self.lock:
            self.check_submit("wait()")
            self.owns(ld, "wait()")
            self.drain_retired()
            state = cast(DataState, ld._state)
            dtype = cast(np.dtype, ld._dtype)
            if state.active:
                self._wait_for_conflicts([Access(ld, READ, HOST)], "wait()")
            result: np.ndarray = np.empty(cast(tuple, ld._shape), dtype)
            source = state.valid_source()
            if source is None:
                from .backends.emulated import poison
                poison(result.reshape(-1).view(np.uint8), dtype)
            elif state.nbytes:
                prerequisites = [*state.tracker.prerequisites(READ),
                                 *source.ready.values()]
                target = Instance(HOST, Allocation(
                    result.__array_interface__["data"][0], state.nbytes, HOST, dtype,
                    result))
                event = self._copy_into(state, target, source, prerequisites, dtype,
                                        ld._label(), keep=False)
        if event is not None:
            self.backend.synchronize(event)
        self.raise_errors("wait()")
        return result

    def quiesce(self) -> None:
        """Wait until no task is between start() and end() (other threads)."""
        me = threading.get_ident()
        while self.active_tasks:
            for task, thread in self.active_tasks.items():
                if thread == me:
                    raise ScopeError(f"finalize() while {task._label()} is started but "
                                     "not ended; end the task first")
            self._block()

    def finalize(self) -> None:
        """Complete all work, write results back, free everything (idempotent)."""
        with self.lock:
            if self.finalized:
                return
            if callback_state.active:
                raise ScopeError("finalize() called from a host callback or launched "
                                 "function")
            self.quiesce()
            self.closing = True
            self.drain_retired()
            for state in self.data.values():
                self.writeback(state)
            backend = self.backend
            caller = self.caller_stream
            events = self.outstanding_events()
            if caller is not None:
                for event in events:
                    if needs_wait(caller, event):
                        backend.wait(caller, event)
        if caller is None:
            for event in events:
                backend.synchronize(event)
        with self.lock:
            for state in self.data.values():
                for instance in state.instances.values():
                    if instance.allocation is not None and not instance.is_reference:
                        backend.free(instance.allocation, caller)
                    instance.allocation = None
            self.data.clear()
            self.retired_keepalive.clear()
            for token in self.host_registrations:
                backend.unregister_host(token)
            self.host_registrations.clear()
            self.pinned_roots.clear()
            for stream in self.streams:
                backend.destroy_stream(stream)
            self.streams.clear()
            self.pools.clear()
            self.finalized = True
        for instrument in self.instruments:
            try:
                instrument.finalized()
            except Exception as exc:  # noqa: BLE001 - reported like async errors
                self.capture(exc)
        self.raise_errors("finalize()")


def _retire(runtime_ref: weakref.ref, key: int) -> None:
    runtime = runtime_ref()
    if runtime is not None and not runtime.finalized:
        runtime.retired.append(key)


def _check_name(name: Any) -> None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")


def check_shape(shape: Any, what: str) -> tuple[int, ...]:
    """Validate a shape given as an iterable of positive integers."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"{what}: shape must be a tuple of ints such as (10,), got "
                        f"{shape!r}")
    result = []
    for extent in shape:
        if isinstance(extent, bool) or not hasattr(type(extent), "__index__"):
            raise TypeError(f"{what}: shape {tuple(shape)!r} has a non-integer extent "
                            f"{extent!r}")
        result.append(extent.__index__())
    if not result:
        raise ValueError(f"{what}: shape must not be empty")
    if any(extent <= 0 for extent in result):
        raise ValueError(f"{what}: every extent must be positive, got {tuple(result)}")
    return tuple(result)
