"""The ``reduce`` access mode: its operations, identities and mode encoding.

A reduction dependency (``ld.reduce(op)``) has the mode ``REDUCE | code << 3``: the
access-mode bit, and the operation's code above the bits of ``READ``/``WRITE``, so
that a plan is cached per operation and ``mode & READ`` / ``mode & WRITE`` are both
false. The runtime gives every reducing task a private instance holding the
operation's identity, and combines the partial results into the data before any
other access (``_engine/runtime.py``, ``Runtime._combine``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

__all__ = [
    "OPS",
    "REDUCE",
    "ReduceOp",
    "Reduction",
    "is_reduce",
    "reduce_mode",
    "reduce_op",
    "resolve_op",
    "valid_reduce_mode",
]

REDUCE: Final[int] = 4
"""The access-mode bit of a reduction (``AccessMode.REDUCE``)."""
_SHIFT = 3


@dataclass(frozen=True)
class ReduceOp:
    """One reduction operation.

    Attributes
    ----------
    name : str
        ``"sum"``, ``"prod"``, ``"min"``, ``"max"``, ``"logical_and"``,
        ``"logical_or"``, ``"bitwise_and"``, ``"bitwise_or"`` or ``"bitwise_xor"``.
    code : int
        Its number in the mode encoding.
    ufunc : numpy.ufunc
        The element-wise combination (``numpy.add`` for ``"sum"``...).
    integer_only : bool
        Bitwise operations need integer (or bool) data.
    """

    name: str
    code: int
    ufunc: np.ufunc
    integer_only: bool = False

    def identity(self, dtype: np.dtype) -> Any:
        """The identity element for ``dtype`` (a NumPy scalar of that dtype)."""
        dtype = np.dtype(dtype)
        kind = dtype.kind
        name = self.name
        if name in ("sum", "logical_or", "bitwise_or", "bitwise_xor"):
            value: Any = 0
        elif name in ("prod", "logical_and"):
            value = 1
        elif name == "bitwise_and":
            value = True if kind == "b" else -1 if kind == "i" else np.iinfo(dtype).max
        elif name == "min":
            value = (
                True if kind == "b" else np.inf if kind == "f" else np.iinfo(dtype).max
            )
        else:  # max
            value = (
                False if kind == "b" else -np.inf if kind == "f" else np.iinfo(dtype).min
            )
        return np.array(value).astype(dtype)[()]

    def pattern(self, dtype: np.dtype) -> bytes:
        """The identity's bytes: a fill pattern of one element."""
        return np.array(self.identity(dtype), dtype=dtype).tobytes()

    def check_dtype(self, dtype: np.dtype, what: str) -> None:
        """Raise ``TypeError`` when the operation cannot reduce ``dtype`` data."""
        dtype = np.dtype(dtype)
        if dtype.kind not in "biuf" or dtype.itemsize > 8:
            raise TypeError(
                f"{what}: reduce() works on bool, integer and float data, not {dtype}"
            )
        if self.integer_only and dtype.kind not in "biu":
            raise TypeError(
                f"{what}: reduce({self.name!r}) needs integer or bool data, not {dtype}"
            )

    def __repr__(self) -> str:
        return f"ReduceOp({self.name!r})"


OPS: Final[dict[str, ReduceOp]] = {
    op.name: op
    for op in (
        ReduceOp("sum", 0, np.add),
        ReduceOp("prod", 1, np.multiply),
        ReduceOp("min", 2, np.minimum),
        ReduceOp("max", 3, np.maximum),
        ReduceOp("logical_and", 4, np.logical_and),
        ReduceOp("logical_or", 5, np.logical_or),
        ReduceOp("bitwise_and", 6, np.bitwise_and, integer_only=True),
        ReduceOp("bitwise_or", 7, np.bitwise_or, integer_only=True),
        ReduceOp("bitwise_xor", 8, np.bitwise_xor, integer_only=True),
    )
}
_BY_CODE: Final[dict[int, ReduceOp]] = {op.code: op for op in OPS.values()}
_BY_UFUNC: Final[dict[Any, ReduceOp]] = {op.ufunc: op for op in OPS.values()}


def resolve_op(op: Any) -> ReduceOp:
    """The :class:`ReduceOp` named by ``op``: a name of :data:`OPS` or its NumPy
    ufunc.

    Raises
    ------
    ValueError
        Anything else (the runtime combines partial results itself, on every backend,
        so only these operations are known).
    """
    if isinstance(op, str):
        found = OPS.get(op)
    else:
        try:
            found = _BY_UFUNC.get(op)
        except TypeError:  # unhashable
            found = None
    if found is None:
        raise ValueError(
            f"reduce(op): op must be one of {', '.join(map(repr, OPS))} "
            f"or the matching NumPy ufunc (numpy.add, numpy.minimum...), "
            f"got {op!r}"
        )
    return found


class Reduction:
    """The reductions into one data not combined yet (``DataState.pending``).

    Attributes
    ----------
    mode : int
        The reduction mode (with its operation).
    partials : list of (Instance, Event)
        The private instances of ended reductions, complete at their events.
    holders : dict
        Started tasks reducing into the data -> their thread (their partials do not
        exist yet: combining waits for them).
    combining : bool
        The partial results are being combined.
    """

    __slots__ = ("mode", "partials", "holders", "combining")

    def __init__(self, mode: int) -> None:
        self.mode = mode
        self.partials: list[tuple[Any, Any]] = []
        self.holders: dict[Any, int] = {}
        self.combining = False  # being combined (eviction leaves it alone)

    @property
    def op(self) -> ReduceOp:
        return reduce_op(self.mode)

    def __repr__(self) -> str:
        return (
            f"<Reduction {self.op.name} {len(self.partials)} partial(s), "
            f"{len(self.holders)} started>"
        )


def reduce_mode(op: ReduceOp) -> int:
    """The mode of a reduction with ``op``."""
    return REDUCE | (op.code << _SHIFT)


def is_reduce(mode: int) -> bool:
    return bool(mode & REDUCE)


def reduce_op(mode: int) -> ReduceOp:
    """The operation of reduction mode ``mode`` (``REDUCE`` alone: ``"sum"``)."""
    return _BY_CODE[mode >> _SHIFT]


def valid_reduce_mode(mode: int) -> bool:
    return mode & 7 == REDUCE and (mode >> _SHIFT) in _BY_CODE
