"""``stackable_context``: work nested in graph scopes, device-side loops and
re-launchable graphs.

The root level of a stackable context runs in stream mode. ``graph_scope()`` (or
``push()``/``pop()``) records the work of a block into a graph that runs when the block
closes; ``while_loop()`` and ``repeat(count)`` record a body that the device runs many
times; ``launchable_graph_scope()`` and ``pop_prologue_shared()`` keep a recording that
``launch()`` runs as often as asked. The machinery is the runtime's scopes
(``scopes.py``) over the graph recorder (``recording.py``).
"""

from __future__ import annotations

import numbers
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, cast, overload

import numpy as np

from .._core.coherence import DataState
from .._core.errors import ContextMismatchError, NegativeCountError, ScopeError, warn_user
from .._engine.runtime import Runtime
from .._handles.bundles import View as _View
from .._handles.bundles import bundle as _Bundle
from .._handles.bundles import (
    bundle_dep,
    live_check,
    local_field_check,
    make_bundle,
    state_key,
)
from .._handles.callbacks import host_launch
from .._handles.context import context
from .._handles.logical_data import dep, logical_data
from .._handles.task import task
from .._places.places import exec_place
from .cond import Comparable, cond, condition_terms
from .mode import GraphMode
from .recording import GraphRecorder
from .scopes import Scope, ScopeKind, ScopeTracker

__all__ = [
    "LaunchableGraph",
    "stackable_context",
    "stackable_logical_data",
    "stackable_task",
]


class stackable_logical_data(logical_data, Comparable):
    """Logical data of a :class:`stackable_context` (see ``logical_data``), plus
    ``set_read_only``, ``push`` and comparisons building loop conditions."""

    __slots__ = ("_home",)  # the scope of no_export data (None: none)
    _home: Scope | None

    def _adopt(
        self,
        runtime: Runtime,
        state: DataState,
        shape: tuple[int, ...] | None,
        dtype: np.dtype | None,
        readonly: bool,
        name: str | None,
        source: Any,
    ) -> None:
        self._home = None
        super()._adopt(runtime, state, shape, dtype, readonly, name, source)

    def set_read_only(self) -> None:
        """Make the data read-only for every scope, at any level, from now on.

        Later ``write()``/``rw()`` (and ``push`` with a writing mode) raise
        ``AccessModeError``. Scopes only read the data: it is imported at the root
        level (one copy per place, shared by every scope and every iteration of a
        loop, never refreshed), scopes are not discarded back over it, launchable
        graphs do not hold it, and the scopes of several threads read it at once.

        Raises
        ------
        ScopeError
            An open scope (of any thread) has used the data, a launchable graph
            holds it, or a task writing it is in progress: call ``set_read_only()``
            before that work, or after it ends.
        """
        runtime = self._alive()
        state = self._state
        with runtime.lock:
            if state.scope is not None or state.writing is not None:
                holder = state.scope if state.scope is not None else state.writing
                what = (
                    "a launchable graph holds it"
                    if isinstance(holder, _Launchable)
                    else "an open scope has used it"
                    if isinstance(holder, Scope)
                    else "a task writing it is in progress"
                )
                raise ScopeError(
                    f"set_read_only() of {self._label()} while {what}; "
                    "call set_read_only() before that work, or once it "
                    "has ended (the scope closed, the launchable graph "
                    "reset)"
                )
            self._readonly = True
            state.readonly = True

    def push(self, mode: Any, dplace: Any = None) -> None:
        """Import the data into the innermost open scope with ``mode`` (at ``dplace``).

        Data used in a scope without ``push`` is imported on first use; ``push`` makes
        the import explicit: it is ordered like an access with ``mode`` at ``dplace``
        (a copy to that place when the mode reads), recorded in the scope.
        """
        runtime = self._alive()
        access = dep(self, mode if isinstance(mode, int) else int(mode), dplace)
        _check_home(self, "push()")
        if not _scopes(runtime).stack:
            raise ScopeError(
                f"push() of {self._label()} with no scope open; open one "
                "with push(), graph_scope() or a loop first"
            )
        made = task._make(runtime, (access,), f"push {self._label()}")
        made.start()
        made.end()

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return (
            f"stackable_logical_data(shape={self._shape}, dtype={self._dtype}, "
            f"is_token={self._is_token}, symbol={self._symbol!r})"
        )


class stackable_task(task):
    """A task of a :class:`stackable_context`, recorded in its innermost open scope."""

    __slots__ = ()

    def add_dep(self, d: dep) -> None:
        _check_stackable(d, self._runtime, f"{self._label()}.add_dep()")
        super().add_dep(d)


def _check_stackable(d: Any, runtime: Runtime, what: str) -> None:
    if isinstance(d, bundle_dep):
        for field in d.deps:
            _check_stackable(field, runtime, what)
        return
    if isinstance(d, dep):
        if not isinstance(d.ld, stackable_logical_data):
            raise TypeError(
                f"{what}: {d.ld._label()} is not data of a stackable "
                "context; create it with sctx.logical_data(...)"
            )
        if d.ld._runtime is not runtime:
            raise ContextMismatchError(
                f"{what}: {d.ld._label()} belongs to a different context"
            )
        _check_home(d.ld, what)


def _check_home(ld: stackable_logical_data, what: str) -> None:
    """Refuse ``no_export`` data outside the scope that created it."""
    home = ld._home
    if home is None:
        return
    if home.closed:
        raise ScopeError(
            f"{what}: {ld._label()} was created with no_export=True in a "
            f"{home.kind.value} scope that has closed: such data lives "
            "only in its scope; create it without no_export to use it "
            "after the scope"
        )
    if home.thread != threading.get_ident():
        raise ScopeError(
            f"{what}: {ld._label()} was created with no_export=True in a "
            f"{home.kind.value} scope of another thread; such data lives "
            "only in its scope"
        )


def _scopes(runtime: Runtime) -> ScopeTracker:
    """The scope tracker of a stackable context's runtime."""
    mode = runtime.mode
    assert isinstance(mode, GraphMode)
    return mode.scopes


class _ScopeGuard:
    """The ``with`` form of a graph scope (``graph_scope()``)."""

    def __init__(self, sctx: stackable_context) -> None:
        self._sctx = sctx
        self._scope: Scope | None = None

    def __enter__(self) -> object:
        self._scope = self._sctx._open(ScopeKind.GRAPH)
        return object()

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        assert self._scope is not None
        self._sctx._close(self._scope, failed=exc_type is not None)


class _Loop:
    """A ``while_loop()`` or ``repeat(count)`` block; ``with`` gives the loop."""

    def __init__(
        self, sctx: stackable_context, kind: ScopeKind, count: int | None
    ) -> None:
        self._sctx = sctx
        self._kind = kind
        self._count = count
        self._scope: Scope | None = None
        self._handle_used = False

    def __enter__(self) -> _Loop:
        self._scope = self._sctx._open(self._kind, self._count)
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        scope = self._scope
        assert scope is not None
        if (
            exc_type is None
            and self._kind is ScopeKind.WHILE
            and not (scope.condition_set or self._handle_used)
        ):
            self._sctx._close(scope, failed=True)
            raise ScopeError(
                "a while_loop body ended without continue_while(...): the "
                "loop could never end; call loop.continue_while(cond) once "
                "in the body"
            )
        self._sctx._close(scope, failed=exc_type is not None)

    def _open_scope(self, what: str) -> Scope:
        scope = self._scope
        if scope is None or scope.closed or self._kind is not ScopeKind.WHILE:
            raise ScopeError(
                f"{what} is only valid inside the 'with sctx.while_loop() as loop:' block"
            )
        return scope

    @property
    def cond_handle(self) -> int:
        """The raw condition handle, for device code that sets the condition itself
        (``cudaGraphSetConditional``; ``stflow.emulated.set_conditional``)."""
        scope = self._open_scope("cond_handle")
        self._handle_used = True
        return _scopes(self._sctx._runtime).recorder.loop_condition(scope.graph)

    def condition_task(self, *args: Any) -> stackable_task:
        """A plain task of the body, for a hand-written condition kernel."""
        self._open_scope("condition_task()")
        self._handle_used = True
        return self._sctx.task(*args)

    def continue_while(self, *args: Any) -> None:
        """Run the body again while the condition holds (checked after this body).

        ``continue_while(expr)`` with a ``cond`` expression, or the three-argument form
        ``continue_while(ld, op, threshold)``.
        """
        scope = self._open_scope("continue_while()")
        if len(args) == 3:
            expr: Any = cond(*args)
        elif len(args) == 1:
            expr = args[0]
        else:
            raise ValueError(
                f"continue_while takes a condition or (ld, op, threshold), "
                f"got {len(args)} arguments"
            )
        combiner, leaves = condition_terms(expr)
        runtime = self._sctx._runtime
        for leaf in leaves:
            if leaf._ld._runtime is not runtime:
                raise ContextMismatchError(
                    f"continue_while: {leaf._ld._label()} belongs to a different context"
                )
        if scope.condition_set:
            raise ScopeError(
                "continue_while() called twice in one while_loop body; "
                "combine the conditions with & or |"
            )
        if _scopes(runtime).innermost is not scope:
            raise ScopeError(
                "continue_while() must be called in the loop's own body, "
                "not in a scope nested in it"
            )
        distinct: list[stackable_logical_data] = []
        for leaf in leaves:
            if leaf._ld not in distinct:
                distinct.append(leaf._ld)
        device = scope.graph.device  # the loop's device, once known
        place = () if device is None else (exec_place.device(device),)
        made = self._sctx.task(
            *place, *(ld.read() for ld in distinct), symbol="while_condition"
        )
        with made:
            pointers = {id(ld): made.get_arg(i) for i, ld in enumerate(distinct)}
            terms = [
                (
                    pointers[id(leaf._ld)],
                    leaf._ld._dtype,
                    leaf._op,
                    leaf._threshold,
                    leaf._negate,
                )
                for leaf in leaves
            ]
            recorder = _scopes(runtime).recorder
            recorder.set_condition(
                made._native_stream(),
                recorder.loop_condition(scope.graph),
                terms,
                combiner,
            )
        scope.condition_set = True


class _Launchable:
    """The state behind :class:`LaunchableGraph` handles: one recorded graph."""

    def __init__(self, sctx: stackable_context, scope: Scope) -> None:
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

    def __init__(self, sctx: stackable_context) -> None:
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


class stackable_context:
    """A context whose work nests in scopes: graphs, device-side loops and record-once
    graphs. The root level runs in stream mode; ``with`` finalizes on exit.

    Parameters
    ----------
    backend : {"auto", "cuda", "emulated"}
        Which backend runs the work (stflow-only; default ``STFLOW_BACKEND``).
    memory_budget : int, str or dict, optional
        The device memory budget (see ``context``; stflow-only).
    """

    def __init__(self, *, backend: str | None = None, memory_budget: Any = None) -> None:
        self._ctx = context._recording(backend, stackable_logical_data, memory_budget)
        self._runtime: Runtime = self._ctx._live()
        self._pushes = threading.local()
        self._launchables: weakref.WeakSet[_Launchable] = weakref.WeakSet()

    # -- scopes ----------------------------------------------------------------------
    @property
    def _pushed(self) -> list[Scope]:
        """The scopes the calling thread opened with :meth:`push` (scopes are per
        thread)."""
        try:
            pushed: list[Scope] = self._pushes.scopes
        except AttributeError:
            pushed = self._pushes.scopes = []
        return pushed

    def _open(
        self, kind: ScopeKind, count: int | None = None, root_only: str | None = None
    ) -> Scope:
        runtime = self._ctx._live()
        with runtime.lock:
            runtime.check_submit(f"{kind.value} scope")
            scopes = _scopes(runtime)
            if root_only is not None and scopes.stack:
                raise ScopeError(
                    f"{root_only} is only valid at the root level, not "
                    "inside another scope"
                )
            scope = scopes.open(kind, count)
            if runtime.instruments.attached:
                runtime.instruments.scope_opened(kind.value, count)
            return scope

    def _close(self, scope: Scope, failed: bool) -> None:
        runtime = self._runtime
        scopes = _scopes(runtime)
        with runtime.lock:
            discarded = True
            try:
                if failed:
                    scopes.discard(scope)
                else:
                    try:
                        scopes.close(scope)  # repeat(0) bodies are discarded
                        discarded = scope.kind is ScopeKind.REPEAT and scope.count == 0
                    except BaseException:
                        # Closing failed (a copy that cannot be captured, say): drop
                        # the scope, and the graph holding a root-level loop, as if
                        # it raised.
                        for doomed in (scope, scope.wrapper):
                            if doomed is not None and doomed in scopes.stack:
                                while scopes.stack[-1] is not doomed:
                                    scopes.discard(scopes.stack[-1])
                                scopes.discard(doomed)
                        raise
            finally:
                if runtime.instruments.attached:
                    runtime.instruments.scope_closed(discarded)
        if not failed and not scopes.stack:
            runtime.errors.raise_pending("closing a scope")

    def graph_scope(self) -> _ScopeGuard:
        """A nested graph: ``with sctx.graph_scope():`` records the block, which runs
        when the block closes (nothing runs if it raises)."""
        self._ctx._live()
        return _ScopeGuard(self)

    def push(self) -> None:
        """Open a graph scope without ``with`` (close it with :meth:`pop`)."""
        self._pushed.append(self._open(ScopeKind.GRAPH))

    def pop(self) -> None:
        """Close the scope of the latest :meth:`push`."""
        runtime = self._ctx._live()
        if not self._pushed:
            raise ScopeError("pop() without a matching push()")
        scope = self._pushed[-1]
        if _scopes(runtime).innermost is not scope:
            raise ScopeError(
                "pop() while a scope opened after the matching push() is "
                "still open; close it first"
            )
        self._pushed.pop()
        self._close(scope, failed=False)

    def while_loop(self) -> _Loop:
        """``with sctx.while_loop() as loop:`` — a body the device runs at least once,
        then again while ``loop.continue_while(cond)`` holds."""
        self._ctx._live()
        return _Loop(self, ScopeKind.WHILE, None)

    def repeat(self, count: int) -> _Loop:
        """``with sctx.repeat(count):`` — a body the device runs ``count`` times."""
        if isinstance(count, bool) or not isinstance(count, numbers.Integral):
            raise TypeError(
                f"repeat(count): count must be an int, got {type(count).__name__}"
            )
        if count < 0:
            raise NegativeCountError(
                f"repeat(count): count must be non-negative, got {count}"
            )
        self._ctx._live()
        return _Loop(self, ScopeKind.REPEAT, int(count))

    def launchable_graph_scope(self) -> _LaunchableScope:
        """``with sctx.launchable_graph_scope() as lg:`` — record once, then
        ``lg.launch()`` as often as needed (root level only)."""
        runtime = self._ctx._live()
        if _scopes(runtime).stack:
            raise ScopeError("launchable_graph_scope() is only valid at the root level")
        return _LaunchableScope(self)

    def pop_prologue_shared(self) -> LaunchableGraph:
        """Close the recording of an unmatched root-level :meth:`push` and return a
        handle that launches it; the scope closes when the last handle is reset."""
        stack = _scopes(self._ctx._live()).stack
        if not self._pushed or len(stack) != 1 or stack[0] is not self._pushed[-1]:
            raise ScopeError(
                "pop_prologue_shared() needs exactly one open scope, opened "
                "by push() at the root level"
            )
        scope = self._pushed.pop()
        scope.kind = ScopeKind.LAUNCHABLE
        state = _Launchable(self, scope)
        state.close_recording()
        return LaunchableGraph._of(state)

    # -- data and work -----------------------------------------------------------------
    def logical_data(
        self, buf: Any, dplace: Any = None, name: str | None = None
    ) -> stackable_logical_data:
        """Register ``buf`` as logical data (see ``context.logical_data``)."""
        return cast(stackable_logical_data, self._ctx.logical_data(buf, dplace, name))

    def logical_data_empty(
        self,
        shape: Any,
        dtype: Any = None,
        name: str | None = None,
        *,
        no_export: bool = False,
    ) -> stackable_logical_data:
        """Logical data without an initial value.

        ``no_export=True`` makes it a temporary of the innermost open scope: it lives
        only there (using it once the scope has closed, or from another thread,
        raises ``ScopeError``), its value is not carried from one iteration of a loop
        body to the next (nothing is hoisted or refreshed for it: write it before
        reading it in each iteration), and it is never written back. At the root
        level it is ordinary data.
        """
        _check_bool(no_export)
        return self._local(self._ctx.logical_data_empty(shape, dtype, name), no_export)

    def _local(self, ld: Any, no_export: bool) -> stackable_logical_data:
        """Make ``ld`` data of the innermost open scope when ``no_export``."""
        if no_export:
            runtime = self._runtime
            with runtime.lock:
                home = _scopes(runtime).make_local(ld._state)
            if home is not None:
                ld._home = home
        return cast(stackable_logical_data, ld)

    def logical_data_full(
        self,
        shape: Any,
        fill_value: Any,
        dtype: Any = None,
        where: Any = None,
        exec_place: Any = None,
        name: str | None = None,
        *,
        no_export: bool = False,
    ) -> stackable_logical_data:
        """Logical data filled with ``fill_value``; the fill runs in the current scope
        (``no_export``: see :meth:`logical_data_empty`)."""
        _check_bool(no_export)
        return self._local(
            self._ctx.logical_data_full(
                shape, fill_value, dtype, where, exec_place, name
            ),
            no_export,
        )

    def logical_data_zeros(
        self,
        shape: Any,
        dtype: Any = None,
        where: Any = None,
        exec_place: Any = None,
        name: str | None = None,
        *,
        no_export: bool = False,
    ) -> stackable_logical_data:
        _check_bool(no_export)
        return self._local(
            self._ctx.logical_data_zeros(shape, dtype, where, exec_place, name), no_export
        )

    def logical_data_ones(
        self,
        shape: Any,
        dtype: Any = None,
        where: Any = None,
        exec_place: Any = None,
        name: str | None = None,
        *,
        no_export: bool = False,
    ) -> stackable_logical_data:
        _check_bool(no_export)
        return self._local(
            self._ctx.logical_data_ones(shape, dtype, where, exec_place, name), no_export
        )

    def token(self) -> stackable_logical_data:
        """A logical data without bytes, for ordering only."""
        return cast(stackable_logical_data, self._ctx.token())

    @overload
    def bundle(self, view: type[_View], /, **fields: Any) -> _Bundle[_View]: ...

    @overload
    def bundle(self, view: None = None, /, **fields: Any) -> _Bundle[Any]: ...

    def bundle(self, view: Any = None, /, **fields: Any) -> _Bundle[Any]:
        """Group stackable logical data as one dependency (see
        ``context.bundle``); usable in every scope kind."""
        runtime = self._ctx._live()
        label = "stackable_context.bundle()"
        check = local_field_check(runtime, stackable_logical_data, label)
        made = make_bundle(
            view, fields, check, live_check(runtime), label, dep, state_key
        )
        made._runtime = runtime
        return made

    def task(self, *args: Any, symbol: str | None = None) -> stackable_task:
        """A task in the innermost open scope (the root level when none is open)."""
        runtime = self._ctx._live()
        runtime.check_submit("task()")
        for arg in args:
            _check_stackable(arg, runtime, "task()")
        return cast(stackable_task, stackable_task._make(runtime, args, symbol))

    def host_launch(
        self,
        *deps: dep,
        fn: Callable[..., Any] | None = None,
        args: Any = None,
        symbol: str | None = None,
    ) -> None:
        """Run ``fn`` on the host in order with ``deps`` (see ``context.host_launch``);
        also inside graph scopes, not inside loop bodies (conditional graph nodes
        hold no host work)."""
        runtime = self._ctx._live()
        for d in deps:
            _check_stackable(d, runtime, "host_launch()")
        if _scopes(runtime).in_nested_scope():
            raise ScopeError(
                "host_launch() inside a while_loop/repeat body (or a graph "
                "scope nested in one): a loop body runs as a conditional "
                "graph node, which cannot hold host work; move it out of "
                "the loop"
            )
        host_launch(runtime, deps, fn, args, symbol)

    # -- synchronisation -----------------------------------------------------------------
    def fence(self) -> int:
        """A stream that completes when all work so far has (root level only)."""
        runtime = self._ctx._live()
        if _scopes(runtime).stack:
            raise ScopeError(
                "fence() is only valid at the root level; close the open scopes first"
            )
        return self._ctx.fence()

    def check_errors(self) -> None:
        """Raise the oldest pending asynchronous error (see ``context``)."""
        self._ctx.check_errors()

    def pending_errors(self) -> list[BaseException]:
        """The pending asynchronous errors, oldest first, not cleared (stflow-only)."""
        return self._ctx.pending_errors()

    def finalize(self) -> None:
        """Wait for all work, write results back, free everything (idempotent)."""
        runtime = self._runtime
        if runtime.finalized:
            return
        open_scopes = len(_scopes(runtime).stack)
        if open_scopes:
            raise ScopeError(
                f"finalize() with {open_scopes} scope(s) still "
                "open; close them (pop(), end the with blocks) first"
            )
        live = [state for state in self._launchables if not state.released]
        if live:
            raise ScopeError(
                f"finalize() while {len(live)} launchable graph handle(s) "
                "are alive; reset() them first"
            )
        self._ctx.finalize()

    @property
    def backend(self) -> str:
        return self._ctx.backend

    def statistics(self) -> Any:
        return self._ctx.statistics()

    def attach(self, instrument: Any) -> None:
        self._ctx.attach(instrument)

    def __enter__(self) -> stackable_context:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None and not self._runtime.finalized:
            self._abandon_open_work(exc_type)
        self.finalize()

    def _abandon_open_work(self, exc_type: type[BaseException]) -> None:
        """The ``with`` block raised: discard the scopes the calling thread left open
        (``push()`` without ``pop()``; innermost first, nothing they recorded runs)
        and reset the launchable graphs still alive, with a warning, so that
        ``finalize()`` writes back the root level's results instead of refusing."""
        runtime = self._runtime
        scopes = _scopes(runtime)
        with runtime.lock:
            opened = scopes.user_scopes()
            while scopes.stack:
                self._close(scopes.stack[-1], failed=True)
            self._pushed.clear()
        live = [state for state in list(self._launchables) if not state.released]
        for state in live:
            state.release()
        if opened or live:
            left = [f"{opened} open scope(s) (push() without pop())"] if opened else []
            done = (
                [
                    "the scopes were discarded (nothing they recorded runs; their "
                    "data keeps its value from before them)"
                ]
                if opened
                else []
            )
            if live:
                left.append(f"{len(live)} launchable graph(s) not reset")
                done.append("the graphs reset")
            warn_user(
                f"stackable_context: the with block raised {exc_type.__name__} "
                f"with {' and '.join(left)}: {', '.join(done)}, and the root "
                "level was finalized, its results written back; pop() scopes "
                "and reset() graphs in a finally block to end them yourself",
                UserWarning,
            )

    def __repr__(self) -> str:
        state = ", finalized" if self._runtime.finalized else ""
        return f"stackable_context(handle={self._runtime.id}{state})"

    def __copy__(self) -> stackable_context:
        raise TypeError(
            "a stackable_context cannot be copied: it owns streams, graphs "
            "and device memory; share the object itself"
        )

    def __deepcopy__(self, memo: Any) -> stackable_context:
        return self.__copy__()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a stackable_context cannot be pickled: it owns streams, graphs "
            "and device memory of this process"
        )


def _check_bool(value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"no_export must be a bool, got {type(value).__name__}")
