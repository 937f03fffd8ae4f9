"""Graph scopes of a runtime: epochs of graph mode, graph scopes, loops, launchables.

A runtime in graph mode (``context(use_graph=True)``, ``stackable_context``) has a
:class:`ScopeTracker`, owned by its mode (:class:`~stflow._graph.mode.GraphMode`, the
one part a stream-mode runtime does not have). It keeps a
stack of :class:`~stflow._graph.scope.Scope` objects over the runtime's backend, a
:class:`~stflow._graph.recording.GraphRecorder`. The outermost scope records a
top-level graph with a set of streams of its own (so that stream order inside a graph
never stands in for an order the graph does not have); nested ones record the body of a
loop node (a ``graph_scope`` nested in a loop is a loop that runs once). A
``graph_scope`` that no loop encloses is *inline*: it records into the top-level graph
itself, so it may hold host callbacks, and discarding it removes what it added.

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

Threads
    In a stackable context every host thread has scopes of its own (a
    :class:`~stflow._graph.scope.Recording` per thread): its graphs, streams and scope stack. Data that a
    thread's open top-level scope touched is marked (``DataState.scope``) until the
    scope closes: another thread's work on it waits until then (the runtime blocks
    it), since it could only be ordered after work that has not run yet. Graph mode's
    epochs are one recording shared by every thread.

What a scope is lives in ``scope.py``; opening, closing (launching and lowering a
top-level scope) and discarding, which run once per scope, in ``lifetime.py``, which
stays Python. This module holds what runs for every task (the notes of the open
scopes, hoisting) and is compiled.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .._core.access import READ, WRITE
from .._core.coherence import INVALID, DataState, Instance
from .._core.streams import StreamPools
from . import lifetime as lifetime
from .scope import Recording, Scope, ScopeKind, ScopeOwner

if TYPE_CHECKING:
    from .._core.plan import Plan
    from ..backends._base import Event, Stream
    from .recording import GraphRecorder

__all__ = ["EPOCH_TASKS", "ScopeTracker"]

EPOCH_TASKS = 4096
"""Graph mode launches an epoch once it holds this many tasks (at the next release with
no task started), as if ``fence()`` had been called: the driver's cost of
instantiating a graph grows faster than its size, and earlier launches overlap the
recording of what follows."""


def _repeats(stack: list[Scope]) -> bool:
    """True when a scope of ``stack`` is repeated (a loop body, a launchable)."""
    for scope in stack:
        if scope.repeatable:
            return True
    return False


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

    def __init__(
        self, runtime: ScopeOwner, recorder: GraphRecorder, epochs: bool
    ) -> None:
        self.runtime = runtime
        self.recorder = recorder
        self.epochs = epochs
        self.per_thread = not epochs
        recorder.per_thread = self.per_thread
        recorder.error_sink = runtime.errors.capture
        recorder.pin_pageable = runtime.data.pin_pageable
        self._shared = Recording()
        self._local = threading.local()
        self.open_tops: dict[Scope, int] = {}  # per thread: open top scopes -> thread
        self.submitter: int | None = None  # epochs: the first submitting thread
        self.arrivals: set[int] = set()  # epochs: the other threads so far

    # -- the calling thread's recording ---------------------------------------------
    def here(self) -> Recording:
        """The recording of the calling thread."""
        if not self.per_thread:
            return self._shared
        try:
            recording: Recording = self._local.recording
        except AttributeError:
            recording = self._local.recording = Recording()
        return recording

    @property
    def stack(self) -> list[Scope]:
        """The calling thread's open scopes, outermost first."""
        return self.here().stack

    def pools(self) -> StreamPools | None:
        """The streams of the calling thread's level (``None``: the runtime's)."""
        return self.here().pools

    def arrived(self, thread: int) -> bool:
        """Note that ``thread`` submits (epochs); True the first time each thread but
        the first does. From the first such arrival on, task bodies capture on their
        own (see the recorder); a body started before shares its capture with events
        other threads may depend on, so every newly arriving thread waits until no
        task is started (not only the second one: a third may arrive while such a
        body is still in progress)."""
        if self.submitter is None:
            self.submitter = thread
            return False
        if thread == self.submitter or thread in self.arrivals:
            return False
        self.arrivals.add(thread)
        self.recorder.split_bodies = True
        return True

    def foreign(self, state: DataState) -> Scope | None:
        """The open top scope of another thread that touched ``state``, if any."""
        scope = state.scope
        if scope is not None and scope.thread != threading.get_ident():
            return scope
        return None

    # -- opening and closing (the runtime's lock is held) ----------------------------
    def open(self, kind: ScopeKind, count: int | None = None) -> Scope:
        """Open a scope of ``kind`` inside the innermost one
        (:func:`stflow._graph.lifetime.open`)."""
        return lifetime.open(self, kind, count)

    def close(self, scope: Scope, launch: bool = True) -> None:
        """Close the innermost scope ``scope``, launching a top-level one when
        ``launch`` (:func:`stflow._graph.lifetime.close`)."""
        lifetime.close(self, scope, launch)

    def lower(self, scope: Scope) -> None:
        """After the last launch of top scope ``scope``: its recorded events become
        the launch's completion event (:func:`stflow._graph.lifetime.lower`)."""
        lifetime.lower(self, scope)

    def discard(self, scope: Scope) -> None:
        """Drop the innermost scope ``scope``: nothing it recorded runs
        (:func:`stflow._graph.lifetime.discard`)."""
        lifetime.discard(self, scope)

    def discard_all(self) -> None:
        """Drop every open scope, innermost first."""
        while self.stack:
            self.discard(self.stack[-1])

    def restore(self, scope: Scope) -> None:
        """Give every data the scope touched its state from before the scope."""
        for state, snapshot in (scope.snapshots or {}).values():
            state.restore(snapshot)

    @property
    def innermost(self) -> Scope | None:
        return self.stack[-1] if self.stack else None

    def in_nested_scope(self) -> bool:
        """True inside a loop body or a graph scope nested in one: a conditional
        graph node's body, which holds no host work. (A graph scope that no loop
        encloses is recorded inline, into the top-level graph.)"""
        return any(not scope.top and scope.inline is None for scope in self.stack)

    def user_scopes(self) -> int:
        """Open scopes other than graph mode's epoch."""
        return sum(1 for scope in self.stack if scope.kind is not ScopeKind.EPOCH)

    # -- graph mode's epochs ------------------------------------------------------------
    def epoch_boundary(self) -> None:
        """Launch what the current epoch recorded (fence, wait and finalize then run
        at the root, between epochs)."""
        if self.stack and self.stack[0].kind is ScopeKind.EPOCH:
            self.close(self.stack[0])

    def epoch_full(self, stack: list[Scope]) -> bool:
        """True when the current epoch, at the bottom of the open scopes ``stack``,
        should be launched (:data:`EPOCH_TASKS`)."""
        return stack[0].kind is ScopeKind.EPOCH and stack[0].work >= EPOCH_TASKS

    def epoch_begin(self) -> None:
        """Record the next epoch."""
        if self.epochs and not self.stack and not self.runtime.finalized:
            self.open(ScopeKind.EPOCH)

    def retirement_allowed(self) -> bool:
        """Retired data is written back at the root level (or in an epoch) only, and
        while no thread has a scope open."""
        if self.per_thread:
            return not self.open_tops
        stack = self._shared.stack
        return not stack or stack[0].kind is ScopeKind.EPOCH

    # -- what the runtime tells us about work -------------------------------------------
    def before_acquire(self, plan: Plan) -> None:
        """Hoist the imports of the innermost repeated scope, and those of read-only
        data (before planning)."""
        self._hoist_imports(self.stack[-1], plan)

    def noted(self, plan: Plan) -> None:
        """Note an acquisition (after planning) in every open scope: the outermost
        counts it and notes what it touches, discardable scopes snapshot that data,
        and repeated scopes note which instances their bodies assume valid."""
        stack = self.here().stack
        outermost = stack[0]
        outermost.work += 1
        touched = outermost.touched
        for access in plan.reductions:  # combined (read, written) later
            touched[id(access.state)] = access.state
            self._snapshot(stack, access.state)
        for access in plan.accesses:
            touched[id(access.state)] = access.state
            self._snapshot(stack, access.state)
        if _repeats(stack):
            _note_assumed([scope for scope in stack if scope.repeatable], stack, plan)

    def released(self, plan: Plan, stack: list[Scope]) -> None:
        """Note the writes of ended work in the calling thread's open scopes
        ``stack`` (repeated scopes then need not refresh or hoist what they wrote)."""
        if not _repeats(stack):
            return
        for access in plan.accesses:
            if access.mode & WRITE and access.instance is not None:
                self.wrote(access.state, access.instance)

    def snapshot(self, state: DataState) -> None:
        """Snapshot ``state`` in every open scope that has not seen it yet (and, with
        scopes per thread, mark it as the open top scope's)."""
        self._snapshot(self.here().stack, state)

    def _snapshot(self, stack: list[Scope], state: DataState) -> None:
        if state.readonly and state.scope is None:
            return  # only read from now on: nothing to restore, nobody to wait
        key = id(state)
        for scope in stack:
            snapshots = scope.snapshots
            if snapshots is not None and key not in snapshots:
                snapshots[key] = (state, state.snapshot())
        if self.per_thread and stack and state.scope is None:
            top = stack[0]
            state.scope = top
            top.touched[key] = state

    def read_at(self, state: DataState, device: int) -> None:
        """Work of the open scopes reads ``state``'s instance at ``device``: unless
        the scopes wrote it, a repeated body assumes it valid on entry."""
        if self.is_local(state):
            return
        place = (id(state), device)
        for scope in self.stack:
            if scope.repeatable and place not in scope.fresh:
                scope.assumed[place] = state

    def wrote(self, state: DataState, instance: Instance) -> None:
        """``instance`` was written or copied into inside the open scopes."""
        place = (id(state), instance.device)
        stack = self.stack
        if not stack:
            return
        inner = stack[-1]
        for scope in stack:
            if scope.repeatable and place not in scope.fresh:
                scope.fresh.add(place)
                if scope is not inner:
                    inner.lent.append((scope, place))

    def end_body(self, stream: Stream) -> None:
        """A task body that ``GraphMode.body_started`` captured ended."""
        self.recorder.end_body(stream)
        here = self.here()
        if here.bodies:
            here.bodies -= 1

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

        Read-only data that no open scope wrote is imported at the root level, from
        any scope: the copy is then real work that other threads' scopes, reading
        the same data meanwhile, can rely on.
        """
        for access in plan.accesses:
            instance = access.instance
            if (
                not access.mode & READ
                or instance is None
                or instance.state is not INVALID
            ):
                continue
            state = access.state
            if self.is_local(state):
                continue  # no_export data: fresh in every iteration
            at_root = state.readonly and state.scope is None and self.per_thread
            if not at_root and not scope.repeatable:
                continue
            source = state.valid_source(access.device)
            if source is None:
                continue
            prerequisites = [*state.tracker.prerequisites(READ), *source.ready.values()]
            if at_root:
                with self.root_level():
                    self.runtime.copy_into(
                        state,
                        instance,
                        source,
                        prerequisites,
                        state.label,
                        copy_title="copy before scope",
                    )
                continue
            if (id(state), source.device) in scope.fresh:
                continue
            with self._enclosing_level(scope):
                self._note_import(state, instance, source)  # in enclosing scopes
                event = self.runtime.copy_into(
                    state,
                    instance,
                    source,
                    prerequisites,
                    state.label,
                    copy_title="copy before scope",
                )
            # The import is work of the enclosing level, which runs even if this
            # scope is discarded: the scope's snapshot must keep it (its copy, and
            # the event later users of the instance, or writers of the source, wait
            # for). Snapshotted only now, or, when the scope's work touched the data
            # before, the snapshot taken then gets the import.
            self._keep_import(scope, state, instance, source, event)

    def _keep_import(
        self,
        scope: Scope,
        state: DataState,
        target: Instance,
        source: Instance,
        event: Event,
    ) -> None:
        """Make the snapshot of ``state`` that discarding ``scope`` restores hold an
        import made for it at the enclosing level (``source`` copied into ``target``,
        complete at ``event``)."""
        snapshots = scope.snapshots
        entry = None if snapshots is None else snapshots.get(id(state))
        if snapshots is None or entry is None:
            self.snapshot(state)
            return
        now = state.snapshot()
        state.restore(entry[1])
        if source.state is not INVALID:  # as the copy did (``copy_into``)
            state.copied(target, source, event)
        state.tracker.release(READ, event)
        snapshots[id(state)] = (state, state.snapshot())
        state.restore(now)

    def _note_import(
        self, state: DataState, instance: Instance, source: Instance
    ) -> None:
        self.snapshot(state)
        place = (id(state), source.device)
        for scope in self.stack:
            if scope.repeatable and place not in scope.fresh:
                scope.assumed[place] = state

    def make_local(self, state: DataState) -> Scope | None:
        """``state`` was created with ``no_export=True``: it belongs to the innermost
        open scope (returned; ``None`` at the root, where it is ordinary data)."""
        scope = self.innermost
        if scope is not None:
            scope.locals.add(id(state))
        return scope

    def is_local(self, state: DataState) -> bool:
        """True when ``state`` is ``no_export`` data of an open scope."""
        return _is_local(self.here().stack, state)

    def touch(self, state: DataState) -> None:
        """Work on ``state`` was recorded outside a task (an eviction): the
        outermost scope lowers its events when it closes."""
        stack = self.stack
        if stack:
            stack[0].touched[id(state)] = state

    @contextlib.contextmanager
    def root_level(self) -> Iterator[None]:
        """Run at the root level (real streams), from inside the open scopes."""
        here = self.here()
        stack, pools = here.stack, here.pools
        here.stack = []
        here.pools = stack[0].outer_pools
        previous = self.recorder.enter_level(None)
        try:
            yield
        finally:
            self.recorder.enter_level(previous)
            here.stack = stack
            here.pools = pools

    @contextlib.contextmanager
    def _enclosing_level(self, scope: Scope) -> Iterator[None]:
        """Record (or, outside any graph, run) at the level enclosing ``scope``."""
        runtime = self.runtime
        recorder = self.recorder
        here = self.here()
        saved = here.pools
        here.stack.pop()
        if scope.top:
            here.pools = scope.outer_pools
        else:
            # Streams of their own: the scope's streams carry the body's nodes, which
            # would order the copy after the loop node it must precede.
            if scope.hoist_pools is None:
                scope.hoist_pools = StreamPools(recorder, runtime.errors.capture)
            here.pools = scope.hoist_pools
        parent = scope.graph.parent
        previous = recorder.enter_level(
            None if scope.top or parent is None else parent.graph
        )
        try:
            yield
        finally:
            recorder.enter_level(previous)
            here.pools = saved
            here.stack.append(scope)

    # -- the recorder, seen from the runtime ---------------------------------------------
    def pending_events(self) -> list[Event]:
        """Launches a fence or finalize must wait for."""
        return self.recorder.pending_events()

    def finalized(self) -> None:
        """Release what the recorder holds (cached executables, streams)."""
        self.recorder.context_finalized()

    def statistics(self) -> tuple[int, int]:
        """``(graph instantiations, executable updates)`` so far."""
        recorder = self.recorder
        return recorder.graph_instantiations, recorder.graph_updates

    def __repr__(self) -> str:
        return f"<ScopeTracker {self.stack}>"


def _is_local(stack: list[Scope], state: DataState) -> bool:
    """True when ``state`` is ``no_export`` data of a scope of ``stack``."""
    key = id(state)
    return any(scope.locals and key in scope.locals for scope in stack)


def _note_assumed(repeated: list[Scope], stack: list[Scope], plan: Plan) -> None:
    """The instances ``plan`` reads (or copies from) are assumed valid when the bodies
    of the ``repeated`` scopes start again, unless those scopes wrote them."""
    sources = {id(access): source for access, source in plan.moves or ()}
    for access in plan.accesses:
        state = access.state
        instance = access.instance
        if instance is None or _is_local(stack, state):
            continue
        source = sources.get(id(access))
        used = (
            source if source is not None else (instance if access.mode & READ else None)
        )
        if used is None:
            continue
        place = (id(state), used.device)
        for scope in repeated:
            if place not in scope.fresh:
                scope.assumed[place] = state
