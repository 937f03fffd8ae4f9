"""Tiles of a 2-D NumPy array as a grid of logical data.

``stf.tiles(ctx, A, (mb, nb))`` cuts ``A`` into blocks of ``mb`` x ``nb`` elements
(the last row and column of blocks take what is left) and registers each block *in
place* as one logical data: a strided view of ``A`` (``stflow._core.layout``), nothing
copied on the host. A task on a device gets a dense copy of its tile, moved by one
pitched copy (``cuMemcpy2DAsync`` on CUDA); ``finalize()`` writes each tile back into
its block of ``A`` the same way, and nothing else of ``A`` is touched. Tiled
algorithms (a blocked Cholesky, a blocked matrix product) then submit one task per
block operation and stflow orders them by the blocks they touch.

The page-locking of ``A`` is shared by its tiles: the registry page-locks the whole
array once, at the first tile, and undoes it when the last tile is retired.

An array whose rows are not contiguous (Fortran order, a view with a column step)
would move element by element; its tiles are contiguous copies instead, copied back
into ``A`` at ``finalize()`` (as every tile was before tiles were registered in place).

On a :class:`~stflow.distributed_context` each tile has an owner rank, given by a
distribution function of the tile's indices (:class:`block_cyclic` by default): only
the owner registers its blocks of its array and gets them back at ``finalize()``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._instruments.seam import Instrument

__all__ = ["TileGrid", "block_cyclic", "tiles"]


class block_cyclic:
    """Tiles dealt 2-D block-cyclic over a ``p`` × ``q`` grid of ranks: tile
    ``(i, j)`` is owned by rank ``(i mod p) · q + (j mod q)`` (the distribution of
    ScaLAPACK and of StarPU-MPI's examples; it balances the work of tiled
    factorisations whose active part shrinks).

    ``block_cyclic.over(n)`` makes the grid for ``n`` ranks: ``p`` the largest divisor
    of ``n`` not above its square root. Any callable ``owner(i, j) -> rank`` can be
    given to :func:`tiles` instead.
    """

    __slots__ = ("p", "q")

    def __init__(self, p: int, q: int) -> None:
        for label, value in (("p", p), ("q", q)):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, np.integer))
                or value <= 0
            ):
                raise ValueError(
                    f"block_cyclic: {label} must be a positive number of "
                    f"ranks, got {value!r}"
                )
        self.p, self.q = int(p), int(q)

    @classmethod
    def over(cls, ranks: int) -> block_cyclic:
        """The most square grid of exactly ``ranks`` ranks."""
        if (
            isinstance(ranks, bool)
            or not isinstance(ranks, (int, np.integer))
            or ranks <= 0
        ):
            raise ValueError(f"block_cyclic.over: ranks must be positive, got {ranks!r}")
        p = max(d for d in range(1, math.isqrt(int(ranks)) + 1) if ranks % d == 0)
        return cls(p, int(ranks) // p)

    @property
    def ranks(self) -> int:
        """How many ranks the grid spans, ``p · q``."""
        return self.p * self.q

    def __call__(self, i: int, j: int) -> int:
        return (i % self.p) * self.q + (j % self.q)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, block_cyclic) and (self.p, self.q) == (other.p, other.q)

    def __hash__(self) -> int:
        return hash((self.p, self.q))

    def __repr__(self) -> str:
        return f"stflow.block_cyclic(p={self.p}, q={self.q})"


class TileGrid:
    """A 2-D grid of logical data, one per tile of an array (made by :func:`tiles`).

    Attributes
    ----------
    shape : tuple of int
        Number of tiles along each axis: ``ceil(rows / mb), ceil(cols / nb)``.
    tile_shape : tuple of int
        The nominal tile shape ``(mb, nb)``; tiles of the last row / column of tiles
        may be smaller.
    array_shape : tuple of int
        The shape of the tiled array.

    triangle : str or None
        ``"lower"`` / ``"upper"`` when only the tiles on and below / above the
        diagonal of tiles are registered, else ``None``.

    Notes
    -----
    ``grid[i, j]`` is the logical data of tile ``(i, j)``; ``grid.bounds(i, j)`` its
    slices into the array; ``len(grid)`` the number of tiles registered; iterating
    yields ``((i, j), logical_data)`` pairs in C order, registered tiles only.
    """

    def __init__(
        self,
        data: list[list[Any]],
        tile_shape: tuple[int, int],
        array_shape: tuple[int, int],
        triangle: str | None = None,
    ) -> None:
        self._data = data
        self.tile_shape = tile_shape
        self.array_shape = array_shape
        self.triangle = triangle
        self.shape = (len(data), len(data[0]) if data else 0)

    def __getitem__(self, index: tuple[int, int]) -> Any:
        i, j = self._index(index)
        tile = self._data[i][j]
        if tile is None:
            side = "below" if self.triangle == "lower" else "above"
            raise KeyError(
                f"tile ({i}, {j}) is not registered: stf.tiles(triangle="
                f"{self.triangle!r}) registers the tiles on and {side} the diagonal "
                "only; its block of the array is the caller's"
            )
        return tile

    def _index(self, index: Any) -> tuple[int, int]:
        if not isinstance(index, tuple) or len(index) != 2:
            raise TypeError(
                f"index a TileGrid with two integers, grid[i, j]; got {index!r}"
            )
        i, j = (operator.index(k) for k in index)
        rows, cols = self.shape
        if not (-rows <= i < rows and -cols <= j < cols):
            raise IndexError(
                f"tile ({i}, {j}) is outside the {rows} x {cols} grid of tiles"
            )
        return i % rows, j % cols

    def bounds(self, i: int, j: int) -> tuple[slice, slice]:
        """The slices of tile ``(i, j)`` in the tiled array: ``A[grid.bounds(i, j)]``."""
        i, j = self._index((i, j))
        mb, nb = self.tile_shape
        rows, cols = self.array_shape
        return (
            slice(i * mb, min((i + 1) * mb, rows)),
            slice(j * nb, min((j + 1) * nb, cols)),
        )

    def __len__(self) -> int:
        return sum(ld is not None for row in self._data for ld in row)

    def __iter__(self) -> Iterator[tuple[tuple[int, int], Any]]:
        for i, row in enumerate(self._data):
            for j, ld in enumerate(row):
                if ld is not None:
                    yield (i, j), ld

    def __repr__(self) -> str:
        part = "" if self.triangle is None else f" ({self.triangle} triangle)"
        return (
            f"<stflow.TileGrid {self.shape[0]}x{self.shape[1]} tiles{part} of "
            f"{self.tile_shape[0]}x{self.tile_shape[1]} over an array of shape "
            f"{self.array_shape}>"
        )


class _WriteBack(Instrument):
    """Copies the tiles into the original array once the context has finalized."""

    def __init__(
        self, target: np.ndarray, copies: list[tuple[tuple[slice, slice], np.ndarray]]
    ) -> None:
        self.target = target
        self.copies = copies

    def finalized(self) -> None:
        # The tile copies were written back by finalize() (an abandoned context does
        # not write them, so they still hold the values taken from the array).
        for where, copy in self.copies:
            self.target[where] = copy
        self.copies = []


def tiles(
    ctx: Any,
    array: np.ndarray,
    tile_shape: tuple[int, int] | int,
    *,
    name: str | None = None,
    owner: Callable[[int, int], int] | None = None,
    triangle: str | None = None,
) -> TileGrid:
    """Register the tiles of a 2-D array as a grid of logical data.

    Each tile is registered in place, a strided view of its block of ``array`` (no
    host copy): a device task gets a dense copy (one pitched copy), a host task the
    view, and ``finalize()`` writes each tile back into its block, touching nothing
    between blocks. Until then the array belongs to the context. Rows that are not
    contiguous (Fortran order, a column step) are tiled by copies, copied back.

    Parameters
    ----------
    ctx : context or stackable_context
        The context that owns the tiles. For rows that are not contiguous, not one
        made with a caller ``stream=`` (its ``finalize()`` does not wait for the
        copies back).
    array : numpy.ndarray
        A 2-D array, C or Fortran order or any strided view with positive strides. A
        read-only array gives read-only tiles (a ``write``/``rw`` dependency on one
        raises) and nothing is written back.
    tile_shape : (int, int) or int
        Rows and columns of a tile (an ``int`` for square tiles). Tiles of the last
        row and column of tiles are smaller when the shape does not divide evenly.
    name : str, optional
        Prefix of the tiles' names (``"A[0,1]"``...) in errors, graphs and traces.
    owner : callable, optional
        With a :class:`~stflow.distributed_context` only: ``owner(i, j)`` is the rank
        owning tile ``(i, j)`` (default :meth:`block_cyclic.over` the communicator's
        size). Every rank passes an array of the same shape and dtype and gets back
        only its tiles' blocks (the rest may be a placeholder taking no memory, such
        as ``np.broadcast_to(np.float64(0), shape)``).
    triangle : {"lower", "upper"}, optional
        Only the tiles with ``j <= i`` (``"lower"``) or ``j >= i``, for algorithms on
        one triangle (a tiled Cholesky); the other blocks stay the caller's, never
        copied (``grid[i, j]`` raises ``KeyError`` for them). Default: every tile.

    Returns
    -------
    TileGrid
        ``grid[i, j]``: the logical data of tile ``(i, j)``; ``ctx.wait`` reads one.

    Raises
    ------
    TypeError
        ``array`` is not a plain NumPy array (a subclass such as a masked array
        would lose its meaning); ``tile_shape`` is not integers.
    ValueError
        ``array`` is not 2-D or is empty; ``tile_shape`` is not positive; a caller
        stream with rows not contiguous; ``owner`` names a rank outside the group;
        ``triangle`` is not ``"lower"``, ``"upper"`` or ``None``.
    BufferOverlapError
        A block of ``array`` is already registered in ``ctx`` (another grid of tiles
        over the same array, or the array itself).

    Examples
    --------
    >>> import numpy as np, stflow as stf
    >>> A = np.arange(30.0).reshape(5, 6)
    >>> with stf.context(backend="emulated") as ctx:
    ...     grid = stf.tiles(ctx, A, (2, 4))
    ...     for (i, j), tile in grid:
    ...         with ctx.task(tile.rw()) as t:
    ...             (block,) = t.views()
    ...             np.asarray(block)[...] *= -1
    >>> grid.shape, float(A[4, 5])
    ((3, 2), -29.0)
    """
    _check_array(array)
    _check_triangle(triangle)
    prefix = "tile" if name is None else name
    return _grid(
        ctx, array, _tile_sizes(tile_shape), prefix, _owners(ctx, owner), triangle
    )


def _grid(
    ctx: Any,
    array: np.ndarray,
    tile_shape: tuple[int, int],
    prefix: str,
    owner_of: Callable[[int, int], int] | None,
    triangle: str | None,
) -> TileGrid:
    """The grid of the tiles (:func:`_tile`), by rows of tiles; ``None`` for the
    tiles outside ``triangle``. Rows that are not contiguous make copies, written back
    into ``array`` when the context has finalized (``_WriteBack``)."""
    mb, nb = tile_shape
    local = ctx.local if owner_of is not None else ctx  # who writes the blocks back
    copies: list[tuple[tuple[slice, slice], np.ndarray]] | None = None
    if array.shape[1] != 1 and array.strides[1] != array.itemsize:  # rows not contiguous
        _refuse_caller_stream(local)
        copies = []
    grid = [
        [
            _tile(ctx, array, (i, j), tile_shape, f"{prefix}[{i},{j}]", owner_of, copies)
            if triangle is None or (j <= i if triangle == "lower" else j >= i)
            else None
            for j in range(-(-array.shape[1] // nb))
        ]
        for i in range(-(-array.shape[0] // mb))
    ]
    if copies:
        local.attach(_WriteBack(array, copies))
    return TileGrid(grid, tile_shape, array.shape, triangle)


def _check_triangle(triangle: Any) -> None:
    if triangle not in (None, "lower", "upper"):
        raise ValueError(
            f'stf.tiles(triangle={triangle!r}): give "lower", "upper" or None '
            "(every tile)"
        )


def _check_array(array: Any) -> None:
    """Refuse what ``stf.tiles`` cannot tile: not a plain NumPy array, not 2-D, empty."""
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"stf.tiles() tiles a NumPy array, got "
            f"{type(array).__name__}; convert it with np.asarray first "
            "(results are written back into that array)"
        )
    if type(array) is not np.ndarray:
        raise TypeError(
            f"stf.tiles() refuses a {type(array).__name__} (a subclass of "
            "numpy.ndarray): its tiles would be plain arrays and lose what "
            "the subclass adds (a mask, units); pass np.asarray(array) or "
            "array.filled(...) explicitly"
        )
    if array.ndim != 2:
        raise ValueError(
            f"stf.tiles() needs a 2-D array, got {array.ndim}-D of shape "
            f"{array.shape}; reshape it, or register it whole with "
            "ctx.logical_data"
        )
    if array.size == 0:
        raise ValueError(f"stf.tiles() got an empty array of shape {array.shape}")


def _tile_sizes(tile_shape: Any) -> tuple[int, int]:
    """Rows and columns of a tile from ``(mb, nb)`` or one integer."""
    shape: Any = tile_shape
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape), int(shape))
    try:
        if any(isinstance(k, bool) for k in shape):
            raise TypeError
        mb, nb = (operator.index(k) for k in shape)
    except (TypeError, ValueError):
        raise TypeError(
            f"stf.tiles(tile_shape={tile_shape!r}): give two integers "
            "(rows, columns) or one for square tiles"
        ) from None
    if mb <= 0 or nb <= 0:
        raise ValueError(f"stf.tiles(tile_shape={(mb, nb)}): tile sizes must be positive")
    return mb, nb


def _tile(
    ctx: Any,
    array: np.ndarray,
    index: tuple[int, int],
    tile_shape: tuple[int, int],
    label: str,
    owner_of: Callable[[int, int], int] | None,
    copies: list[tuple[tuple[slice, slice], np.ndarray]] | None,
) -> Any:
    """The logical data of tile ``index``: its block of ``array`` registered in place,
    or (``copies`` given: rows not contiguous) a C-ordered copy of it, noted in
    ``copies`` to be written back; another rank's tile is its shape alone."""
    (i, j), (mb, nb) = index, tile_shape
    rows, cols = array.shape
    where = (
        slice(i * mb, min((i + 1) * mb, rows)),
        slice(j * nb, min((j + 1) * nb, cols)),
    )
    if owner_of is not None:
        rank = _owner(ctx, owner_of, i, j)
        if rank != ctx.rank:  # another rank's tile: only its shape is read
            return ctx.logical_data(array[where], owner=rank, name=label)
    block = array[where]
    if copies is not None:
        block = np.array(block, order="C", copy=True)
        if not array.flags.writeable:
            block.flags.writeable = False
        else:
            copies.append((where, block))
    if owner_of is None:
        return ctx.logical_data(block, name=label)
    return ctx.logical_data(block, owner=ctx.rank, name=label)


def _refuse_caller_stream(local: Any) -> None:
    """Tiles copied back at ``finalize()`` need a context whose finalize waits."""
    runtime = local._runtime  # a context's (None once finalized), a stackable's
    if runtime is not None and runtime.caller_stream is not None:
        raise ValueError(
            "stf.tiles() of an array whose rows are not contiguous needs "
            "a context without a caller stream: its tiles are copies, "
            "copied back when finalize() completes, and finalize() of a "
            "context made with stream= does not wait; tile a C-ordered "
            "array (registered in place), or a context without stream="
        )


def _owners(ctx: Any, owner: Any) -> Callable[[int, int], int] | None:
    """The distribution function of a distributed context's tiles (``None`` for a
    single-process context, which takes no ``owner``)."""
    from .._dist.context import distributed_context

    if not isinstance(ctx, distributed_context):
        if owner is not None:
            raise TypeError(
                "stf.tiles(owner=...) distributes tiles over the ranks of "
                "a stf.distributed_context; this context is a single "
                "process"
            )
        return None
    if owner is None:
        return block_cyclic.over(ctx.size)
    if not callable(owner):
        raise TypeError(
            f"stf.tiles(owner=...) takes a function of the tile indices "
            f"(i, j) returning a rank, such as stf.block_cyclic(p, q); got "
            f"{type(owner).__name__}"
        )
    if isinstance(owner, block_cyclic) and owner.ranks > ctx.size:
        raise ValueError(
            f"stf.tiles(owner={owner!r}) spans {owner.ranks} ranks; the "
            f"communicator has {ctx.size}"
        )
    return owner


def _owner(ctx: Any, owner_of: Callable[[int, int], int], i: int, j: int) -> int:
    rank = owner_of(i, j)
    if (
        isinstance(rank, bool)
        or not isinstance(rank, (int, np.integer))
        or not 0 <= rank < ctx.size
    ):
        raise ValueError(
            f"stf.tiles(owner=...): owner({i}, {j}) returned {rank!r}, "
            f"not a rank of the communicator (0..{ctx.size - 1})"
        )
    return int(rank)
