"""Graph scopes of a runtime: epochs of graph mode, graph scopes, loops, launchables.

A runtime whose backend is a :class:`~stflow.backends.recording.GraphRecorder` keeps a
stack of :class:`Scope` objects. The outermost one records a top-level graph (the
runtime then uses a fresh set of recording streams, so that stream order inside a graph
never stands in for an order the graph does not have); nested ones record the body of a
loop node (a nested ``graph_scope`` is a loop that runs once).

Two duties of the runtime come with scopes:

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
    the end of the body, so every iteration starts where the recording assumed.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from ._coherence import INVALID, DataState, Instance
from ._deps import READ
from ._errors import ScopeError

__all__ = ["Scope", "ScopeRuntime"]


class Scope:
    """One open scope of a runtime."""

    __slots__ = ("kind", "graph", "top", "saved", "snapshots", "repeatable", "assumed",
                 "fresh", "condition_set", "closed", "wrapper",
                 "hoist_pools")

    def __init__(self, kind: str, repeatable: bool, discardable: bool) -> None:
        self.kind = kind                  # "epoch", "graph", "while", "repeat", "launchable"
        self.graph: Any = None            # the recorder's graph of this scope
        self.top = False
        self.saved: Any = None            # root pools and streams, for a top scope
        self.snapshots: dict[int, tuple[DataState, tuple]] | None = \
            {} if discardable else None
        self.repeatable = repeatable
        self.assumed: dict[tuple[int, int], DataState] = {}
        self.fresh: set[tuple[int, int]] = set()
        self.condition_set = False
        self.closed = False
        self.wrapper: Scope | None = None  # the graph holding a root-level loop
        self.hoist_pools: dict = {}        # streams for imports hoisted out of it


class ScopeRuntime:
    """The scope half of :class:`~stflow._runtime.Runtime` (a mixin)."""

    scopes: list[Scope]
    graph_mode: bool
    finalized: bool
    backend: Any
    pools: dict
    streams: list
    lock: Any

    def open_scope(self, kind: str, count: int | None = None) -> Scope:
        """Open a scope of ``kind`` (see :class:`Scope`); the lock must be held."""
        recorder = self.backend
        if not self.scopes and kind in ("while", "repeat"):
            wrapper = self.open_scope("graph")     # a loop node needs a graph
            scope = self.open_scope(kind, count)
            scope.wrapper = wrapper
            return scope
        # Top-level scopes may turn out launchable (pop_prologue_shared): track them.
        repeatable = kind in ("while", "repeat") or (kind != "epoch" and not self.scopes)
        scope = Scope(kind, repeatable, kind != "epoch")
        if not self.scopes:
            scope.top = True
            scope.graph = recorder.open_graph()
            scope.saved = (self.pools, self.streams)
            self.pools, self.streams = {}, []
        else:
            loop_count = count if kind == "repeat" else (None if kind == "while" else 1)
            scope.graph = recorder.open_loop(loop_count)
        self.scopes.append(scope)
        return scope

    def close_scope(self, scope: Scope, launch: bool = True) -> None:
        """Close the innermost scope ``scope``; a top-level one is launched when
        ``launch`` (else it is kept, for a launchable graph)."""
        self._check_innermost(scope)
        recorder = self.backend
        if scope.kind in ("while", "repeat") or (scope.top and not launch):
            self._refresh_assumed(scope)
        self.scopes.pop()
        scope.closed = True
        if not scope.top:
            recorder.close_loop(scope.graph)
            if scope.wrapper is not None:
                self.close_scope(scope.wrapper)
            return
        recorder.close_graph(scope.graph)
        self.pools, self.streams = scope.saved
        if launch:
            if scope.graph.used:
                recorder.launch(scope.graph)
            else:
                recorder.discard_graph(scope.graph)

    def discard_scope(self, scope: Scope) -> None:
        """Drop the innermost scope ``scope``: nothing it recorded runs."""
        self._check_innermost(scope)
        recorder = self.backend
        self.scopes.pop()
        scope.closed = True
        self.restore_data(scope)
        if scope.top:
            recorder.discard_graph(scope.graph)
            self.pools, self.streams = scope.saved
        else:
            recorder.discard_loop(scope.graph)
            self.pools, self.streams = {}, []     # stream order no longer holds
            if scope.wrapper is not None:
                self.discard_scope(scope.wrapper)

    def restore_data(self, scope: Scope) -> None:
        """Give every data the scope touched its state from before the scope."""
        for state, snapshot in (scope.snapshots or {}).values():
            state.restore(snapshot)

    def _check_innermost(self, scope: Scope) -> None:
        if not self.scopes or self.scopes[-1] is not scope:
            raise ScopeError("scopes must be closed innermost first")

    # -- imports of repeated scopes ---------------------------------------------------------
    def hoist_imports(self, accesses: list[Any]) -> None:
        """Copy data a repeated scope reads from outside it *before* the scope.

        An access of the innermost scope (a loop body, a launchable graph) that reads
        an instance it would fill by copying from an instance valid before the scope
        gets that copy at the enclosing level instead (the root for a launchable
        graph), once, rather than in the body at every iteration or launch.
        """
        scope = self.scopes[-1]
        for access in accesses:
            if not access.mode & READ or access.ld._is_token:
                continue
            state = access.state
            instance = state.instances.get(access.device)
            if instance is not None and instance.state is not INVALID:
                continue
            source = state.valid_source(access.device)
            if source is None or (id(state), source.device) in scope.fresh:
                continue
            self.scope_snapshot(state)
            if instance is None:
                instance = state.instances[access.device] = Instance(access.device)
            prerequisites = [*state.tracker.prerequisites(READ), *source.ready.values()]
            with self._enclosing_level(scope):
                self.scope_access(state, READ, instance, source)    # enclosing scopes
                self._copy_into(state, instance, source, prerequisites,  # type: ignore
                                access.ld._dtype, state.label)

    @contextlib.contextmanager
    def _enclosing_level(self, scope: Scope) -> Iterator[None]:
        """Record (or, outside any graph, run) at the level enclosing ``scope``."""
        recorder = self.backend
        saved = self.pools, self.streams
        self.scopes.pop()
        if scope.top:
            self.pools, self.streams = scope.saved
        else:
            # Streams of their own: the scope's streams carry the body's nodes, which
            # would order the copy after the loop node it must precede.
            self.pools = scope.hoist_pools
        previous = recorder.enter_level(
            None if scope.top else scope.graph.parent.graph)
        try:
            yield
        finally:
            recorder.enter_level(previous)
            if scope.top:
                scope.saved = (self.pools, self.streams)
            self.pools, self.streams = saved
            self.scopes.append(scope)

    # -- bookkeeping from the prologue and epilogue --------------------------------------
    def scope_snapshot(self, state: DataState) -> None:
        """Snapshot ``state`` in every open scope that has not seen it yet."""
        key = id(state)
        for scope in self.scopes:
            snapshots = scope.snapshots
            if snapshots is not None and key not in snapshots:
                snapshots[key] = (state, state.snapshot())

    def scope_access(self, state: DataState, mode: int, instance: Instance | None,
                     source: Instance | None) -> None:
        """Note an access (after ``plan_access``) in every open scope."""
        key = id(state)
        self.scope_snapshot(state)
        for scope in self.scopes:
            if scope.repeatable and instance is not None:
                used = source if source is not None else (
                    instance if mode & READ else None)
                if used is not None:
                    place = (key, used.device)
                    if place not in scope.fresh:
                        scope.assumed[place] = state

    def epoch_boundary(self) -> None:
        """Graph mode: launch what the current epoch recorded (fence, wait, finalize
        then run at the root, between epochs); the lock must be held."""
        if self.scopes and self.scopes[0].kind == "epoch":
            self.close_scope(self.scopes[0])

    def epoch_begin(self) -> None:
        """Graph mode: record the next epoch."""
        if self.graph_mode and not self.scopes and not self.finalized:
            self.open_scope("epoch")

    def scope_wrote(self, state: DataState, instance: Instance) -> None:
        """``instance`` was written or copied into inside the open scopes."""
        place = (id(state), instance.device)
        for scope in self.scopes:
            if scope.repeatable:
                scope.fresh.add(place)

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
            self._copy_into(state, instance, source, prerequisites, None,  # type: ignore
                            state.label)
