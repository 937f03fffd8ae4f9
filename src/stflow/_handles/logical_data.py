"""Logical data and dependencies (``ld.read()``, ``ld.write()``, ``ld.rw()``).

A :class:`logical_data` is a *handle*: its ordering and coherence state is a
:class:`~stflow._core.coherence.DataState` owned by the runtime's data registry. When the
handle is collected before ``finalize()``, the registry is told (from whatever thread
the collector runs on) and the runtime retires the data at its next submission.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.access import READ, RW, WRITE, AccessMode, is_mode, mode_name
from .._core.errors import AccessModeError, ContextFinalizedError
from .._core.reduce import REDUCE, reduce_mode, reduce_op, resolve_op
from .._engine.runtime import RuntimeOwner
from .._places.numbering import LAYOUT_IDS, REPLICATED
from .._places.places import data_place

if TYPE_CHECKING:
    from .._core.coherence import DataState
    from .._engine.runtime import Runtime

__all__ = ["AccessMode", "dep", "logical_data", "read", "reduce", "rw", "write"]


class dep:
    """A dependency: a logical data, an access mode and an optional data place.

    ``dplace=None`` means ``data_place.affine()``: the memory of the task's execution
    place. Arguments are checked here; the context is checked when a task uses it.

    Attributes
    ----------
    ld : logical_data
    mode : int
        ``READ``, ``WRITE`` or ``RW`` (as a plain ``int``), or a reduction's mode
        (``ld.reduce(op)``; ``AccessMode.REDUCE`` alone reduces with ``"sum"``).
    dplace : data_place or None
    place : int or None
        The device number of ``dplace`` (``None`` for the affine place).
    key : tuple
        ``(data key, mode, place)``: what a task's plan is cached by.
    """

    __slots__ = ("ld", "mode", "dplace", "place", "key")
    ld: logical_data
    mode: int
    dplace: data_place | None
    place: int | None
    key: tuple[int, int, int | None]

    def __init__(self, ld: logical_data, mode: int, dplace: data_place | None = None):
        if not isinstance(ld, logical_data):
            raise TypeError(
                f"dep expects a logical_data (or token), got {type(ld).__name__}"
            )
        if not is_mode(mode):
            raise AccessModeError(
                f"access mode {mode!r} is not one of AccessMode.READ, WRITE, RW or "
                "REDUCE (ld.reduce(op) for another operation than 'sum')"
            )
        ld._dependency(self, int(mode), dplace)

    @classmethod
    def _make(cls, ld: logical_data, mode: int, dplace: data_place | None) -> dep:
        made = cls.__new__(cls)
        ld._dependency(made, mode, dplace)
        return made

    def get_ld(self) -> logical_data:
        return self.ld

    def __iter__(self) -> Iterator[Any]:
        yield self.ld
        yield self.mode
        yield self.dplace

    def __repr__(self) -> str:
        try:
            mode: object = mode_name(self.mode)
        except KeyError:
            mode = self.mode
        return f"dep({self.ld!r}, {mode!r}, {self.dplace!r})"

    def __copy__(self) -> dep:
        return self  # a value: copies are the same

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a dependency cannot be pickled: its logical data lives in one "
            f"context of one process, got {self!r}"
        )


_new_dep = object.__new__


def read(ld: logical_data, dplace: data_place | None = None) -> dep:
    """A ``read`` dependency on ``ld``."""
    return dep(ld, READ, dplace)


def write(ld: logical_data, dplace: data_place | None = None) -> dep:
    """A ``write`` dependency on ``ld`` (its previous value is not read)."""
    return dep(ld, WRITE, dplace)


def rw(ld: logical_data, dplace: data_place | None = None) -> dep:
    """A ``rw`` (read-write) dependency on ``ld``."""
    return dep(ld, RW, dplace)


def reduce(ld: logical_data, op: Any = "sum", dplace: data_place | None = None) -> dep:
    """A reduction dependency on ``ld`` with ``op`` (see ``logical_data.reduce``)."""
    if not isinstance(ld, logical_data):
        raise TypeError(f"reduce expects a logical_data, got {type(ld).__name__}")
    return ld.reduce(op, dplace)


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

    __slots__ = (
        "_runtime",
        "_state",
        "_shape",
        "_dtype",
        "_readonly",
        "_symbol",
        "_is_token",
        "_source",
        "_key",
        "_plain_keys",
        "__weakref__",
    )
    _runtime: Runtime
    _state: DataState
    _shape: tuple[int, ...] | None
    _dtype: np.dtype | None
    _readonly: bool
    _symbol: str | None
    _is_token: bool
    _source: Any
    _key: int
    _plain_keys: tuple[tuple[int, int, None], ...]  # per mode, the key at no place

    def __init__(
        self,
        ctx: Any = None,
        buf: Any = None,
        dplace: data_place | None = None,
        shape: Any = None,
        dtype: Any = None,
        name: str | None = None,
    ) -> None:
        if ctx is None:
            raise TypeError(
                "logical_data cannot be built without a context; use "
                "ctx.logical_data(buf), ctx.logical_data_empty(...), "
                "ctx.logical_data_full/zeros/ones(...) or ctx.token()"
            )
        if not isinstance(ctx, RuntimeOwner):
            raise TypeError(
                f"logical_data expects a context first, got {type(ctx).__name__}"
            )
        runtime = ctx._live()
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        state, source = runtime.register(buf, dplace, shape, dtype)
        self._adopt(
            runtime,
            state,
            source.shape,
            source.dtype,
            source.readonly,
            name,
            source.keepalive,
        )

    @classmethod
    def _new(
        cls,
        runtime: Runtime,
        state: DataState,
        shape: tuple[int, ...] | None,
        dtype: np.dtype | None,
        readonly: bool,
        name: str | None,
        source: Any = None,
    ) -> logical_data:
        """A handle of ``state`` (created by the runtime's registry)."""
        ld = cls.__new__(cls)
        ld._adopt(runtime, state, shape, dtype, readonly, name, source)
        return ld

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
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self._runtime = runtime
        self._state = state
        self._shape = shape
        self._dtype = dtype
        self._readonly = readonly
        if readonly:
            state.readonly = True
        self._symbol = name
        self._is_token = state.is_token
        self._source = source
        self._key = key = state.key
        self._plain_keys = tuple((key, mode, None) for mode in range(4))
        state.label = self._label()
        if not state.is_token:
            finalizer = weakref.finalize(self, runtime.data.retire, state.key)
            finalizer.atexit = False

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
    def _dependency(self, made: dep, mode: int, dplace: data_place | None) -> None:
        """Fill ``made`` as a ``mode`` dependency on this data at ``dplace``."""
        if dplace is None:
            place = None
        elif isinstance(dplace, data_place):
            place = dplace._device
            if (
                place <= LAYOUT_IDS
                and mode & (WRITE | REDUCE)
                and dplace.kind.startswith(REPLICATED)
            ):
                raise AccessModeError(
                    f"{mode_name(mode)}() asked on logical data {self._label()} at "
                    f"{dplace!r}: a replicated place holds read-only copies (writes "
                    "are disallowed); use read(), or write at a single place"
                )
        else:
            raise TypeError(
                f"the data place of a dependency must be a data_place or "
                f"None, got {type(dplace).__name__}"
            )
        if self._runtime.finalized:
            raise ContextFinalizedError(
                f"logical data {self._label()} belongs to a finalized context; create "
                "new data in a live context"
            )
        if mode & WRITE and self._readonly:
            raise AccessModeError(
                f"{mode_name(mode)}() asked on logical data {self._label()}, which was "
                "registered from a read-only buffer; use read(), or register a "
                "writable copy"
            )
        if mode & REDUCE and self._readonly:
            raise AccessModeError(
                f"{mode_name(mode)} asked on logical data {self._label()}, which is "
                "read-only; reduce into a writable data"
            )
        if mode & REDUCE:
            if self._is_token:
                raise AccessModeError(
                    f"{mode_name(mode)} asked on token "
                    f"{self._label()}: a token has no value to "
                    "reduce into; use read() or rw() to order"
                )
            assert self._dtype is not None
            reduce_op(mode).check_dtype(self._dtype, f"logical data {self._label()}")
        made.ld = self
        made.mode = mode
        made.dplace = dplace
        made.place = place
        made.key = (self._key, mode, place)

    # The three accessors are called for every dependency of every task: without a
    # data place, on live data that allows the access, each fills the dependency in
    # its own frame (what _dependency decides then, the plan key made once per mode).
    # One helper shared by the three costs a second frame: 160 -> 210 ns per call.
    def read(self, dplace: data_place | None = None) -> dep:
        """A ``read`` dependency, optionally seen at ``dplace``."""
        if dplace is None and not self._runtime.finalized:
            made = _new_dep(dep)
            made.ld = self
            made.mode = READ
            made.dplace = made.place = None
            made.key = self._plain_keys[READ]
            return made
        return dep._make(self, READ, dplace)

    def write(self, dplace: data_place | None = None) -> dep:
        """A ``write`` dependency, optionally at ``dplace``."""
        if dplace is None and not self._readonly and not self._runtime.finalized:
            made = _new_dep(dep)
            made.ld = self
            made.mode = WRITE
            made.dplace = made.place = None
            made.key = self._plain_keys[WRITE]
            return made
        return dep._make(self, WRITE, dplace)

    def rw(self, dplace: data_place | None = None) -> dep:
        """A ``rw`` dependency, optionally at ``dplace``."""
        if dplace is None and not self._readonly and not self._runtime.finalized:
            made = _new_dep(dep)
            made.ld = self
            made.mode = RW
            made.dplace = made.place = None
            made.key = self._plain_keys[RW]
            return made
        return dep._make(self, RW, dplace)

    def reduce(self, op: Any = "sum", dplace: data_place | None = None) -> dep:
        """A reduction dependency (stflow-only): the task's view of the data holds
        ``op``'s identity, and what the task leaves in it is combined into the data
        with ``op`` before any other access. Tasks reducing into the same data with
        the same ``op`` do not order against each other.

        ``op``: ``"sum"``, ``"prod"``, ``"min"``, ``"max"``, ``"logical_and"``,
        ``"logical_or"``, ``"bitwise_and"``, ``"bitwise_or"``, ``"bitwise_xor"`` (the
        last three on integer or bool data), or the matching NumPy ufunc.
        """
        return dep._make(self, reduce_mode(resolve_op(op)), dplace)

    # -- derived data ------------------------------------------------------------
    def empty_like(self) -> logical_data:
        """New data of the same shape and dtype, without a value or symbol."""
        runtime = self._alive()
        cls = type(self)
        if self._is_token:
            return cls._new(runtime, runtime.token(), None, None, False, None)
        assert self._shape is not None and self._dtype is not None
        return cls._new(
            runtime,
            runtime.empty(self._shape, self._dtype, "empty_like"),
            self._shape,
            self._dtype,
            False,
            None,
        )

    def borrow_ctx_handle(self) -> Any:
        """A borrowed context bound to this data's context.

        It submits into the same context, cannot be finalized and does nothing on exit
        or collection; its errors are reported to the owner.
        """
        runtime = self._alive()
        return runtime.context_type._borrow(runtime)

    @staticmethod
    def token(ctx: Any) -> logical_data:
        return ctx.token()

    @staticmethod
    def init_by_shape(
        ctx: Any, shape: Any, dtype: Any, name: str | None = None
    ) -> logical_data:
        return ctx.logical_data_empty(shape, dtype, name)

    def __copy__(self) -> logical_data:
        raise TypeError(
            f"a logical data cannot be copied: a copy would be a second "
            f"handle on the same data; use {self._label()} itself, or "
            "empty_like() and a task that copies into it"
        )

    def __deepcopy__(self, memo: Any) -> logical_data:
        self.__copy__()
        raise AssertionError("unreachable")  # pragma: no cover

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a logical data cannot be pickled: it lives in one context of "
            f"one process (logical data {self._label()})"
        )

    def __repr__(self) -> str:
        nbytes = self._state.nbytes
        ndim = None if self._shape is None else len(self._shape)
        return (
            f"logical_data(shape={self._shape}, dtype={self._dtype}, "
            f"is_token={self._is_token}, symbol={self._symbol!r}, len={nbytes}, "
            f"ndim={ndim})"
        )
