"""Strided layouts: the byte strides of a user buffer that is not C-contiguous.

A logical data registered from a strided view (a tile of a matrix, every other row,
a Fortran-ordered array, a CuPy slice) keeps the user's memory as its *reference
instance*, where it is: nothing is copied at registration and ``finalize()`` writes
back into the view only, leaving the bytes between its elements (the rest of the
parent array) as they were. Every instance the runtime allocates is dense, in C
order, so task bodies on a device see an ordinary contiguous array; a body handed
the reference instance itself (a host task over host data, a device task over a
device view) gets the strides in its view.

This module is the arithmetic of such layouts, pure and backend-free:

- :func:`check_strides` validates the strides of a buffer (positive, elements not
  overlapping) and tells whether the layout is dense;
- :func:`extent` is the span of bytes from the first element to one past the last,
  what page-locking and the registry's overlap search cover;
- :func:`pitched` decomposes a copy between two layouts of one shape into 2-D
  pitched copies (``cuMemcpy2DAsync``: a width in bytes, a number of rows and a
  pitch on each side), one per index of the outer dimensions: one copy for a tile of
  a matrix, one per plane for a 3-D block;
- :func:`regions_overlap` decides exactly whether two buffers share a byte, with
  NumPy's solver (``numpy.shares_memory``) on arrays that only describe the
  addresses (nothing is read).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .errors import ShapeError

__all__ = [
    "Pitched",
    "check_strides",
    "dense_strides",
    "extent",
    "pitched",
    "region",
    "regions_overlap",
]


def dense_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a C-contiguous array of ``shape``."""
    strides = []
    step = itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def check_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int, what: str
) -> tuple[int, ...] | None:
    """The strides of a buffer, or ``None`` when the layout is C-contiguous.

    Dimensions of extent 1 may have any stride; an empty buffer is dense.

    Raises
    ------
    ShapeError
        A stride is negative or zero (on a dimension of more than one element), or two
        elements share bytes: the runtime copies elements, so each must own its
        bytes (interleaved dimensions whose elements stay apart, such as a column
        step of a matrix, are fine).
    """
    strides = tuple(int(s) for s in strides)
    if len(strides) != len(shape):
        raise ShapeError(f"{what}: strides {strides} do not match the shape {shape}")
    if 0 in shape:
        return None
    dense = dense_strides(shape, itemsize)
    if all(n == 1 or s == d for n, s, d in zip(shape, strides, dense)):
        return None
    for axis, (n, s) in enumerate(zip(shape, strides)):
        if n > 1 and s <= 0:
            kind = "negative" if s < 0 else "zero (a broadcast dimension)"
            raise ShapeError(
                f"{what}: stride {s} of axis {axis} (shape {shape}, strides {strides}) "
                f"is {kind}: elements must each own their bytes at increasing "
                "addresses; register a copy (numpy.ascontiguousarray) or a view with "
                "positive strides"
            )
    if _overlapping(sorted((s, n) for n, s in zip(shape, strides) if n > 1), itemsize):
        raise ShapeError(
            f"{what}: the layout with shape {shape} and strides {strides} has "
            "elements that share bytes; register numpy.ascontiguousarray(buf) instead"
        )
    return tuple(s if n > 1 else d for n, s, d in zip(shape, strides, dense))


_BRUTE_FORCE = 1 << 22
"""Elements up to which a layout of 3 or more interleaved dimensions is checked
element by element."""


def _overlapping(dims: list[tuple[int, int]], itemsize: int) -> bool:
    """True when two elements of the layout ``dims`` ((stride, extent), increasing
    strides, extents above 1) share a byte.

    Nested layouts (each stride steps over everything inside it: C or Fortran order,
    slices with steps of them) are checked in one pass; two interleaved dimensions
    (a column step of a matrix: rows start inside the span of the previous row)
    exactly, by the row offsets where another row's element could fall; more, by
    comparing the sorted addresses of every element.
    """
    if dims and dims[0][0] < itemsize:
        return True
    inner = itemsize
    nested = True
    for stride, extent_ in dims:
        if stride < inner:
            nested = False
            break
        inner = stride * extent_
    if nested:
        return False
    if len(dims) == 2:
        (small, n_small), (big, n_big) = dims
        offsets = np.arange(1, n_big, dtype=np.int64) * big
        below = offsets // small  # the nearest multiples of small
        for steps in (below, below + 1):
            near = np.abs(offsets - steps * small) < itemsize
            if np.any(near & (steps < n_small)):
                return True
        return False
    count = math.prod(n for _, n in dims)
    if count > _BRUTE_FORCE:
        raise ShapeError(
            f"a layout of {len(dims)} interleaved dimensions and {count} "
            "elements is too large to check for overlapping elements"
        )
    addresses = np.zeros(1, dtype=np.int64)
    for stride, extent_ in dims:
        addresses = (
            addresses[:, None] + np.arange(extent_, dtype=np.int64)[None, :] * stride
        ).ravel()
    addresses.sort()
    return bool(np.any(np.diff(addresses) < itemsize))


def extent(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> int:
    """Bytes from the first element of a layout to one past its last."""
    if 0 in shape:
        return 0
    if strides is None:
        return math.prod(shape) * itemsize
    return sum((n - 1) * s for n, s in zip(shape, strides)) + itemsize


class Pitched(NamedTuple):
    """A copy between two layouts as 2-D pitched copies (see :func:`pitched`).

    Each copy moves ``height`` rows of ``width`` bytes, rows ``dst_pitch`` /
    ``src_pitch`` bytes apart; :meth:`offsets` gives the byte offsets of each copy's
    first row on both sides.
    """

    width: int
    height: int
    dst_pitch: int
    src_pitch: int
    outer: tuple[int, ...]
    dst_outer: tuple[int, ...]
    src_outer: tuple[int, ...]

    @property
    def copies(self) -> int:
        """How many 2-D copies the whole copy takes."""
        return math.prod(self.outer)

    def offsets(self) -> Iterator[tuple[int, int]]:
        """``(dst_offset, src_offset)`` of each 2-D copy, in C order."""
        for index in itertools.product(*(range(n) for n in self.outer)):
            yield (
                sum(i * s for i, s in zip(index, self.dst_outer)),
                sum(i * s for i, s in zip(index, self.src_outer)),
            )


def pitched(
    shape: tuple[int, ...],
    dst_strides: tuple[int, ...] | None,
    src_strides: tuple[int, ...] | None,
    itemsize: int,
) -> Pitched:
    """Decompose a copy of ``shape`` between two layouts into 2-D pitched copies.

    ``None`` strides are C-contiguous. Dimensions of extent 1 are dropped, and
    neighbours that are contiguous with each other on both sides are merged; then the
    innermost dimension, when contiguous on both sides, gives the rows' width (and the
    next one their number and pitches), else each element is a row of ``itemsize``
    bytes. The dimensions left outside are looped over, one 2-D copy per index: a tile
    of a matrix is one copy, a 3-D block one per plane.
    """
    dst = dense_strides(shape, itemsize) if dst_strides is None else dst_strides
    src = dense_strides(shape, itemsize) if src_strides is None else src_strides
    dims = [(n, d, s) for n, d, s in zip(shape, dst, src) if n != 1]
    merged: list[tuple[int, int, int]] = []
    for n, d, s in reversed(dims):
        if merged:
            inner_n, inner_d, inner_s = merged[-1]
            if d == inner_d * inner_n and s == inner_s * inner_n:
                merged[-1] = (inner_n * n, inner_d, inner_s)
                continue
        merged.append((n, d, s))
    merged.reverse()  # outermost first again
    if not merged:
        return Pitched(
            itemsize if 0 not in shape else 0, 1, itemsize, itemsize, (), (), ()
        )
    n, d, s = merged[-1]
    if d == itemsize and s == itemsize:  # contiguous rows
        width = n * itemsize
        if len(merged) >= 2:
            height, dst_pitch, src_pitch = merged[-2]
            outer = merged[:-2]
        else:
            height, dst_pitch, src_pitch = 1, width, width
            outer = []
    else:  # one element per row
        width, height, dst_pitch, src_pitch = itemsize, n, d, s
        outer = merged[:-1]
    return Pitched(
        width,
        height,
        dst_pitch,
        src_pitch,
        tuple(o[0] for o in outer),
        tuple(o[1] for o in outer),
        tuple(o[2] for o in outer),
    )


class _Addresses:
    """An ``__array_interface__`` over addresses only (never read)."""

    __slots__ = ("__array_interface__",)

    def __init__(
        self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None
    ) -> None:
        self.__array_interface__ = {
            "version": 3,
            "shape": shape,
            "typestr": "|u1",
            "data": (ptr, True),
            "strides": strides,
        }


def region(
    ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int
) -> np.ndarray:
    """The bytes of a layout as a NumPy array that only describes their addresses
    (for :func:`regions_overlap`; never read or written)."""
    if strides is None:
        return np.asarray(_Addresses(ptr, (math.prod(shape) * itemsize,), None))
    return np.asarray(_Addresses(ptr, tuple(shape) + (itemsize,), tuple(strides) + (1,)))


def regions_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """True when two :func:`region` arrays share a byte.

    Exact (NumPy's bounded solver, about a microsecond for the layouts of tiles): two
    tiles of one matrix interleave in address order but share nothing, while two
    grids of tiles over one matrix do.
    """
    return bool(np.shares_memory(a, b))
