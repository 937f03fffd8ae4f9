"""The data and tasks of a ``stackable_context``.

:class:`stackable_logical_data` is a ``logical_data`` that can be made read-only for
every scope (``set_read_only``), imported into the innermost scope explicitly
(``push``), and compared with numbers to build loop conditions (a ``Comparable`` of
``cond.py``); created with ``no_export=True`` it lives only in the scope that created
it (:func:`_check_home`). :class:`stackable_task` is a ``task`` recorded in the
innermost open scope, whose dependencies must be data of its own context
(:func:`_check_stackable`).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._core.coherence import DataState
from .._core.errors import ContextMismatchError, ScopeError
from .._engine.runtime import Runtime
from .._handles.bundles import bundle_dep
from .._handles.logical_data import dep, logical_data
from .._handles.task import task
from .cond import Comparable
from .launchable import _Launchable, _scopes
from .scope import Scope

__all__ = ["stackable_logical_data", "stackable_task"]


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
