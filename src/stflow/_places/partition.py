"""How a composite data place spreads one instance over the members of a grid.

A composite place (``data_place.composite(grid, mapper)``) holds an instance as one
address range whose pieces live on different members' memory. The runtime cuts the
instance into *chunks* of the backend's granularity (on CUDA the virtual-memory
allocation granularity, 2 MiB on current GPUs) and asks the *mapper* which member owns
each chunk; the backend then maps every chunk on its owner's device.

The mapper contract is the reference's, so mappers port unchanged::

    mapper(data_coords, data_dims, grid_dims) -> (x, y, z, t)

The three arguments are 4-tuples of ints in **native order** (fastest axis first, the
reverse of the public C order, padded with 1). The data is seen as a flat array of
bytes: ``data_dims == (nbytes, 1, 1, 1)`` and ``data_coords == (offset, 0, 0, 0)``, the
first byte of the chunk. The result is a grid coordinate, fastest axis first; a bare
``int`` means ``(x, 0, 0, 0)``. A coordinate outside the grid raises ``ValueError``, an
exception of the mapper propagates; both surface from the task's ``start()``.

Nothing here calls a backend: :func:`chunk_owners` is pure and unit-tested.
The named partitioners at the end (:func:`blocked`, :func:`cyclic`, :func:`tiled`)
are mappers for the common layouts (``stflow.partitions`` exports them).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "MAX_CHUNKS",
    "Mapper",
    "blocked",
    "chunk_owners",
    "chunk_size",
    "cyclic",
    "native_grid_dims",
    "tiled",
]

Mapper = Callable[[tuple[int, ...], tuple[int, ...], tuple[int, ...]], Any]
"""``mapper(data_coords, data_dims, grid_dims) -> grid coordinate`` (4-tuples in the
byte form of the contract; tuples of the declared rank in the C-order form)."""

MAX_CHUNKS = 4096
"""At most this many chunks (mapper calls) per instance: larger data get larger
chunks, still multiples of the backend's granularity."""


def native_grid_dims(dims: Sequence[int]) -> tuple[int, int, int, int]:
    """C-order grid ``dims`` as the mapper sees them: reversed, padded with 1."""
    native = list(reversed(dims)) + [1] * (4 - len(dims))
    return (native[0], native[1], native[2], native[3])


def chunk_size(nbytes: int, granularity: int) -> int:
    """The chunk size for ``nbytes``: the granularity, or a multiple of it that keeps
    the number of chunks at most :data:`MAX_CHUNKS`."""
    chunks = -(-max(nbytes, 1) // granularity)
    if chunks <= MAX_CHUNKS:
        return granularity
    return -(-chunks // MAX_CHUNKS) * granularity


def chunk_owners(
    mapper: Mapper,
    nbytes: int,
    chunk: int,
    dims: Sequence[int],
    what: str,
    data_rank: int | None = None,
    shape: Sequence[int] = (),
    itemsize: int = 1,
) -> list[int]:
    """The member (linear index into the grid, C order) owning each ``chunk`` bytes of
    an instance of ``nbytes``.

    With ``data_rank`` the mapper gets the C-order form of the contract instead:
    ``mapper(element_coords, data_shape, grid_dims)``, tuples of ``data_rank``
    element coordinates and extents (the data's ``shape``, leading axes merged or
    padded with 1 to that rank) and the grid's C-order dims; it returns a C-order
    grid coordinate (an ``int`` for a rank-1 grid).

    Raises
    ------
    ValueError
        The mapper returned a coordinate outside the grid, or not 1 to 4 ints.
    Exception
        Whatever the mapper raised.
    """
    grid = native_grid_dims(dims)
    count = max(-(-nbytes // chunk), 1)
    owners: list[int] = []
    if data_rank is None:
        data_dims = (nbytes, 1, 1, 1)
        for index in range(count):
            coords = mapper((index * chunk, 0, 0, 0), data_dims, grid)
            owners.append(_linear(coords, grid, what))
        return owners
    extents = _ranked(tuple(shape), data_rank)
    grid_dims = tuple(dims)
    for index in range(count):
        element = index * chunk // max(itemsize, 1)
        coords = []
        for extent in reversed(extents):
            coords.append(element % extent)
            element //= extent
        result = mapper(tuple(reversed(coords)), extents, grid_dims)
        if not isinstance(result, (tuple, list)):
            result = (result,)
        owners.append(_linear(tuple(reversed(tuple(result))), grid, what))
    return owners


def _ranked(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """``shape`` as ``rank`` extents: leading axes merged, or leading 1s added."""
    if len(shape) < rank:
        return (1,) * (rank - len(shape)) + shape
    merged = 1
    for extent in shape[: len(shape) - rank + 1]:
        merged *= extent
    return (merged,) + shape[len(shape) - rank + 1 :]


def _linear(coords: Any, grid: tuple[int, int, int, int], what: str) -> int:
    """The C-order linear index of native grid coordinate ``coords``."""
    if not isinstance(coords, (tuple, list)):
        coords = (coords,)
    try:
        values = [operator.index(c) for c in coords]
    except TypeError:
        raise ValueError(
            f"{what}: the mapper must return a grid coordinate (an int or "
            f"1 to 4 ints, fastest axis first), got {coords!r}"
        ) from None
    if not 1 <= len(values) <= 4:
        raise ValueError(
            f"{what}: the mapper returned {len(values)} coordinates; a "
            "grid coordinate has 1 to 4 (fastest axis first)"
        )
    values += [0] * (4 - len(values))
    linear = 0
    stride = 1
    for axis, (value, extent) in enumerate(zip(values, grid)):
        if not 0 <= value < extent:
            raise ValueError(
                f"{what}: the mapper returned an out-of-range grid coordinate "
                f"{tuple(values)} (axis {axis} has extent {extent}; native order, "
                "fastest axis first)"
            )
        linear += value * stride
        stride *= extent
    # ``linear`` counts in native order (x fastest): the same number as the C-order
    # linear index of the reversed coordinate.
    return linear


# -- named partitioners ---------------------------------------------------------------


class blocked:
    """Contiguous, equal parts: member ``i`` of ``n`` owns bytes
    ``[i * size / n, (i + 1) * size / n)`` — for C-ordered data, a blocked
    partition along its slowest axis."""

    __slots__ = ()

    def __call__(
        self,
        data_coords: Sequence[int],
        data_dims: Sequence[int],
        grid_dims: Sequence[int],
    ) -> tuple[int, int, int, int]:
        members = _members(grid_dims)
        size = max(data_dims[0], 1)
        part = min(data_coords[0] * members // size, members - 1)
        return _native(part, grid_dims)

    def __repr__(self) -> str:
        return "blocked()"


class cyclic:
    """Round robin: blocks of ``block_bytes`` go to members 0, 1, ..., n-1, 0, ...
    (``block_bytes`` is rounded up to whole chunks by the layout)."""

    __slots__ = ("block_bytes",)

    def __init__(self, block_bytes: int) -> None:
        if isinstance(block_bytes, bool) or not isinstance(block_bytes, int):
            raise TypeError(
                f"cyclic: block_bytes must be an int, got {type(block_bytes).__name__}"
            )
        if block_bytes <= 0:
            raise ValueError(f"cyclic: block_bytes must be positive, got {block_bytes}")
        self.block_bytes = block_bytes

    def __call__(
        self,
        data_coords: Sequence[int],
        data_dims: Sequence[int],
        grid_dims: Sequence[int],
    ) -> tuple[int, int, int, int]:
        return _native(
            (data_coords[0] // self.block_bytes) % _members(grid_dims), grid_dims
        )

    def __repr__(self) -> str:
        return f"cyclic(block_bytes={self.block_bytes})"


class tiled:
    """Blocked along ``axis`` of data of C-order ``shape`` and element size
    ``itemsize``: member ``i`` of ``n`` owns the elements whose index along ``axis``
    lies in ``[i * extent / n, (i + 1) * extent / n)``."""

    __slots__ = ("shape", "itemsize", "axis")

    def __init__(self, shape: Sequence[int], itemsize: int, axis: int = 0) -> None:
        shape = tuple(int(n) for n in shape)
        if not shape or any(n <= 0 for n in shape):
            raise ValueError(f"tiled: shape must be positive extents, got {shape}")
        if itemsize <= 0:
            raise ValueError(f"tiled: itemsize must be positive, got {itemsize}")
        if not -len(shape) <= axis < len(shape):
            raise ValueError(f"tiled: axis {axis} out of range for shape {shape}")
        self.shape = shape
        self.itemsize = int(itemsize)
        self.axis = axis % len(shape)

    def __call__(
        self,
        data_coords: Sequence[int],
        data_dims: Sequence[int],
        grid_dims: Sequence[int],
    ) -> tuple[int, int, int, int]:
        element = data_coords[0] // self.itemsize
        inner = 1
        for extent in self.shape[self.axis + 1 :]:
            inner *= extent
        extent = self.shape[self.axis]
        index = min((element // inner) % extent, extent - 1)
        members = _members(grid_dims)
        return _native(index * members // extent, grid_dims)

    def __repr__(self) -> str:
        return f"tiled(shape={self.shape}, itemsize={self.itemsize}, axis={self.axis})"


def _members(grid_dims: Sequence[int]) -> int:
    count = 1
    for extent in grid_dims:
        count *= extent
    return count


def _native(linear: int, grid_dims: Sequence[int]) -> tuple[int, int, int, int]:
    """The native coordinate of linear member ``linear`` (x fastest)."""
    coords = []
    for extent in grid_dims:
        coords.append(linear % extent)
        linear //= extent
    coords += [0] * (4 - len(coords))
    return (coords[0], coords[1], coords[2], coords[3])
