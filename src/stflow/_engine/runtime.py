"""The runtime behind a context: owned parts, and the plan → enact hot path.

A :class:`Runtime` is shared by a context and its borrowed handles. It is made of
parts, each in its own module and usable alone:

=================  ================================================================
``data``           :class:`~stflow._engine.registry.DataRegistry`: data states by key,
                   registration of user buffers, page-locking, retirement
``pools``          :class:`~stflow._core.streams.StreamPools`: the streams of the current
                   recording level (``root_pools`` at the root)
``plans``          plans of the dependency patterns seen (``_plan.remember``)
``errors``         :class:`~stflow._core.errors.ErrorLog`: asynchronous failures
``instruments``    :class:`~stflow._instruments.seam.Instruments`: counters and listeners
``mode``           :class:`~stflow._engine.mode.Mode`, chosen by the context: called at the
                   few points where stream mode and graph mode differ
=================  ================================================================

The hot path of every task, host callback and internal copy is two steps:

plan
    pure decisions (``_core/plan.py`` over ``_core/deps.py``, ``_core/coherence.py`` and
    ``_core/streams.py``): the accesses of the dependency pattern (cached), then which
    stream, which waits, which allocations and copies;
enact
    the backend calls those decisions name (:meth:`Runtime.acquire`), and at the
    end the end event and the release (:meth:`Runtime.release`).

Submission is serialised by one re-entrant lock per runtime; stflow never holds it
while running user code. A task started and not yet ended is *held*: another thread's
work that conflicts with it waits until it ends (its end event does not exist yet).
In graph mode, data touched by another thread's open scope is held the same way, and
fence/wait/finalize close an epoch only once no task is started (the mode's admission,
``Mode.admit``).
A thread that would wait for a thread waiting for it gets a ``ScopeError`` instead.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._compile import mypyc_attr
from .._core.coherence import DataState, Instance
from .._core.deps import merge_events, needs_wait
from .._core.errors import (
    BackendUnavailableError,
    ContextFinalizedError,
    ContextMismatchError,
    DeviceOrdinalError,
    ErrorLog,
    ScopeError,
)
from .._core.layout import extent
from .._core.plan import Plan, acquire, hold, release, remember, resolve, retarget
from .._core.streams import Pool, StreamPools, choose_stream
from .._instruments.seam import Instrument, Instruments, Statistics, WorkRecord
from .._places.places import exec_place_grid
from ..backends._base import HOST, NO_AFFINE, Backend, Event, Stream, callback_state
from . import copies as copies
from . import endings as endings
from . import eviction as eviction
from . import reductions as reductions
from . import threads as threads
from .memory import DeviceMemory, resolve_budgets
from .mode import Mode
from .registry import DataRegistry

__all__ = ["Runtime", "RuntimeOwner"]

_runtime_ids = itertools.count(1)
_thread = threading.get_ident


def _modes(plan: Plan) -> list[tuple[DataState, int]]:
    return [(access.state, access.mode) for access in plan.accesses]


class _Release:
    """Retired data whose frees are in flight: its user buffer and page-locking are
    released once ``done`` has completed."""

    __slots__ = ("done", "state")

    def __init__(self, done: Event, state: DataState) -> None:
        self.done = done
        self.state = state


@mypyc_attr(allow_interpreted_subclasses=True)
class RuntimeOwner:
    """Base of the public objects that own a runtime (``context``).

    The reference's constructors that take a context (``logical_data(ctx, buf)``,
    ``task(ctx, *deps)``) accept instances of it.
    """

    _runtime: Runtime | None

    def _live(self) -> Runtime:
        """The runtime, if it is not finalized."""
        runtime = self._runtime
        if runtime is None or runtime.finalized:
            raise ContextFinalizedError(
                "this context is finalized (context handle is NULL); create a new one"
            )
        return runtime


class Runtime:
    """The state and mechanisms of one context (see the module docstring).

    Parameters
    ----------
    backend : Backend
        Runs the work (``mode.backend(...)`` of the context's backend).
    caller_stream : Stream, optional
        A caller-owned stream (``context(stream=...)``): all work is ordered after
        what it holds now, and ``finalize()`` orders its completion on it.
    mode : Mode, optional
        Stream mode (the default) or graph mode (``stflow._graph.mode.GraphMode``).
    memory_budget : int, str or mapping, optional
        The device memory budget (see ``_engine/memory.py``).
    """

    def __init__(
        self,
        backend: Backend,
        caller_stream: Stream | None = None,
        mode: Mode | None = None,
        memory_budget: Any = None,
    ) -> None:
        self.id = next(_runtime_ids)
        self.backend = backend
        self.device_count = backend.device_count
        # The backend operations of every task, bound once.
        self._current_device = backend.current_device
        self._completed = backend.query
        self._record = backend.record
        native = backend.native
        # Task bodies may have to wait on the host or guard their reads (the emulated
        # backend): the checks a task's start makes only then.
        self.host_bodies = bool(native.bodies_wait_on_host or native.guards_reads)
        self.lock = threading.RLock()
        self.cv = threading.Condition(self.lock)
        self.errors = ErrorLog()
        self.instruments = Instruments()
        self.caller_stream = caller_stream
        entry = None if caller_stream is None else backend.record(caller_stream)
        self.root_pools = StreamPools(backend, self.errors.capture, entry)
        self.data = DataRegistry(backend, may_pin=caller_stream is None)
        self.memory = DeviceMemory(resolve_budgets(memory_budget, backend))
        self.combining: list[DataState] = []  # data whose reductions combine now
        self.ticks = 0  # acquisitions so far (LRU stamps)
        self.plans: dict[tuple, Plan] = {}
        self.started: dict[Any, int] = {}  # held work -> its thread
        self.waiters = 0  # threads blocked (_threads.block)
        self.blocked_on: dict[int, int] = {}  # blocked thread -> the one it awaits
        self.boundaries = 0  # epoch boundaries waiting to close
        self.finalized = False
        self.closing = False
        self.fence_stream: Stream | None = None
        self.releases: list[_Release] = []
        self.context_type: Any = None  # builds borrowed contexts
        self.mode = Mode() if mode is None else mode
        self.mode.attach(self)
        self._attach_configured_instruments()
        self.mode.start()

    def __repr__(self) -> str:
        state = "finalized" if self.finalized else "live"
        return f"<Runtime {self.id} {self.backend.name} {state}>"

    # -- instruments and statistics ----------------------------------------------
    def _attach_configured_instruments(self) -> None:
        from .._core.config import config
        from .._instruments.dot import DotRecorder
        from .._instruments.timeline import NvtxRanges, TraceRecorder

        cfg = config()
        if cfg.dot_file:
            self.attach(DotRecorder(cfg.dot_file))
        if cfg.trace_file:
            self.attach(TraceRecorder(cfg.trace_file))
        if cfg.progress:
            from .._instruments.progress import progress_from_environment

            bar = progress_from_environment(cfg.progress)
            if bar is not None:
                self.attach(bar)
        if cfg.nvtx != "0" and self.backend.nvtx_ranges:
            try:
                self.attach(NvtxRanges())
            except BackendUnavailableError:
                if cfg.nvtx == "1":
                    raise

    def attach(self, instrument: Instrument) -> None:
        """Add an instrument; it sees the work submitted from now on."""
        with self.lock:
            self.instruments.attach(instrument, self)

    def statistics(self) -> Statistics:
        """The counters of this context so far."""
        return self.instruments.statistics(
            self.backend, *self.mode.statistics(), self.memory
        )

    # -- checks ------------------------------------------------------------------
    def check_submit(self, what: Any) -> None:
        """Refuse work from a host callback or on a finalized context.

        The callback check comes first: a callback still running while the context
        finalizes is reported for what it did wrong, not as a finalized-context error.
        """
        if callback_state.active:
            raise ScopeError(
                f"{what} called from a host callback or launched function; "
                "work running in stream order must not submit to a context"
            )
        if self.finalized or self.closing:
            raise ContextFinalizedError(
                f"{what} called on a finalized context (context "
                "handle is NULL); create "
                "a new context"
            )

    def check_device(self, device: int, what: Any) -> int:
        """``device`` when it is an ordinal of this runtime's backend."""
        if device >= self.device_count:
            raise DeviceOrdinalError(
                f"{what}: invalid device id {device}: device {device} does not exist on "
                f"the {self.backend.name} backend ({self.device_count} device(s))"
            )
        return device

    def owns(self, ld: Any, what: str) -> None:
        """Refuse a logical data of another (or a finalized) context."""
        if ld._runtime is not self:
            if ld._runtime.finalized:
                raise ContextFinalizedError(
                    f"{what}: logical data {ld._label()} belongs to a finalized context"
                )
            raise ContextMismatchError(
                f"{what}: logical data {ld._label()} belongs to a different context; "
                "create it in this context (ctx.logical_data(...))"
            )

    # -- data ----------------------------------------------------------------------------
    def register(self, buf: Any, dplace: Any, shape: Any, dtype: Any) -> Any:
        """The state and source of a user buffer registered as new logical data."""
        self.check_submit("logical_data()")
        data = self.data
        source, device = data.describe(buf, dplace, shape, dtype, self._producer_stream)
        with self.lock:  # the overlap check and insertion: one step
            self.check_submit("logical_data()")  # against retirement
            if data.retired:  # collected data may hold these bytes: retire it
                self.drain_retired()
            state = data.add(source, device, buf)
            if self.releases and source.nbytes:
                self._after_writebacks(source.ptr, source.extent)
            if source.ordered_on is not None:  # a DLPack producer's pending work
                reference = state.reference
                assert reference is not None
                event = self.backend.record(source.ordered_on)
                reference.ready[event.stream] = event
        return state, source

    def _after_writebacks(self, ptr: int, nbytes: int) -> None:
        """Block until retired data over ``[ptr, ptr + nbytes)`` is written back.

        A buffer registered again right after its previous logical data was collected
        must not be read before that data's write-back lands in it. The lock must be
        held.
        """
        end = ptr + nbytes
        for entry in self.releases:
            reference = entry.state.reference
            allocation = None if reference is None else reference.allocation
            if allocation is None or allocation.ptr >= end:
                continue
            span = allocation.nbytes
            if allocation.strides is not None:
                span = extent(
                    entry.state.shape, allocation.strides, allocation.dtype.itemsize
                )
            if ptr < allocation.ptr + span:
                self.backend.synchronize(entry.done)

    def _producer_stream(self, device: tuple[int, int]) -> Stream:
        """The stream a DLPack producer in GPU memory (DLPack ``device``) is asked to
        order its pending work on."""
        ordinal = device[1] if device[0] in (2, 13) else HOST
        if ordinal != HOST:
            self.check_device(ordinal, "logical_data")
        with self.lock:
            pool = self.current_pools().pool(ordinal)
            return pool.streams[pool.next % len(pool.streams)]

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, what: str) -> DataState:
        with self.lock:  # the registry changes under the lock only
            self.check_submit(f"{what}()")
            return self.data.empty(shape, dtype)

    def token(self) -> DataState:
        with self.lock:
            self.check_submit("token()")
            return self.data.token()

    # -- the hot path: acquire and release -----------------------------------------
    def acquire(
        self,
        deps: Sequence[Any],
        place: Any,
        owner: Any,
        what: Any,
        ident: int,
        kind: str = "task",
        host_only: bool = False,
    ) -> Plan:
        """Acquire ``deps`` on execution place ``place`` (``None``: the current device)
        for work ``ident``; the lock must be held.

        Plan (the dependency pattern's plan, then this submission's decisions), then
        enact (waits, allocations, copies). Returns the plan, whose ``stream`` is the
        work's stream. ``owner`` (a started task) is *held* until :meth:`release`;
        ``None`` for work released in the same locked region (host callbacks).
        """
        if host_only:
            exec_device = affine_device = stream_key = HOST
        elif place is None:  # the current device (the only one: no backend call)
            exec_device = affine_device = stream_key = (
                0 if self.device_count == 1 else self._current_device()
            )
        else:
            exec_device = place._device
            stream_key = place._stream_key  # the device, or a green partition's key
            if exec_device >= self.device_count:
                self.check_device(exec_device, what)
            affine = place._affine
            if isinstance(place, exec_place_grid):
                return self._acquire_on_grid(deps, place, owner, what, ident, kind)
            affine_device = exec_device if affine is None else affine._device
        if len(deps) == 1:
            key: tuple = (exec_device, affine_device, host_only, deps[0].key)
        else:
            key = (exec_device, affine_device, host_only, *[d.key for d in deps])
        plan = self.plans.get(key)
        if plan is None:
            plan = resolve(
                [(d.ld._state, d.mode, d.place) for d in deps],
                exec_device,
                affine_device,
                self.device_count,
                host_only,
                what,
            )
            remember(self.plans, key, plan)
        return self._acquire_plan(plan, stream_key, owner, what, ident, kind)

    def _acquire_on_grid(
        self,
        deps: Sequence[Any],
        grid: exec_place_grid,
        owner: Any,
        what: Any,
        ident: int,
        kind: str,
    ) -> Plan:
        """:meth:`acquire` for work on a grid: the plan is cached per grid (its
        members' memory takes replicated copies); the work's stream is member 0's."""
        affine = grid._affine
        affine_device = NO_AFFINE if affine is None else affine._device
        key = (("grid", grid._handle), affine_device, False, *[d.key for d in deps])
        plan = self.plans.get(key)
        if plan is None:
            members = grid._members()
            for member in members:
                if member._device >= self.device_count:
                    self.check_device(member._device, what)
            affine_devices = tuple(
                member._device if member._affine is None else member._affine._device
                for member in members
            )
            plan = resolve(
                [(d.ld._state, d.mode, d.place) for d in deps],
                grid._device,
                affine_device,
                self.device_count,
                False,
                what,
                affine_devices,
            )
            remember(self.plans, key, plan)
        return self._acquire_plan(plan, grid._stream_key, owner, what, ident, kind)

    def _acquire_plan(
        self, plan: Plan, stream_key: int, owner: Any, what: Any, ident: int, kind: str
    ) -> Plan:
        """:meth:`acquire` once the plan is known."""
        mode = self.mode
        graph = mode.graph  # stream mode: its hooks do nothing, skipped
        recording = False
        pools = self.root_pools
        if graph:
            recording = mode.admit(plan, what)
            pools = mode.pools() or pools
        pool = pools.pools.get(stream_key) or pools.pool(stream_key)
        backend = self.backend
        tick = self.ticks = self.ticks + 1
        stream = None
        if not plan.reductions or not reductions.prepare(self, plan, what):
            stream = acquire(plan, pool, self._completed, tick)
        if stream is None:  # data held by started work, or reductions
            stream = self._acquire_waiting(plan, pool, tick, recording, what)
        if (
            (plan.moves is not None or plan.reductions)
            and self.memory.limited
            and eviction.room_for(self, plan, what)
        ):
            stream = acquire(plan, pool, self._completed, tick)  # evictions changed it
            assert stream is not None
        if graph:
            stream = mode.free_stream(stream, pools, stream_key)
        retarget(plan, stream)
        if recording:
            mode.noted(plan)
        waits = plan.waits
        counters = self.instruments.counters
        if waits:
            for event in waits:
                backend.wait(stream, event)
            counters.waits_issued += len(waits)
        counters.waits_skipped += plan.skipped
        if owner is not None:
            counters.tasks += 1
        else:
            counters.host_callbacks += 1
        record = None
        if self.instruments.attached:
            record = self._open_record(plan, ident, kind, what, stream)
        if plan.moves is not None:
            copies.enact_moves(self, plan, stream, ident, record, what)
        if plan.reductions:
            reductions.begin(self, plan, stream, owner, record, what)
        if record is not None:
            self.instruments.body(record)
        if owner is not None:
            hold(plan, owner)
            self.started[owner] = _thread()
        return plan

    def _acquire_waiting(
        self, plan: Plan, pool: Pool, tick: int, recording: bool, what: Any
    ) -> Stream:
        """:func:`acquire` of ``plan`` after waiting: for started work holding its
        data, for reductions to combine first (:func:`_reductions.prepare`). Waiting
        releases the lock, and meanwhile another thread's scope may have touched
        the data: work at the root level of a stackable context is admitted again
        (``Mode.readmit``) before it decides."""
        mode = self.mode
        while True:
            if not recording:
                mode.readmit(plan, what)
            if plan.reductions and reductions.prepare(self, plan, what):
                continue
            stream = acquire(plan, pool, self._completed, tick)
            if stream is not None:
                return stream
            self._clear(plan, what)

    def release(
        self,
        plan: Plan,
        stream: Stream,
        owner: Any,
        ident: int,
        private: list[Instance] | None = None,
    ) -> Event:
        """Release ``plan``: record the end event on ``stream`` and update the data
        states (``private``: the instances the work reduced into). The lock must be
        held."""
        instruments = self.instruments
        record = instruments.ending(ident) if instruments.attached else None
        event = self._record(stream)
        if record is not None:
            instruments.ended(record, event)
        release(plan, event, owner)
        mode = self.mode
        graph = mode.graph  # stream mode: its hooks do nothing, skipped
        if owner is not None:
            del self.started[owner]
            if graph:
                mode.body_ended(stream)
            if self.waiters:
                self.cv.notify_all()
        if plan.reductions:
            reductions.end(self, plan, event, owner, private, ident)
        if graph:
            mode.released(plan)
        return event

    def hold(self, owner: Any, states: Sequence[DataState]) -> None:
        """Hold ``states`` as written by ``owner`` until :meth:`unhold` (a launchable
        graph holds its data between launches). The lock must be held."""
        for state in states:
            state.writing = owner
        self.started[owner] = threading.get_ident()

    def unhold(self, owner: Any, states: Sequence[DataState]) -> None:
        for state in states:
            if state.writing is owner:
                state.writing = None
        self.started.pop(owner, None)
        if self.waiters:
            self.cv.notify_all()

    def _open_record(
        self, plan: Plan, ident: int, kind: str, what: Any, stream: Stream
    ) -> WorkRecord | None:
        accesses = [(a.state.key, a.state.label, a.mode, a.device) for a in plan.accesses]
        return self.instruments.open(
            ident, kind, str(what), plan.device, stream, accesses, plan.prerequisites()
        )

    # -- reductions ----------------------------------------------------------------------
    def _clear(self, plan: Plan, what: Any) -> None:
        """Before ``plan`` is acquired again: wait for the started work it conflicts
        with, and combine the pending reductions of the data it accesses."""
        self.wait_for_conflicts(_modes(plan), what)
        for access in plan.accesses:
            if access.state.pending is not None:
                reductions.flush(self, access.state, access.device, what)

    def stream_on(self, pools: StreamPools, device: int, events: list[Event]) -> Stream:
        """A stream for internal work at place ``device`` (the host's for host and
        managed memory), ordered after ``events``."""
        events = merge_events(events)
        place = device if device >= 0 else HOST
        stream = self.mode.free_stream(
            choose_stream(pools.pool(place), None, events), pools, place
        )
        self.order_after(stream, events)
        return stream

    # -- conflicts between threads -------------------------------------------------
    def wait_for_conflicts(
        self, accesses: list[tuple[DataState, int]], what: Any
    ) -> None:
        """Block while started work of another thread holds data that ``accesses``
        (state, mode) conflict with (``_threads.wait_for_conflicts``)."""
        threads.wait_for_conflicts(self, accesses, what)

    def block(
        self,
        thread: int | None,
        what: Any,
        state: DataState | None = None,
        holder: Any = None,
    ) -> None:
        """Wait (lock held) until held work is released (``_threads.block``)."""
        threads.block(self, thread, what, state, holder)

    def wake(self) -> None:
        """Wake the threads waiting for held data (the lock is held)."""
        if self.waiters:
            self.cv.notify_all()

    def order_after(self, stream: Stream, events: list[Event]) -> None:
        """Make ``stream`` (one of this runtime's) wait for the ``events`` it does not
        already imply, counting the waits issued and skipped."""
        backend = self.backend
        counters = self.instruments.counters
        for event in events:
            if needs_wait(stream, event):
                backend.wait(stream, event)
                counters.waits_issued += 1
            else:
                counters.waits_skipped += 1

    # -- allocations and copies (``_engine/copies.py``) ----------------------------------
    def allocate(
        self,
        state: DataState,
        instance: Instance,
        stream: Stream,
        record: WorkRecord | None,
        plan: Plan | None,
        what: Any,
        keep: tuple[Instance, ...] = (),
        private: bool = False,
    ) -> None:
        """Give ``instance`` memory within its device's budget
        (:func:`stflow._engine.copies.allocate`)."""
        copies.allocate(self, state, instance, stream, record, plan, what, keep, private)

    def copy_instance(
        self,
        state: DataState,
        target: Instance,
        source: Instance,
        stream: Stream,
        record: WorkRecord | None,
    ) -> None:
        """Copy ``source`` into ``target`` on ``stream``
        (:func:`stflow._engine.copies.copy_instance`)."""
        copies.copy_instance(self, state, target, source, stream, record)

    def copy_into(
        self,
        state: DataState,
        target: Instance,
        source: Instance,
        prerequisites: list[Event],
        label: str,
        keep: bool = True,
        copy_title: str | None = None,
    ) -> Event:
        """An internal copy, ordered after ``prerequisites``
        (:func:`stflow._engine.copies.copy_into`)."""
        return copies.copy_into(
            self, state, target, source, prerequisites, label, keep, copy_title
        )

    def writeback(self, state: DataState) -> None:
        """Bring the user's buffer of ``state`` up to date
        (:func:`stflow._engine.copies.writeback`)."""
        copies.writeback(self, state)

    # -- retirement of collected data ---------------------------------------------------
    def drain_retired(self) -> None:
        """Write back and free the data whose logical_data objects were collected.

        For each: the write-back into the user's buffer, then, on one stream ordered
        after every use of the data, the frees and an event; the user's buffer (and
        its page-locking) is released once that event completed
        (:meth:`release_completed`). The lock must be held.
        """
        if not self.mode.retirement_allowed():
            return  # written back once the scopes are closed
        backend = self.backend
        for state in self.data.take_retired():
            self.writeback(state)
            stream = self.stream_on(self.current_pools(), HOST, state.uses())
            for instance in state.instances.values():
                if instance.allocation is not None and not instance.is_reference:
                    backend.free(instance.allocation, stream)
                    instance.allocation = None
                    self.memory.discharge(instance, state.nbytes)
            self.releases.append(_Release(backend.record(stream), state))
        if self.releases:
            self.release_completed()

    def release_completed(self) -> None:
        """Release the buffers and pins of retired data whose work has completed."""
        pending = []
        for entry in self.releases:
            if self.backend.query(entry.done):
                state = entry.state
                self.data.unpin(state.pin)
                for instance in state.instances.values():
                    instance.allocation = None  # drops the user's buffer
                state.instances.clear()
                state.reference = None
            else:
                pending.append(entry)
        self.releases = pending

    def current_pools(self) -> StreamPools:
        """The streams of the calling thread's recording level."""
        pools = self.mode.pools()
        return self.root_pools if pools is None else pools

    # -- synchronisation points --------------------------------------------------------
    def outstanding_events(self) -> list[Event]:
        """Events after which every piece of work submitted so far has completed."""
        events = self.root_pools.last_events()
        events.extend(self.mode.pending_events())
        return events

    def fence(self) -> int:
        """A stream that completes once everything submitted so far has completed
        (:func:`stflow._engine.endings.fence`)."""
        return endings.fence(self)

    def _await_no_started(self) -> None:
        """Wait (lock held) until no task is started (they end by themselves)."""
        while self.started:
            self.waiters += 1
            try:
                self.cv.wait()
            finally:
                self.waiters -= 1

    def wait(
        self, state: DataState, shape: tuple[int, ...], dtype: np.dtype, label: str
    ) -> np.ndarray:
        """Block until the data of ``state`` can be read; return a host copy
        (:func:`stflow._engine.endings.wait`)."""
        return endings.wait(self, state, shape, dtype, label)

    def quiesce(self) -> None:
        """Close the runtime to new work (:func:`stflow._engine.endings.quiesce`)."""
        endings.quiesce(self)

    def finalize(self) -> None:
        """Complete all work, write results back, free everything (idempotent;
        :func:`stflow._engine.endings.finalize`)."""
        endings.finalize(self)

    def tear_down(self, stream: Stream | None) -> None:
        """Free everything and mark the runtime finalized
        (:func:`stflow._engine.endings.tear_down`; the lock must be held)."""
        endings.tear_down(self, stream)
