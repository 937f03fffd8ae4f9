"""``stackable_context``: work nested in graph scopes, device-side loops and
re-launchable graphs.

The root level of a stackable context runs in stream mode. ``graph_scope()`` (or
``push()``/``pop()``) records the work of a block into a graph that runs when the block
closes; ``while_loop()`` and ``repeat(count)`` record a body that the device runs many
times; ``launchable_graph_scope()`` and ``pop_prologue_shared()`` keep a recording that
``launch()`` runs as often as asked. The machinery is the runtime's scopes
(``scopes.py``) over the graph recorder (``recording.py``).

This module holds the context itself; its data and tasks are in ``stackable_data``,
the blocks of its scopes and loops in ``loops``, its launchable graphs in
``launchable`` (``LaunchableGraph``, ``stackable_logical_data`` and
``stackable_task`` are re-exported here).
"""

from __future__ import annotations

import numbers
import threading
import weakref
from collections.abc import Callable
from typing import Any, cast, overload

from .._core.errors import NegativeCountError, ScopeError, warn_user
from .._engine.runtime import Runtime
from .._handles.bundles import View as _View
from .._handles.bundles import bundle as _Bundle
from .._handles.bundles import (
    live_check,
    local_field_check,
    make_bundle,
    state_key,
)
from .._handles.callbacks import host_launch
from .._handles.context import context
from .._handles.logical_data import dep
from .launchable import LaunchableGraph, _Launchable, _LaunchableScope, _scopes
from .loops import _Loop, _ScopeGuard
from .scope import Scope, ScopeKind
from .stackable_data import _check_stackable, stackable_logical_data, stackable_task

__all__ = [
    "LaunchableGraph",
    "stackable_context",
    "stackable_logical_data",
    "stackable_task",
]


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
