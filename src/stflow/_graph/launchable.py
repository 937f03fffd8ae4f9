"""Launchable graphs of a ``stackable_context``: recorded once, launched many times.

``launchable_graph_scope()``, ``pop_prologue_shared()`` and ``TaskGraph.raw`` hand out
:class:`LaunchableGraph` handles over one :class:`_Launchable`: a top-level scope
closed without a launch (the prologue), whose graph ``launch()`` runs as often as
asked. It holds the data its recording touched until the last handle is reset (the
epilogue): the data is released (written back at finalize), a graph never launched
restores it, and the events recorded in the graph are lowered. Cold code (once per
recording or launch): this module stays Python.

It also holds :func:`_scopes`, the way from a stackable context's runtime to its
scope tracker, which the modules above it (``stackable_data``, ``loops``,
``stackable``) use too.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from .._core.coherence import DataState
from .._engine.runtime import Runtime
from .mode import GraphMode
from .scope import Scope, ScopeKind
from .scopes import ScopeTracker

if TYPE_CHECKING:
    from .recording import GraphRecorder

__all__ = ["LaunchableGraph", "Owner"]


class Owner(Protocol):
    """What launchable graphs use of their ``stackable_context`` (which stands above
    this module)."""

    _runtime: Runtime
    _launchables: weakref.WeakSet[_Launchable]

    def _open(
        self, kind: ScopeKind, count: int | None = None, root_only: str | None = None
    ) -> Scope:
        """Open a scope of ``kind`` (``root_only``: what refuses to open elsewhere)."""

    def _close(self, scope: Scope, failed: bool) -> None:
        """Close (``failed``: discard) the innermost scope ``scope``."""


def _scopes(runtime: Runtime) -> ScopeTracker:
    """The scope tracker of a stackable context's runtime."""
    mode = runtime.mode
    assert isinstance(mode, GraphMode)
    return mode.scopes


class _Launchable:
    """The state behind :class:`LaunchableGraph` handles: one recorded graph."""

    def __init__(self, sctx: Owner, scope: Scope) -> None:
        self.sctx = sctx
        self.scope = scope
        self.recording = True
        self.released = False
        self.lock = threading.Lock()
        sctx._launchables.add(self)

    def recorder(self) -> GraphRecorder:
        return _scopes(self.sctx._runtime).recorder

    def _label(self) -> str:
        """How conflict messages name the graph holding the data."""
        return "a launchable graph holding it until its reset()"

    def _holds(self, state: Any) -> bool:
        return any(held is state for held in self.scope.held_data())

    # -- what eviction leaves alone between launches (_eviction.HeldWork) ----------
    def held_plan(self) -> None:
        return None

    def held_states(self) -> Iterable[DataState]:
        return self.scope.touched.values()

    def held_private(self) -> tuple[()]:
        return ()

    def close_recording(self) -> None:
        """The prologue: stop recording; the data it uses is held until release."""
        if not self.recording:
            return
        runtime = self.sctx._runtime
        with runtime.lock:
            _scopes(runtime).close(self.scope, launch=False)
            self.recording = False
            if runtime.instruments.attached:
                runtime.instruments.scope_closed(False)
            runtime.hold(self, self.scope.held_data())

    def check(self, what: str) -> None:
        if self.released:
            raise RuntimeError(
                f"{what} on a launchable graph that was reset; record a new one"
            )

    def launch(self) -> None:
        self.check("launch()")
        self.close_recording()
        runtime = self.sctx._runtime
        with runtime.lock:
            self.recorder().launch(self.scope.graph, release=False)
        runtime.errors.raise_pending("launch()")

    def executable(self) -> int:
        self.check("exec_graph")
        self.close_recording()
        return _handle_int(self.recorder().executable(self.scope.graph))

    def stream(self) -> int:
        self.check("stream")
        self.close_recording()
        return int(self.recorder().launch_stream().handle)

    def graph(self) -> int:
        self.check("graph")
        self.close_recording()
        return _handle_int(self.scope.graph.handle)

    def release(self) -> None:
        """The epilogue: release the data (written back at finalize), free the graph."""
        with self.lock:
            if self.released:
                return
            self.released = True
        sctx = self.sctx
        sctx._launchables.discard(self)
        runtime = sctx._runtime
        if runtime.finalized:
            return
        with runtime.lock:
            scopes = _scopes(runtime)
            if self.recording:
                scopes.close(self.scope, launch=False)
                self.recording = False
                if runtime.instruments.attached:
                    runtime.instruments.scope_closed(False)
            else:
                runtime.unhold(self, self.scope.held_data())
            graph = self.scope.graph
            if graph.launches == 0:
                scopes.restore(self.scope)  # never launched: data unchanged
            self.recorder().release(graph)
            scopes.lower(self.scope)


def _handle_int(handle: Any) -> int:
    try:
        return int(handle)
    except TypeError:
        pass
    try:
        return int(handle.getPtr())  # a cuda.bindings handle
    except AttributeError:
        return id(handle)


class LaunchableGraph:
    """A recorded graph that can be launched many times (``pop_prologue_shared()``,
    ``launchable_graph_scope()``, ``TaskGraph.raw``).

    ``LaunchableGraph()`` built directly is an already-reset handle.
    """

    _state: _Launchable | None = None  # also while __init__ has not run

    def __init__(self) -> None:
        self._state = None

    @classmethod
    def _of(cls, state: _Launchable) -> LaunchableGraph:
        handle = cls()
        handle._state = state
        return handle

    def _live(self, what: str) -> _Launchable:
        state = self._state
        if state is None or state.released:
            raise RuntimeError(f"{what} on a LaunchableGraph that was reset")
        return state

    @property
    def valid(self) -> bool:
        return self._state is not None and not self._state.released

    def launch(self) -> None:
        """Run the recorded work once, asynchronously."""
        self._live("launch()").launch()

    @property
    def exec_graph(self) -> int:
        """The executable graph handle (instantiated on first use)."""
        return self._live("exec_graph").executable()

    @property
    def stream(self) -> int:
        """The stream launches are ordered on."""
        return self._live("stream").stream()

    @property
    def graph(self) -> int:
        """The graph handle."""
        return self._live("graph").graph()

    def reset(self) -> None:
        """Release the graph: its data is released (written back at finalize).
        Idempotent."""
        state, self._state = self._state, None
        if state is not None:
            state.release()

    def __enter__(self) -> LaunchableGraph:
        return self

    def __exit__(self, *_: Any) -> None:
        self.reset()

    def __del__(self) -> None:
        state = self._state
        if state is not None and not state.released:
            try:
                state.release()
            except Exception:  # noqa: BLE001 - collection cannot raise
                pass

    def __repr__(self) -> str:
        return f"LaunchableGraph(valid={self.valid})"


class _LaunchableScope:
    """``with sctx.launchable_graph_scope() as lg:``."""

    def __init__(self, sctx: Owner) -> None:
        self._sctx = sctx
        self._handle: LaunchableGraph | None = None

    def __enter__(self) -> LaunchableGraph:
        scope = self._sctx._open(
            ScopeKind.LAUNCHABLE, root_only="launchable_graph_scope()"
        )
        self._handle = LaunchableGraph._of(_Launchable(self._sctx, scope))
        return self._handle

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        handle = self._handle
        assert handle is not None and handle._state is not None
        state = handle._state
        if exc_type is not None and state.recording:
            state.released = True
            self._sctx._launchables.discard(state)
            self._sctx._close(state.scope, failed=True)
            handle._state = None
            return
        handle.reset()
