"""Logical data and dependencies (``ld.read()``, ``ld.write()``, ``ld.rw()``)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ._errors import AccessModeError, ContextFinalizedError
from ._places import data_place

if TYPE_CHECKING:
    from ._coherence import DataState
    from ._context import Runtime, context

__all__ = ["AccessMode", "dep", "logical_data", "read", "rw", "write"]


class AccessMode(enum.IntFlag):
    """How a task accesses a logical data."""

    NONE = 0
    READ = 1
    WRITE = 2
    RW = 3


_MODE_NAMES = {1: "read", 2: "write", 3: "rw"}


class dep:
    """A dependency: a logical data, an access mode and an optional data place.

    ``dplace=None`` means ``data_place.affine()``: the memory of the task's execution
    place. Arguments are checked here; the context is checked when a task uses it.
    """

    __slots__ = ("ld", "mode", "dplace")

    def __init__(self, ld: logical_data, mode: int, dplace: data_place | None = None):
        if not isinstance(ld, logical_data):
            raise TypeError(f"dep expects a logical_data (or token), got "
                            f"{type(ld).__name__}")
        if isinstance(mode, bool) or not isinstance(mode, int) or \
                int(mode) not in _MODE_NAMES:
            raise AccessModeError(
                f"access mode {mode!r} is not one of AccessMode.READ, WRITE or RW"
            )
        if dplace is not None and not isinstance(dplace, data_place):
            raise TypeError(f"the data place of a dependency must be a data_place or "
                            f"None, got {type(dplace).__name__}")
        mode = int(mode)
        if ld._runtime.finalized:
            raise ContextFinalizedError(
                f"logical data {ld._label()} belongs to a finalized context; create "
                "new data in a live context"
            )
        if mode & 2 and ld._readonly:
            raise AccessModeError(
                f"{_MODE_NAMES[mode]}() asked on logical data {ld._label()}, which was "
                "registered from a read-only buffer; use read(), or register a "
                "writable copy"
            )
        self.ld = ld
        self.mode = mode
        self.dplace = dplace

    def get_ld(self) -> logical_data:
        return self.ld

    def __iter__(self) -> Iterator[Any]:
        yield self.ld
        yield self.mode
        yield self.dplace

    def __repr__(self) -> str:
        return f"dep({self.ld!r}, {self.mode}, {self.dplace!r})"


def read(ld: logical_data, dplace: data_place | None = None) -> dep:
    """A ``read`` dependency on ``ld``."""
    return dep(ld, 1, dplace)


def write(ld: logical_data, dplace: data_place | None = None) -> dep:
    """A ``write`` dependency on ``ld`` (its previous value is not read)."""
    return dep(ld, 2, dplace)


def rw(ld: logical_data, dplace: data_place | None = None) -> dep:
    """A ``rw`` (read-write) dependency on ``ld``."""
    return dep(ld, 3, dplace)


class logical_data:
    """Data whose accesses stflow orders and whose bytes it moves between places.

    Build one with ``ctx.logical_data(buf)``, ``ctx.logical_data_empty(shape, dtype)``,
    ``ctx.logical_data_full/zeros/ones(...)`` or ``ctx.token()``; the constructor
    ``logical_data(ctx, buf, ...)`` is ``ctx.logical_data(buf, ...)`` with shape and
    dtype checks.

    Notes
    -----
    Equality and hashing are by identity. When a logical data registered from a user
    buffer is collected before ``finalize()``, its latest value is written back to the
    buffer, complete by the context's next ``fence()`` stream, ``wait()`` or
    ``finalize()``.
    """

    __slots__ = ("_runtime", "_state", "_shape", "_dtype", "_readonly", "_symbol",
                 "_is_token", "_source", "_key", "__weakref__")
    _runtime: Runtime
    _state: DataState | None
    _shape: tuple[int, ...] | None
    _dtype: np.dtype | None
    _readonly: bool
    _symbol: str | None
    _is_token: bool
    _source: Any
    _key: int

    def __init__(self, ctx: context | None = None, buf: Any = None,
                 dplace: data_place | None = None, shape: Any = None, dtype: Any = None,
                 name: str | None = None) -> None:
        if ctx is None:
            raise TypeError("logical_data cannot be built without a context; use "
                            "ctx.logical_data(buf), ctx.logical_data_empty(...), "
                            "ctx.logical_data_full/zeros/ones(...) or ctx.token()")
        from ._context import context as context_type
        if not isinstance(ctx, context_type):
            raise TypeError(f"logical_data expects a context first, got "
                            f"{type(ctx).__name__}")
        ctx._live().register(self, buf, dplace, name, shape, dtype)

    # -- properties --------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype | None:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...] | None:
        return self._shape

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def symbol(self) -> str | None:
        return self._symbol

    def set_symbol(self, name: str) -> None:
        """Name the data in messages, DOT output and traces."""
        if not isinstance(name, str):
            raise TypeError(f"set_symbol expects a str, got {type(name).__name__}")
        self._alive()
        self._symbol = name
        if self._state is not None:
            self._state.label = self._label()

    def _label(self) -> str:
        return repr(self._symbol) if self._symbol else f"#{self._key}"

    def _alive(self) -> Runtime:
        runtime = self._runtime
        if runtime.finalized:
            raise ContextFinalizedError(
                f"logical data {self._label()} belongs to a finalized context; create "
                "new data in a live context"
            )
        return runtime

    # -- dependencies ------------------------------------------------------------
    def read(self, dplace: data_place | None = None) -> dep:
        """A ``read`` dependency, optionally seen at ``dplace``."""
        return dep(self, 1, dplace)

    def write(self, dplace: data_place | None = None) -> dep:
        """A ``write`` dependency, optionally at ``dplace``."""
        return dep(self, 2, dplace)

    def rw(self, dplace: data_place | None = None) -> dep:
        """A ``rw`` dependency, optionally at ``dplace``."""
        return dep(self, 3, dplace)

    # -- derived data ------------------------------------------------------------
    def empty_like(self) -> logical_data:
        """New data of the same shape and dtype, without a value or symbol."""
        runtime = self._alive()
        if self._is_token:
            return runtime.token()
        return runtime.empty_checked(self._shape,  # type: ignore[arg-type]
                                     self._dtype, None)  # type: ignore[arg-type]

    def borrow_ctx_handle(self) -> context:
        """A borrowed context bound to this data's context.

        It submits into the same context, cannot be finalized and does nothing on exit
        or collection; its errors are reported to the owner.
        """
        from ._context import context
        return context._borrow(self._alive())

    @staticmethod
    def token(ctx: context) -> logical_data:
        return ctx.token()

    @staticmethod
    def init_by_shape(ctx: context, shape: Any, dtype: Any, name: str | None = None
                      ) -> logical_data:
        return ctx.logical_data_empty(shape, dtype, name)

    def __repr__(self) -> str:
        nbytes = 0 if self._is_token else self._state.nbytes  # type: ignore[union-attr]
        ndim = None if self._shape is None else len(self._shape)
        return (f"logical_data(shape={self._shape}, dtype={self._dtype}, "
                f"is_token={self._is_token}, symbol={self._symbol!r}, len={nbytes}, "
                f"ndim={ndim})")
