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
from collections import deque
from typing import Any, cast

import numpy as np

from ._coherence import DataState, Instance
from ._deps import READ, WRITE, choose_stream, merge_events, needs_wait
from ._errors import (BackendUnavailableError, ContextFinalizedError, PlaceError,
                      ScopeError, raise_collected)
from ._instrument import (DotRecorder, Instrument, NvtxRanges, Statistics,
                          TraceRecorder, WorkRecord, direction)
from ._logical_data import logical_data
from ._places import AFFINE, data_place
from ._registry import DataRegistry
from ._scopes import ScopeRuntime
from .backends._base import (HOST, MANAGED, Allocation, Backend, Event, Stream,
                             callback_state)

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


class Runtime(DataRegistry, ScopeRuntime):
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
        self.releases: list[tuple[Event, Any, Any]] = []   # retired data in flight
        self.active_tasks: dict[Any, int] = {}   # started task -> thread ident
        self.waiters = 0                           # threads blocked in _block()
        self.errors: list[tuple[int, BaseException]] = []
        self.errors_lock = threading.Lock()
        self.finalized = False
        self.closing = False
        self.caller_stream = caller_stream
        self.entry_event: Event | None = None
        self.fence_stream: Stream | None = None
        self.pinned_roots: dict[int, list[Any]] = {}   # key -> [array, token, uses]
        self.instruments: list[Instrument] = []
        self.open_records: dict[int, WorkRecord] = {}
        self.counters = _Counters()
        self.scopes = []                            # graph scopes (graph mode)
        self.graph_mode = False                     # context(use_graph=True): epochs
        if backend.records:
            backend.error_sink = self.capture       # type: ignore[attr-defined]
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
            except BackendUnavailableError:
                if cfg.nvtx == "1":
                    raise

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
            waits_skipped=counters.waits_skipped, fences=counters.fences, seed=seed,
            graph_instantiations=self.backend.graph_instantiations,
            graph_updates=getattr(self.backend, "graph_updates", 0))

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
    def capture(self, exc: BaseException, order: int | None = None) -> None:
        """Keep an asynchronous failure for the next synchronisation point.

        ``order`` is the ident of the work that failed (its submission order); errors
        are raised sorted by it. Without one, the error counts as submitted now.
        """
        with self.errors_lock:
            self.errors.append((next(work_ids) if order is None else order, exc))

    def take_errors(self) -> list[BaseException]:
        """The captured errors, in submission order; forgets them."""
        with self.errors_lock:
            errors, self.errors = self.errors, []
        errors.sort(key=lambda entry: entry[0])
        return [exc for _, exc in errors]

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
        real = getattr(stream, "real", None)      # a recording stream's capture stream
        if real is not None:
            real.error_sink = self.capture
        if self.entry_event is not None:
            self.order_after(stream, [self.entry_event])
        self.streams.append(stream)
        return stream

    def order_after(self, stream: Stream, events: list[Event]) -> bool:
        """Make ``stream`` wait for the ``events`` it does not already imply (and
        count the waits issued and skipped). Returns whether a wait was enqueued."""
        issued = False
        counters = self.counters
        for event in events:
            if needs_wait(stream, event):
                self.backend.wait(stream, event)
                counters.waits_issued += 1
                issued = True
            else:
                counters.waits_skipped += 1
        return issued

    def pool(self, device: int) -> _Pool:
        pool = self.pools.get(device)
        if pool is None:
            pool = self.pools[device] = _Pool(
                [self.new_stream(device) for _ in range(STREAMS_PER_PLACE)])
        return pool

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
            if self.closing or self.finalized:
                raise ContextFinalizedError(f"{owner_label}: the context was finalized "
                                            "while this work waited for a running task")

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
        if self.scopes and self.scopes[-1].repeatable:
            self.hoist_imports(accesses)
        prerequisites: list[Event] = []
        prepare = False                    # allocations or copies to enqueue
        completed = self.backend.query
        for access in accesses:
            if access.ld._is_token:
                prerequisites.extend(access.state.tracker.prerequisites(access.mode))
                continue
            instance, source, needed = access.state.plan_access(access.mode,
                                                                 access.device, completed)
            access.instance = instance
            access.source = source
            if source is not None or instance.allocation is None:
                prepare = True
            if needed:
                prerequisites.extend(needed)
        if self.scopes:
            for access in accesses:
                self.scope_access(access.state, access.mode, access.instance,
                                  access.source)
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
            to_wait = prerequisites
            if len(to_wait) == 2:           # common: a writer and a copy; no dict needed
                first, second = to_wait
                if first.stream is second.stream:
                    to_wait = [first if first.seq > second.seq else second]
            elif len(to_wait) > 2:
                to_wait = merge_events(to_wait)
            enqueued = self.order_after(stream, to_wait)
        record = None
        if self.instruments:
            record = self._open_record(ident, kind, str(owner_label), device, stream,
                                       accesses, prerequisites)
        copied = False
        if prepare:
            # Every allocation before any copy: an allocation failure (out of memory)
            # then leaves no copy in flight that no later task would know about.
            for access in accesses:
                target = access.instance
                if target is not None and target.allocation is None:
                    target.allocation = self._allocate(
                        target.device, access.state.nbytes, stream,
                        access.ld._dtype or _BYTES, record)
                    enqueued = True
            done: list[Access] = []
            try:
                for access in accesses:
                    if access.source is not None and access.instance is not None:
                        self._copy(access.instance, access.source, access.state.nbytes,
                                   stream, record, access.ld._label())
                        done.append(access)
            except BaseException:
                if done:       # the copies in flight read their sources: order writers
                    failed = backend.record(stream)
                    for access in done:
                        access.state.tracker.release(READ, failed)
                raise
            copied = bool(done)
        if copied:
            event = backend.record(stream)
            if record is not None:
                event.producer = ident
            for access in accesses:
                if access.source is not None and access.instance is not None:
                    access.state.copied(access.instance, access.source, event)
                    if self.scopes:
                        self.scope_wrote(access.state, access.instance)
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
        record = self.open_records.pop(ident, None) if self.instruments else None
        if record is not None:
            for instrument in self.instruments:
                instrument.work_ending(record)
        event = self.backend.record(stream)
        if record is not None:
            event.producer = ident
            for instrument in self.instruments:
                instrument.work_ended(record)
        scopes = self.scopes
        for access in accesses:
            access.state.released(access.instance, access.mode, event)
            if scopes and access.mode & WRITE and access.instance is not None:
                self.scope_wrote(access.state, access.instance)
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

        ``keep=False`` copies into a temporary buffer that is not an instance. In a
        loop body the copy runs on the loop's device (CUDA bodies are single-device).
        """
        device = target.device if target.device >= 0 else HOST
        if self.scopes:
            loop_device = self.backend.loop_device()    # type: ignore[attr-defined]
            if loop_device is not None:
                device = loop_device
        pool = self.pool(device)
        stream, pool.next = choose_stream(pool.streams, pool.members, prerequisites,
                                          pool.next)
        backend = self.backend
        self.order_after(stream, merge_events(prerequisites))
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
            self.open_records.pop(ident, None)
            for instrument in self.instruments:
                instrument.work_ending(record)
        event = backend.record(stream)
        if record is not None:
            event.producer = ident
            for instrument in self.instruments:
                instrument.work_ended(record)
        if keep:
            state.copied(target, source, event)
            if self.scopes:
                self.scope_wrote(state, target)
        state.tracker.release(READ, event)
        return event

    def writeback(self, state: DataState) -> None:
        plan = state.writeback_plan()
        if plan is not None:
            reference, source, prerequisites = plan
            self._copy_into(state, reference, source, prerequisites,
                            reference.allocation.dtype, state.label)

    def drain_retired(self) -> None:
        """Write back and free the data whose logical_data objects were collected.

        For each: the write-back into the user's buffer, then, on one stream ordered
        after every use of the data, the frees and an event; the user's buffer (and
        its page-locking) is released once that event completed
        (:meth:`release_completed`).
        """
        retired = self.retired
        backend = self.backend
        if self.scopes and not self.scopes[0].kind == "epoch":
            return                        # written back once the scopes are closed
        while retired:
            state = self.data.pop(retired.popleft(), None)
            if state is None:
                continue
            self.writeback(state)
            events = merge_events([*state.tracker.all_events(),
                                   *(e for i in state.instances.values()
                                     for e in i.ready.values())])
            pool = self.pool(HOST)
            stream, pool.next = choose_stream(pool.streams, pool.members, events,
                                              pool.next)
            self.order_after(stream, events)
            for instance in state.instances.values():
                if instance.allocation is not None and not instance.is_reference:
                    backend.free(instance.allocation, stream)
                    instance.allocation = None
            keepalive = state.reference.allocation if state.reference else None
            self.releases.append((backend.record(stream), keepalive, state.pin))
        if self.releases:
            self.release_completed()

    def release_completed(self) -> None:
        """Release the buffers and pins of retired data whose work has completed."""
        pending = []
        for entry in self.releases:
            if self.backend.query(entry[0]):
                self.unpin(entry[2])
            else:
                pending.append(entry)
        self.releases = pending

    def outstanding_events(self) -> list[Event]:
        events = [s.last_event for s in self.streams if s.last_event is not None]
        if self.backend.records:
            events.extend(self.backend.pending_events())
        return events

    def fence(self) -> int:
        """A stream that completes once everything submitted so far has completed."""
        with self.lock:
            self.check_submit("fence()")
            self.epoch_boundary()
            self.drain_retired()
            stream = self.fence_stream
            if stream is None:
                stream = self.fence_stream = self.new_stream(
                    max(self.backend.current_device(), 0))
            self.order_after(stream, self.outstanding_events())
            stream = self.backend.fence_stream(stream)
            self.counters.fences += 1
            for instrument in self.instruments:
                instrument.fence()
            self.epoch_begin()
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
            self.epoch_boundary()
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
            retiring = [entry[0] for entry in self.releases]
            self.epoch_begin()
        if event is not None:
            self.backend.synchronize(event)
        for done in retiring:             # collected data is written back by now
            self.backend.synchronize(done)
        if retiring:
            with self.lock:
                self.release_completed()
        self.raise_errors("wait()")
        return result

    def quiesce(self) -> None:
        """Close the context to new work, then wait until no task of another thread
        is between start() and end()."""
        me = threading.get_ident()
        for task, thread in self.active_tasks.items():
            if thread == me:
                raise ScopeError(f"finalize() while {task._label()} is started but "
                                 "not ended; end the task first")
        self.closing = True               # submissions waiting on a conflict give up
        while self.active_tasks:
            self._block()

    def finalize(self) -> None:
        """Complete all work, write results back, free everything (idempotent)."""
        with self.lock:
            if self.finalized:
                return
            if callback_state.active:
                raise ScopeError("finalize() called from a host callback or launched "
                                 "function")
            if self.scopes and self.scopes[0].kind != "epoch":
                raise ScopeError(f"finalize() with {len(self.scopes)} graph scope(s) "
                                 "still open; close them first")
            self.quiesce()
            self.epoch_boundary()
            self.drain_retired()
            for state in self.data.values():
                self.writeback(state)
            backend = self.backend
            caller = self.caller_stream
            events = self.outstanding_events()
            if caller is not None:
                self.order_after(caller, events)
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
            self.releases.clear()
            for _, token, _ in self.pinned_roots.values():
                backend.unregister_host(token)
            self.pinned_roots.clear()
            for stream in self.streams:
                backend.destroy_stream(stream)
            backend.context_finalized()
            self.streams.clear()
            self.pools.clear()
            self.finalized = True
        for instrument in self.instruments:
            try:
                instrument.finalized()
            except Exception as exc:  # noqa: BLE001 - reported like async errors
                self.capture(exc)
        self.raise_errors("finalize()")
