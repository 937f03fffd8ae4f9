"""The blocks of a ``stackable_context``'s graph scopes and device-side loops.

``with sctx.graph_scope():`` (:class:`_ScopeGuard`) records a block into a nested
graph; ``with sctx.while_loop() as loop:`` and ``with sctx.repeat(count):``
(:class:`_Loop`) record a body the device runs many times, a ``while_loop`` until the
condition given to ``loop.continue_while(...)`` (``cond.py``) fails. A block opens its
scope on entry and closes it on exit (discards it if the block raised), through its
context. Cold code (once per block): this module stays Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .._core.errors import ContextMismatchError, ScopeError
from .._engine.runtime import Runtime
from .._places.places import exec_place
from .cond import cond, condition_terms
from .launchable import _scopes
from .scope import Scope, ScopeKind

if TYPE_CHECKING:
    from .stackable_data import stackable_logical_data, stackable_task

__all__ = ["Owner"]


class Owner(Protocol):
    """What the blocks use of their ``stackable_context`` (which stands above this
    module)."""

    _runtime: Runtime

    def _open(
        self, kind: ScopeKind, count: int | None = None, root_only: str | None = None
    ) -> Scope:
        """Open a scope of ``kind`` inside the innermost one."""

    def _close(self, scope: Scope, failed: bool) -> None:
        """Close (``failed``: discard) the innermost scope ``scope``."""

    def task(self, *args: Any, symbol: str | None = None) -> stackable_task:
        """A task in the innermost open scope."""


class _ScopeGuard:
    """The ``with`` form of a graph scope (``graph_scope()``)."""

    def __init__(self, sctx: Owner) -> None:
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

    def __init__(self, sctx: Owner, kind: ScopeKind, count: int | None) -> None:
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
