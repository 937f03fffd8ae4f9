"""The lifetime of a scope: opening, closing, discarding.

Functions of a :class:`~stflow._graph.scopes.ScopeTracker` (its methods of the same
names call them). Each runs once per scope, with the runtime's lock held, apart from
the hot path: this module stays Python.

Opening
    A scope opens inside the innermost one. An outermost scope records a top-level
    graph with streams of its own; a graph scope that no loop encloses records
    inline, into that graph; the others record the body of a loop node (a loop at the
    root level gets a graph scope to hold it).

Closing
    A repeated scope first refreshes the instances its body assumes valid (see
    "Repeating" in ``scopes.py``). A top-level scope's graph is then launched, unless
    it is kept for a launchable graph, and *lowered*: the events recorded in it
    become the launch's completion event wherever data states hold them. When a
    top-level scope closes, its streams forget what they waited for, and the recorder
    drops a launched graph once it has run: nothing of an epoch keeps earlier epochs
    alive.

Discarding
    A discarded scope (its block raised; a ``repeat(0)`` body, which never runs)
    restores the snapshots of the data it touched, takes back the places it lent to
    enclosing scopes, and drops its graph, loop or inline part from the recording.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .._core.access import READ
from .._core.coherence import INVALID
from .._core.errors import ScopeError
from .._core.streams import StreamPools
from .scope import Recording, Scope, ScopeKind, ScopeOwner

if TYPE_CHECKING:
    from ..backends._base import Event
    from .recording import GraphRecorder

__all__ = ["Owner", "close", "discard", "lower", "open"]

_LOOPS = (ScopeKind.WHILE, ScopeKind.REPEAT)


class Owner(Protocol):
    """What the functions use of the :class:`~stflow._graph.scopes.ScopeTracker`
    they serve."""

    runtime: ScopeOwner
    recorder: GraphRecorder
    per_thread: bool
    open_tops: dict[Scope, int]

    @property
    def stack(self) -> list[Scope]:
        """The calling thread's open scopes, outermost first."""

    def here(self) -> Recording:
        """The recording of the calling thread."""

    def open(self, kind: ScopeKind, count: int | None = None) -> Scope:
        """Open a scope of ``kind`` inside the innermost one (:func:`open`)."""

    def close(self, scope: Scope, launch: bool = True) -> None:
        """Close the innermost scope ``scope`` (:func:`close`)."""

    def lower(self, scope: Scope) -> None:
        """Lower the events recorded in top scope ``scope`` (:func:`lower`)."""

    def discard(self, scope: Scope) -> None:
        """Drop the innermost scope ``scope`` (:func:`discard`)."""

    def restore(self, scope: Scope) -> None:
        """Give every data the scope touched its state from before the scope."""


def open(scopes: Owner, kind: ScopeKind, count: int | None = None) -> Scope:
    """Open a scope of ``kind`` inside the innermost one."""
    recorder = scopes.recorder
    here = scopes.here()
    stack = here.stack
    _check_no_body(here, "open")
    if not stack and kind in _LOOPS:
        wrapper = scopes.open(ScopeKind.GRAPH)  # a loop node needs a graph
        scope = scopes.open(kind, count)
        scope.wrapper = wrapper
        return scope
    # Top-level scopes may turn out launchable (pop_prologue_shared): track them.
    repeatable = kind in _LOOPS or (kind is not ScopeKind.EPOCH and not stack)
    scope = Scope(kind, repeatable, kind is not ScopeKind.EPOCH, count)
    runtime = scopes.runtime
    if not stack:
        scope.top = True
        scope.graph = recorder.open_graph()
        scope.outer_pools = here.pools
        scope.pools = here.pools = StreamPools(recorder, runtime.errors.capture)
        if scopes.per_thread:
            scopes.open_tops[scope] = scope.thread
    elif (
        kind is ScopeKind.GRAPH
        and recorder.current is not None
        and recorder.current.parent is None
    ):
        # No loop encloses it: record into the top-level graph itself.
        scope.inline = recorder.open_inline()
        scope.graph = scope.inline.graph
    else:
        loop_count = (
            count if kind is ScopeKind.REPEAT else None if kind is ScopeKind.WHILE else 1
        )
        scope.graph = recorder.open_loop(loop_count)
    stack.append(scope)
    return scope


def _check_no_body(here: Recording, what: str) -> None:
    if here.bodies:
        raise ScopeError(
            f"a scope cannot {what} inside the body of a task recorded "
            "in a graph (its work is being captured); end the task "
            "first"
        )


def close(scopes: Owner, scope: Scope, launch: bool = True) -> None:
    """Close the innermost scope ``scope``; a top-level one is launched when
    ``launch`` (else it is kept, for a launchable graph). A body that never runs
    (``repeat(0)``) has no effect at all: it is discarded."""
    _check_innermost(scopes, scope)
    _check_no_body(scopes.here(), "close")
    if scope.kind is ScopeKind.REPEAT and scope.count == 0:
        scopes.discard(scope)
        return
    recorder = scopes.recorder
    if scope.kind in _LOOPS or (scope.top and not launch):
        _refresh_assumed(scopes, scope)
    scopes.stack.pop()
    scope.closed = True
    if scopes.stack:
        scopes.stack[-1].lent.extend(scope.lent)  # discarded with the parent
    if scope.inline is not None:
        recorder.close_inline(scope.inline)
        return
    if not scope.top:
        recorder.close_loop(scope.graph)
        if scope.wrapper is not None:
            scopes.close(scope.wrapper)
        return
    recorder.close_graph(scope.graph)
    _leave_top(scopes, scope)
    if launch:
        if scope.graph.used:
            recorder.launch(scope.graph)
            scopes.lower(scope)
        else:
            recorder.discard_graph(scope.graph)


def lower(scopes: Owner, scope: Scope) -> None:
    """After the last launch of top scope ``scope``: the events recorded in its
    graph, wherever data states hold them, become the launch's completion event,
    so that nothing later refers to the recording (or keeps it alive)."""
    graph = scope.graph
    done = graph.done
    if done is None:
        return
    recorded_in = scopes.recorder.recorded_in

    def stand_in(event: Event) -> Event:
        return done if recorded_in(event, graph) else event

    for state in scope.touched.values():
        state.substitute(stand_in)
        pending = state.pending
        if pending is not None:
            pending.partials = [
                (instance, stand_in(event)) for instance, event in pending.partials
            ]


def discard(scopes: Owner, scope: Scope) -> None:
    """Drop the innermost scope ``scope``: nothing it recorded runs."""
    _check_innermost(scopes, scope)
    recorder = scopes.recorder
    scopes.stack.pop()
    scope.closed = True
    scopes.restore(scope)
    for outer, place in scope.lent:
        outer.fresh.discard(place)
    if scope.top:
        recorder.discard_graph(scope.graph)
        _forget_reads(scopes, scope)
        _leave_top(scopes, scope)
    else:
        if scope.inline is not None:
            recorder.discard_inline(scope.inline)
        else:
            recorder.discard_loop(scope.graph)
        here = scopes.here()
        top = here.stack[0] if here.stack else None
        if top is not None and top.pools is not None:
            # Stream order no longer holds: the streams recorded nodes that are gone.
            top.pools = here.pools = StreamPools(recorder, scopes.runtime.errors.capture)
        if scope.wrapper is not None:
            scopes.discard(scope.wrapper)


def _forget_reads(scopes: Owner, scope: Scope) -> None:
    """Read-only data is not restored (other threads may have read it meanwhile):
    drop the reads the discarded top scope ``scope`` recorded instead."""
    graph = scope.graph
    recorded_in = scopes.recorder.recorded_in
    for state in scope.touched.values():
        tracker = state.tracker
        if state.readonly and tracker.readers:
            tracker.readers = {
                stream: event
                for stream, event in tracker.readers.items()
                if not recorded_in(event, graph)
            }


def _leave_top(scopes: Owner, scope: Scope) -> None:
    """Back at the root: the root's streams; the data is other threads' again."""
    assert scope.pools is not None
    scopes.here().pools = scope.outer_pools
    scope.pools.forget_order()
    if scopes.open_tops.pop(scope, None) is not None:
        for state in scope.touched.values():
            if state.scope is scope:
                state.scope = None
        scopes.runtime.wake()


def _check_innermost(scopes: Owner, scope: Scope) -> None:
    if not scopes.stack or scopes.stack[-1] is not scope:
        raise ScopeError("scopes must be closed innermost first")


def _refresh_assumed(scopes: Owner, scope: Scope) -> None:
    """Copy into the assumed instances the recording left invalid (in the body)."""
    for (_, device), state in scope.assumed.items():
        instance = state.instances.get(device)
        if instance is None or instance.state is not INVALID:
            continue
        source = state.valid_source(device)
        if source is None:
            continue
        prerequisites = [*state.tracker.prerequisites(READ), *source.ready.values()]
        scopes.runtime.copy_into(
            state,
            instance,
            source,
            prerequisites,
            state.label,
            copy_title="copy in scope",
        )
