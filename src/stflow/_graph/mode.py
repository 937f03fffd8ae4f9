"""Graph mode's answers at the points where the modes differ (``stflow._engine.mode``).

A :class:`GraphMode` is chosen by the context (``context(use_graph=True)``: epochs;
``stackable_context``: scopes recorded on demand). It owns the runtime's
:class:`~stflow._graph.scopes.ScopeTracker` over the
:class:`~stflow._graph.recording.GraphRecorder` that is the runtime's backend, and the
admission of graph-mode work (:meth:`GraphMode.admit`):

- epochs: while an epoch boundary (fence, wait) waits for started tasks, new work of
  threads with no task started waits too; the first time a second thread submits, it
  waits until no task is started (task bodies capture on their own from then on, see
  the recorder);
- scopes per thread: data touched by another thread's open scope waits;
- recorded work: data held by started work, and reductions to combine, are settled
  before any import is hoisted out of a loop.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._core.errors import ScopeError
from .._core.plan import Plan, held
from .._engine import reductions as reductions
from .._engine import threads as threads
from .._engine.mode import Mode
from .recorded import RecordingStream
from .scope import Scope
from .scopes import ScopeTracker

if TYPE_CHECKING:
    from .._core.coherence import DataState, Instance
    from .._core.streams import StreamPools
    from .._engine.runtime import Runtime
    from ..backends._base import Backend, Event, Stream
    from .recording import GraphRecorder

__all__ = ["GraphMode"]

_thread = threading.get_ident


def _modes(plan: Plan) -> list[tuple[DataState, int]]:
    return [(access.state, access.mode) for access in plan.accesses]


def _foreign_scope(scopes: ScopeTracker, plan: Plan) -> tuple[DataState, Scope] | None:
    """The first data of ``plan`` that another thread's open scope touched (its
    reductions too: a partial result must not join, nor combine, a reduction
    recorded in another thread's scope)."""
    for access in plan.accesses:
        scope = scopes.foreign(access.state)
        if scope is not None:
            return access.state, scope
    for access in plan.reductions:
        scope = scopes.foreign(access.state)
        if scope is not None:
            return access.state, scope
    return None


def _flush_pending(rt: Runtime, plan: Plan, what: Any) -> bool:
    """Combine the pending reductions of the data ``plan`` accesses; True when
    there were any (the lock was released meanwhile: admit again)."""
    flushed = False
    for access in plan.accesses:
        if access.state.pending is not None:
            reductions.flush(rt, access.state, access.device, what)
            flushed = True
    return flushed


def idle_stream(pools: StreamPools, key: int) -> Stream:
    """A stream of ``pools`` at place ``key`` without task bodies being captured on
    it (such a stream keeps capturing for its bodies), added to the pool if all are
    busy."""
    pool = pools.pool(key)
    streams = pool.streams
    count = len(streams)
    for step in range(count):
        stream = streams[(pool.next + step) % count]
        if not (isinstance(stream, RecordingStream) and stream.bodies):
            pool.next += step + 1
            return stream
    stream = pools.new_stream(key)
    pool.add(stream)
    return stream


class GraphMode(Mode):
    """Graph mode: work is recorded into graphs, launched when a scope closes.

    Parameters
    ----------
    recorder : GraphRecorder
        The runtime's backend.
    epochs : bool
        ``context(use_graph=True)``: the root level is recorded, as epochs that
        close at every synchronisation point; else (``stackable_context``) scopes
        are recorded on demand, per thread.
    """

    scopes: ScopeTracker
    runtime: Runtime

    def __init__(self, recorder: GraphRecorder, epochs: bool) -> None:
        super().__init__()
        self.graph = True
        self.context_name = "context" if epochs else "stackable_context"
        self.recorder = recorder
        self.epochs = epochs

    def backend(self, native: Backend) -> Backend:
        return self.recorder

    def attach(self, runtime: Any) -> None:
        self.runtime = runtime
        self.scopes = ScopeTracker(runtime, self.recorder, epochs=self.epochs)

    def start(self) -> None:
        self.scopes.epoch_begin()

    def statistics(self) -> tuple[int, int]:
        return self.scopes.statistics()

    def share_graphs(self, shared: Any) -> None:
        """Use the graph cache of ``shared`` (an ``async_resources``)."""
        recorder = self.recorder
        recorder.cache = shared.graph_cache
        recorder.cache_lock = shared.lock
        recorder.cache_shared = True
        shared.graphs = recorder.graphs

    # -- admission --------------------------------------------------------------------
    def admit(self, plan: Plan, what: Any) -> bool:
        """Wait (lock held) until ``plan`` may be acquired by the calling thread (see
        the module docstring). True when the thread records (a scope is open); then
        the scopes have seen the plan (``ScopeTracker.before_acquire``)."""
        recording = self._admission(plan, what)
        if recording:
            self.scopes.before_acquire(plan)
        return recording

    def readmit(self, plan: Plan, what: Any) -> None:
        """Waiting released the lock, and meanwhile another thread's scope may have
        touched the data: work at the root level is admitted again."""
        self._admission(plan, what)

    def _admission(self, plan: Plan, what: Any) -> bool:
        rt = self.runtime
        scopes = self.scopes
        me = _thread()
        if scopes.epochs and scopes.submitter != me and scopes.arrived(me):
            while rt.started:
                rt.block(None, what)
        while True:
            if scopes.epochs:
                if rt.boundaries and me not in rt.started.values():
                    rt.block(None, what)
                    continue
            elif scopes.open_tops:
                foreign = _foreign_scope(scopes, plan)
                if foreign is not None:
                    state, scope = foreign
                    rt.block(scope.thread, what, state, scope)
                    continue
            recording = bool(scopes.here().stack)
            if recording:  # before any import is hoisted for the plan
                if held(plan):
                    rt.wait_for_conflicts(_modes(plan), what)
                    continue
                if plan.reductions and reductions.prepare(rt, plan, what):
                    continue
                if _flush_pending(rt, plan, what):
                    continue
            return recording

    # -- the hot path -----------------------------------------------------------------
    def pools(self) -> StreamPools | None:
        return self.scopes.pools()

    def free_stream(self, stream: Stream, pools: StreamPools, key: int) -> Stream:
        if isinstance(stream, RecordingStream) and stream.bodies:
            return idle_stream(pools, key)
        return stream

    def noted(self, plan: Plan) -> None:
        self.scopes.noted(plan)

    def body_started(self, stream: Stream) -> None:
        here = self.scopes.here()
        if here.stack:  # capture the body
            self.recorder.begin_body(stream)
            here.bodies += 1

    def body_ended(self, stream: Stream) -> None:
        if isinstance(stream, RecordingStream) and stream.bodies:
            self.scopes.end_body(stream)

    def released(self, plan: Plan) -> None:
        scopes = self.scopes
        stack = scopes.here().stack
        if stack:
            scopes.released(plan, stack)
            if scopes.epoch_full(stack) and not self.runtime.started:
                scopes.epoch_boundary()  # a long epoch runs meanwhile
                scopes.epoch_begin()

    # -- copies -----------------------------------------------------------------------
    def recording(self) -> bool:
        return bool(self.scopes.stack)

    def wrote(self, state: DataState, instance: Instance) -> None:
        self.scopes.wrote(state, instance)

    def copy_device(self) -> int | None:
        return self.scopes.copy_device() if self.scopes.stack else None

    def retirement_allowed(self) -> bool:
        return self.scopes.retirement_allowed()

    def pending_events(self) -> list[Event]:
        return self.scopes.pending_events()

    # -- endings ----------------------------------------------------------------------
    def boundary(self, what: str) -> None:
        if self.epochs:
            threads.settle_epoch(self.runtime, what)
        self.scopes.epoch_boundary()

    def resume(self) -> None:
        self.scopes.epoch_begin()

    def quiesce(self) -> None:
        while self.scopes.open_tops:  # other threads' scopes close
            self.runtime.block(None, "finalize()")

    def check_finalize(self) -> None:
        opened = self.scopes.user_scopes()
        if opened:
            raise ScopeError(
                f"finalize() with {opened} graph scope(s) still open; close them first"
            )

    def close(self) -> None:
        self.scopes.epoch_boundary()

    def finalized(self) -> None:
        self.scopes.finalized()

    def discard(self) -> int:
        count = self.scopes.user_scopes()
        try:
            self.scopes.discard_all()
        except Exception as exc:  # noqa: BLE001 - nothing can be raised here
            warnings.warn(
                f"stflow: could not discard the open scopes of an abandoned "
                f"context: {exc!r}",
                RuntimeWarning,
                stacklevel=5,
            )
        return count

    # -- reductions and eviction ------------------------------------------------------
    def combines_at_once(self) -> bool:
        scopes = self.scopes
        return scopes.per_thread and bool(scopes.stack)

    def root_level(self) -> Any:
        scopes = self.scopes
        if scopes.per_thread and scopes.stack:
            return scopes.root_level()
        return super().root_level()

    def combining(self, state: DataState, device: int) -> None:
        scopes = self.scopes
        scopes.snapshot(state)
        scopes.touch(state)
        scopes.read_at(state, device)

    def held_states(self) -> Iterable[DataState]:
        return [state for top in self.scopes.open_tops for state in top.touched.values()]

    def touch(self, state: DataState) -> None:
        self.scopes.touch(state)
