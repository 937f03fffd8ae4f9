"""Loop conditions: ``cond(ld, op, threshold)`` leaves and their ``&`` / ``|`` / ``~``.

A condition reads element 0 of logical data on the device; ``while_loop`` bodies end
with ``loop.continue_while(expr)``. Expressions stay flat: a compound is all-of or
any-of at most :data:`MAX_TERMS` leaves, and ``~`` applies De Morgan's law.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["Comparable", "MAX_TERMS", "cond"]

MAX_TERMS = 8
"""Most leaves in one condition (the device kernel reads at most this many values)."""
_OPS = (">", "<", ">=", "<=")
_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))


class _Expr:
    """Common behaviour of leaves and compounds."""

    __slots__ = ()

    def __bool__(self) -> bool:
        raise TypeError(
            "a loop condition has no truth value on the host: combine "
            "conditions with &, | and ~ (not and, or, not) and pass them to "
            "loop.continue_while()"
        )

    def __and__(self, other: Any) -> Any:
        return _combine(self, other, "all")

    def __or__(self, other: Any) -> Any:
        return _combine(self, other, "any")

    def __rand__(self, other: Any) -> Any:
        return _combine(other, self, "all")

    def __ror__(self, other: Any) -> Any:
        return _combine(other, self, "any")

    def leaves(self) -> tuple[cond, ...]:
        raise NotImplementedError

    def combiner(self) -> str:
        raise NotImplementedError


class Comparable:
    """Data whose comparisons with a number build loop conditions
    (``stackable_logical_data``): ``ld > 0.5`` is ``cond(ld, ">", 0.5)``."""

    __slots__ = ()

    def _leaf(self, op: str, other: Any) -> cond:
        if isinstance(other, Comparable):
            raise TypeError(
                "comparing two logical data does not build a loop "
                "condition: compare logical data with a real scalar"
            )
        if not isinstance(other, numbers.Real):
            raise TypeError(
                f"a loop condition compares logical data with a real "
                f"scalar, got {type(other).__name__}"
            )
        return cond(self, op, other)

    def __gt__(self, other: Any) -> cond:
        return self._leaf(">", other)

    def __lt__(self, other: Any) -> cond:
        return self._leaf("<", other)

    def __ge__(self, other: Any) -> cond:
        return self._leaf(">=", other)

    def __le__(self, other: Any) -> cond:
        return self._leaf("<=", other)


class cond(_Expr):
    """``element0(ld) op threshold``: a leaf of a loop condition.

    Parameters
    ----------
    ld : stackable_logical_data
        float32, float64, int32 or int64 data; element 0 is compared.
    op : {">", "<", ">=", "<="}
    threshold : numbers.Real
    """

    __slots__ = ("_ld", "_op", "_threshold", "_negate")
    _ld: Any
    _op: str
    _threshold: float
    _negate: bool

    def __init__(self, data: Any, op: str, threshold: Any) -> None:
        ld: Any = data
        if not isinstance(data, Comparable):
            raise TypeError(
                f"cond: expected a stackable logical_data "
                f"(stackable_logical_data), got {type(ld).__name__}"
            )
        if ld._is_token or ld._dtype not in _DTYPES:
            raise ValueError(
                f"cond: {ld._label()} has dtype {ld._dtype}; a condition "
                "reads float32, float64, int32 or int64 data"
            )
        if op not in _OPS:
            raise ValueError(
                f"cond: unsupported comparison operator {op!r}; use one "
                f"of {', '.join(_OPS)}"
            )
        if isinstance(threshold, _Expr) or not isinstance(threshold, numbers.Real):
            raise TypeError(
                f"cond: threshold must be a real scalar, got {type(threshold).__name__}"
            )
        self._ld = ld
        self._op = op
        self._threshold = float(threshold)
        self._negate = False

    def __invert__(self) -> cond:
        flipped = cond.__new__(cond)
        flipped._ld, flipped._op, flipped._threshold = self._ld, self._op, self._threshold
        flipped._negate = not self._negate
        return flipped

    def leaves(self) -> tuple[cond, ...]:
        return (self,)

    def combiner(self) -> str:
        return "all"

    def __repr__(self) -> str:
        text = f"cond({self._ld!r}, {self._op!r}, {self._threshold!r})"
        return "~" + text if self._negate else text


class _Compound(_Expr):
    """All (``&``) or any (``|``) of several leaves."""

    __slots__ = ("_combiner", "_terms")

    def __init__(self, combiner: str, terms: tuple[cond, ...]) -> None:
        if len(terms) > MAX_TERMS:
            raise ValueError(
                f"a loop condition has at most {MAX_TERMS} terms, this one "
                f"would have {len(terms)}"
            )
        self._combiner = combiner
        self._terms = terms

    def __invert__(self) -> _Compound:
        return _Compound(
            "any" if self._combiner == "all" else "all",
            tuple(~term for term in self._terms),
        )

    def leaves(self) -> tuple[cond, ...]:
        return self._terms

    def combiner(self) -> str:
        return self._combiner

    def __repr__(self) -> str:
        joiner = " & " if self._combiner == "all" else " | "
        return "(" + joiner.join(repr(t) for t in self._terms) + ")"


def _combine(left: Any, right: Any, combiner: str) -> Any:
    if not isinstance(left, _Expr) or not isinstance(right, _Expr):
        return NotImplemented
    terms: list[cond] = []
    for side in (left, right):
        if (
            isinstance(side, _Compound)
            and len(side._terms) > 1
            and side._combiner != combiner
        ):
            symbol = "&" if combiner == "all" else "|"
            raise NotImplementedError(
                f"mixed & and | in one loop condition are not supported ({side!r} "
                f"{symbol} ...); write it as a single all-of or any-of"
            )
        terms.extend(side.leaves())
    return _Compound(combiner, tuple(terms))


def condition_terms(expr: Any) -> tuple[str, tuple[cond, ...]]:
    """``(combiner, leaves)`` of a condition expression; ``TypeError`` otherwise."""
    if not isinstance(expr, _Expr):
        raise TypeError(
            f"continue_while expects a condition (cond(...), ld > x, "
            f"combined with & | ~), got {type(expr).__name__}"
        )
    return expr.combiner(), expr.leaves()
