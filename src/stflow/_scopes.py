"""Graph scopes of a runtime: epochs of graph mode, graph scopes, loops, launchables.

A runtime in graph mode (``context(use_graph=True)``, ``stackable_context``) has a
:class:`ScopeTracker`, the one part a stream-mode runtime does not have. It keeps a
stack of :class:`Scope` objects over the runtime's backend, a
:class:`~stflow.backends.recording.GraphRecorder`. The outermost scope records a
top-level graph with a set of streams of its own (so that stream order inside a graph
never stands in for an order the graph does not have); nested ones record the body of a
loop node (a nested ``graph_scope`` is a loop that runs once).

Two duties come with scopes:

Discarding
    A scope whose block raises is discarded: nothing of it runs. The first time a
    scope's work touches a logical data, the data's ordering and coherence state is
    snapshotted; discarding restores the snapshots, so later work sees the data as if
    the scope had never been recorded. A launchable graph closed without any launch is
    restored the same way.

Repeating
    The body of a loop, or a launchable graph, runs many times from one recording. Its
    work assumes the instances it reads first (valid when the scope opened, not
    written in it) are still valid when it runs again. When the scope closes, every
    such instance that the recording left invalid is brought up to date by a copy at
    the end of the body, so every iteration starts where the recording assumed. And an
    access of a repeated body that would copy data in from outside gets that copy at
    the enclosing level instead, once (*hoisting*).

When a top-level scope closes, its streams forget what they waited for, and the
recorder drops a launched graph once it has run: nothing of an epoch keeps earlier
epochs alive.
"""

from __future__ import annotations

import contextlib
import enum
from typing import TYPE_CHECKING, Iterator, Protocol

from ._access import READ, WRITE
from ._coherence import INVALID, DataState, Instance, Snapshot
from ._errors import ScopeError
from ._streams import StreamPools

if TYPE_CHECKING:
    from ._errors import ErrorLog
    from ._plan import Plan
    from .backends._base import Event, Stream
    from .backends.recording import Graph, GraphRecorder

__all__ = ["EPOCH_TASKS", "Scope", "ScopeKind", "ScopeOwner", "ScopeTracker"]

EPOCH_TASKS = 4096
"""Graph mode launches an epoch once it holds this many tasks (at the next release with
no task started), as if ``fence()`` had been called: the driver's cost of
instantiating a graph grows faster than its size, and earlier launches overlap the
recording of what follows."""


class ScopeOwner(Protocol):
    """What a :class:`ScopeTracker` uses of the runtime that owns it."""

    pools: StreamPools
    """The streams of the current recording level (the tracker switches it)."""
    errors: ErrorLog
    finalized: bool

    def copy_into(self, state: DataState, target: Instance, source: Instance,
                  prerequisites: list[Event], label: str, keep: bool = True) -> Event:
        """An internal copy (hoisted imports, refreshes of assumed instances)."""


class ScopeKind(enum.Enum):
    """What a scope records."""

    EPOCH = "epoch"            # graph mode: the work between two sync points
    GRAPH = "graph"            # graph_scope() / push()
    WHILE = "while"            # while_loop()
    REPEAT = "repeat"          # repeat(count)
    LAUNCHABLE = "launchable"  # launchable_graph_scope(), pop_prologue_shared()


_LOOPS = (ScopeKind.WHILE, ScopeKind.REPEAT)


class Scope:
    """One open scope of a runtime.

    Attributes
    ----------
    kind : ScopeKind
    count : int or None
        How often a ``repeat`` body runs.
    graph : Graph
        The recorder's graph of this scope (a top-level graph, or a loop body).
    top : bool
        An outermost scope: it records a top-level graph with streams of its own.
    pools : StreamPools or None
        The streams of a top scope; ``None`` for nested ones (they use their top's).
    outer_pools : StreamPools or None
        What the runtime used before a top scope opened.
    hoist_pools : StreamPools or None
        Streams for imports hoisted out of a nested repeated scope.
    snapshots : dict or None
        ``id(state) -> (state, Snapshot)`` for a scope that can be discarded.
    touched : dict
        ``id(state) -> state``: the data a top scope's work touched.
    repeatable : bool
        Its recording may run many times (loops; top scopes that may become
        launchable).
    assumed : dict
        ``(id(state), device) -> state``: instances the body reads as valid on entry.
    fresh : set
        ``(id(state), device)``: instances written or copied into in the scope.
    condition_set : bool
        A while loop's condition was given (``continue_while``).
    closed : bool
    wrapper : Scope or None
        The graph scope opened to hold a root-level loop.
    work : int
        Tasks and host callbacks acquired in it.
    """

    __slots__ = ("kind", "count", "graph", "top", "pools", "outer_pools", "hoist_pools",
                 "snapshots", "touched", "repeatable", "assumed", "fresh",
                 "condition_set", "closed", "wrapper", "work")
    graph: Graph          # set when the scope is opened

    def __init__(self, kind: ScopeKind, repeatable: bool, discardable: bool,
                 count: int | None = None) -> None:
        self.kind = kind
        self.count = count
        self.top = False
        self.pools: StreamPools | None = None
        self.outer_pools: StreamPools | None = None
        self.hoist_pools: StreamPools | None = None
        self.snapshots: dict[int, tuple[DataState, Snapshot]] | None = \
            {} if discardable else None
        self.touched: dict[int, DataState] = {}
        self.repeatable = repeatable
        self.assumed: dict[tuple[int, int], DataState] = {}
        self.fresh: set[tuple[int, int]] = set()
        self.condition_set = False
        self.closed = False
        self.wrapper: Scope | None = None
        self.work = 0

    def held_data(self) -> list[DataState]:
        """The data a launchable graph holds: what its recording touched."""
        return list(self.touched.values())

    def __repr__(self) -> str:
        return f"<Scope {self.kind.value}{' top' if self.top else ''}>"


class ScopeTracker:
    """The scopes of one graph-mode runtime (see the module docstring).

    Parameters
    ----------
    runtime : ScopeOwner
        The owner: its current stream pools and its internal copies are used.
    recorder : GraphRecorder
        The runtime's backend.
    epochs : bool
        ``context(use_graph=True)``: the root level is itself recorded, as epochs
        that close at every synchronisation point.
    """

    def __init__(self, runtime: ScopeOwner, recorder: GraphRecorder, epochs: bool
                 ) -> None:
        self.runtime = runtime
        self.recorder = recorder
        self.epochs = epochs
        self.stack: list[Scope] = []
        recorder.error_sink = runtime.errors.capture

    # -- opening and closing (the runtime's lock is held) ----------------------------
    def open(self, kind: ScopeKind, count: int | None = None) -> Scope:
        """Open a scope of ``kind`` inside the innermost one."""
        recorder = self.recorder
        if not self.stack and kind in _LOOPS:
            wrapper = self.open(ScopeKind.GRAPH)      # a loop node needs a graph
            scope = self.open(kind, count)
            scope.wrapper = wrapper
            return scope
        # Top-level scopes may turn out launchable (pop_prologue_shared): track them.
        repeatable = kind in _LOOPS or (kind is not ScopeKind.EPOCH and not self.stack)
        scope = Scope(kind, repeatable, kind is not ScopeKind.EPOCH, count)
        runtime = self.runtime
        if not self.stack:
            scope.top = True
            scope.graph = recorder.open_graph()
            scope.outer_pools = runtime.pools
            scope.pools = StreamPools(recorder, runtime.errors.capture)
            runtime.pools = scope.pools
        else:
            loop_count = (count if kind is ScopeKind.REPEAT
                          else None if kind is ScopeKind.WHILE else 1)
            scope.graph = recorder.open_loop(loop_count)
        self.stack.append(scope)
        return scope

    def close(self, scope: Scope, launch: bool = True) -> None:
        """Close the innermost scope ``scope``; a top-level one is launched when
        ``launch`` (else it is kept, for a launchable graph). A body that never runs
        (``repeat(0)``) has no effect at all: it is discarded."""
        self._check_innermost(scope)
        if scope.kind is ScopeKind.REPEAT and scope.count == 0:
            self.discard(scope)
            return
        recorder = self.recorder
        if scope.kind in _LOOPS or (scope.top and not launch):
            self._refresh_assumed(scope)
        self.stack.pop()
        scope.closed = True
        if not scope.top:
            recorder.close_loop(scope.graph)
            if scope.wrapper is not None:
                self.close(scope.wrapper)
            return
        recorder.close_graph(scope.graph)
        self._leave_top(scope)
        if launch:
            if scope.graph.used:
                recorder.launch(scope.graph)
                self.lower(scope)
            else:
                recorder.discard_graph(scope.graph)

    def lower(self, scope: Scope) -> None:
        """After the last launch of top scope ``scope``: the events recorded in its
        graph, wherever data states hold them, become the launch's completion event,
        so that nothing later refers to the recording (or keeps it alive)."""
        graph = scope.graph
        done = graph.done
        if done is None:
            return
        recorded_in = self.recorder.recorded_in

        def stand_in(event: Event) -> Event:
            return done if recorded_in(event, graph) else event

        for state in scope.touched.values():
            state.substitute(stand_in)

    def discard(self, scope: Scope) -> None:
        """Drop the innermost scope ``scope``: nothing it recorded runs."""
        self._check_innermost(scope)
        recorder = self.recorder
        self.stack.pop()
        scope.closed = True
        self.restore(scope)
        if scope.top:
            recorder.discard_graph(scope.graph)
            self._leave_top(scope)
        else:
            recorder.discard_loop(scope.graph)
            top = self.stack[0] if self.stack else None
            if top is not None and top.pools is not None:
                # Stream order no longer holds: the streams recorded nodes that are gone.
                top.pools = StreamPools(recorder, self.runtime.errors.capture)
                self.runtime.pools = top.pools
            if scope.wrapper is not None:
                self.discard(scope.wrapper)

    def discard_all(self) -> None:
        """Drop every open scope, innermost first."""
        while self.stack:
            self.discard(self.stack[-1])

    def _leave_top(self, scope: Scope) -> None:
        runtime = self.runtime
        assert scope.outer_pools is not None and scope.pools is not None
        runtime.pools = scope.outer_pools
        scope.pools.forget_order()

    def restore(self, scope: Scope) -> None:
        """Give every data the scope touched its state from before the scope."""
        for state, snapshot in (scope.snapshots or {}).values():
            state.restore(snapshot)

    def _check_innermost(self, scope: Scope) -> None:
        if not self.stack or self.stack[-1] is not scope:
            raise ScopeError("scopes must be closed innermost first")

    @property
    def innermost(self) -> Scope | None:
        return self.stack[-1] if self.stack else None

    def in_nested_scope(self) -> bool:
        """True inside a loop body or a nested graph scope (no host work there)."""
        return any(not scope.top for scope in self.stack)

    def user_scopes(self) -> int:
        """Open scopes other than graph mode's epoch."""
        return sum(1 for scope in self.stack if scope.kind is not ScopeKind.EPOCH)

    # -- graph mode's epochs ------------------------------------------------------------
    def epoch_boundary(self) -> None:
        """Launch what the current epoch recorded (fence, wait and finalize then run
        at the root, between epochs)."""
        if self.stack and self.stack[0].kind is ScopeKind.EPOCH:
            self.close(self.stack[0])

    def epoch_full(self) -> bool:
        """True when the current epoch should be launched (:data:`EPOCH_TASKS`)."""
        stack = self.stack
        return bool(stack) and stack[0].kind is ScopeKind.EPOCH and \
            stack[0].work >= EPOCH_TASKS

    def epoch_begin(self) -> None:
        """Record the next epoch."""
        if self.epochs and not self.stack and not self.runtime.finalized:
            self.open(ScopeKind.EPOCH)

    def retirement_allowed(self) -> bool:
        """Retired data is written back at the root level (or in an epoch) only."""
        return not self.stack or self.stack[0].kind is ScopeKind.EPOCH

    # -- what the runtime tells us about work -------------------------------------------
    def before_acquire(self, plan: Plan) -> None:
        """Hoist the imports of the innermost repeated scope (before planning)."""
        scope = self.stack[-1]
        if scope.repeatable:
            self._hoist_imports(scope, plan)

    def noted(self, plan: Plan) -> None:
        """Note an acquisition (after planning) in every open scope."""
        sources = {id(access): source for access, source in plan.moves or ()}
        outermost = self.stack[0]
        outermost.work += 1
        touched = outermost.touched
        for access in plan.accesses:
            state = access.state
            touched[id(state)] = state
            self.snapshot(state)
            instance = access.instance
            if instance is None:
                continue
            source = sources.get(id(access))
            used = source if source is not None else (
                instance if access.mode & READ else None)
            if used is None:
                continue
            place = (id(state), used.device)
            for scope in self.stack:
                if scope.repeatable and place not in scope.fresh:
                    scope.assumed[place] = state

    def released(self, plan: Plan) -> None:
        """Note the writes of ended work."""
        for access in plan.accesses:
            if access.mode & WRITE and access.instance is not None:
                self.wrote(access.state, access.instance)

    def snapshot(self, state: DataState) -> None:
        """Snapshot ``state`` in every open scope that has not seen it yet."""
        key = id(state)
        for scope in self.stack:
            snapshots = scope.snapshots
            if snapshots is not None and key not in snapshots:
                snapshots[key] = (state, state.snapshot())

    def wrote(self, state: DataState, instance: Instance) -> None:
        """``instance`` was written or copied into inside the open scopes."""
        place = (id(state), instance.device)
        for scope in self.stack:
            if scope.repeatable:
                scope.fresh.add(place)

    def begin_body(self, stream: Stream) -> None:
        """A task body is about to enqueue work on ``stream``: capture it."""
        self.recorder.begin_body(stream)

    def copy_device(self) -> int | None:
        """The device internal copies must run on (a loop body's), or ``None``."""
        return self.recorder.loop_device()

    # -- repeated bodies --------------------------------------------------------------
    def _hoist_imports(self, scope: Scope, plan: Plan) -> None:
        """Copy data a repeated scope reads from outside it *before* the scope.

        An access of the innermost scope (a loop body, a launchable graph) that reads
        an instance it would fill by copying from an instance valid before the scope
        gets that copy at the enclosing level instead (the root for a launchable
        graph), once, rather than in the body at every iteration or launch.
        """
        for access in plan.accesses:
            instance = access.instance
            if not access.mode & READ or instance is None or \
                    instance.state is not INVALID:
                continue
            state = access.state
            source = state.valid_source(access.device)
            if source is None or (id(state), source.device) in scope.fresh:
                continue
            self.snapshot(state)
            prerequisites = [*state.tracker.prerequisites(READ), *source.ready.values()]
            with self._enclosing_level(scope):
                self._note_import(state, instance, source)    # in enclosing scopes
                self.runtime.copy_into(state, instance, source, prerequisites,
                                       state.label)

    def _note_import(self, state: DataState, instance: Instance,
                     source: Instance) -> None:
        self.snapshot(state)
        place = (id(state), source.device)
        for scope in self.stack:
            if scope.repeatable and place not in scope.fresh:
                scope.assumed[place] = state

    @contextlib.contextmanager
    def _enclosing_level(self, scope: Scope) -> Iterator[None]:
        """Record (or, outside any graph, run) at the level enclosing ``scope``."""
        runtime = self.runtime
        recorder = self.recorder
        saved = runtime.pools
        self.stack.pop()
        if scope.top:
            assert scope.outer_pools is not None
            runtime.pools = scope.outer_pools
        else:
            # Streams of their own: the scope's streams carry the body's nodes, which
            # would order the copy after the loop node it must precede.
            if scope.hoist_pools is None:
                scope.hoist_pools = StreamPools(recorder, runtime.errors.capture)
            runtime.pools = scope.hoist_pools
        parent = scope.graph.parent
        previous = recorder.enter_level(
            None if scope.top or parent is None else parent.graph)
        try:
            yield
        finally:
            recorder.enter_level(previous)
            runtime.pools = saved
            self.stack.append(scope)

    def _refresh_assumed(self, scope: Scope) -> None:
        """Copy into the assumed instances the recording left invalid (in the body)."""
        for (_, device), state in scope.assumed.items():
            instance = state.instances.get(device)
            if instance is None or instance.state is not INVALID:
                continue
            source = state.valid_source(device)
            if source is None:
                continue
            prerequisites = [*state.tracker.prerequisites(READ), *source.ready.values()]
            self.runtime.copy_into(state, instance, source, prerequisites, state.label)

    # -- the recorder, seen from the runtime ---------------------------------------------
    def pending_events(self) -> list[Event]:
        """Launches a fence or finalize must wait for."""
        return self.recorder.pending_events()

    def finalized(self) -> None:
        """Release what the recorder holds (cached executables, streams)."""
        self.recorder.context_finalized()

    def statistics(self) -> tuple[int, int]:
        """``(graph instantiations, executable updates)`` so far."""
        return self.recorder.graph_instantiations, self.recorder.graph_updates

    def __repr__(self) -> str:
        return f"<ScopeTracker {self.stack}>"

