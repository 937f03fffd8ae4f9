"""stf.tiles: the tiles of a 2-D array as logical data, written back at finalize."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from helpers.bodies import add_to

import stflow as stf
from stflow.errors import AccessModeError, UnfinalizedContextWarning


def _negate_every_tile(ctx, grid):
    for (i, j), tile in grid:
        device = (i + j) % ctx._runtime.device_count  # two devices where there are
        with ctx.task(stf.exec_place.device(device), tile.rw()) as t:
            add_to(t, 0, 0, -2.0)  # x += -2 x


@pytest.mark.parametrize(
    "shape, tile_shape, grid_shape",
    [
        ((6, 8), (2, 4), (3, 2)),  # exact
        ((7, 5), (3, 2), (3, 3)),  # odd sizes: smaller last tiles
        ((5, 5), 8, (1, 1)),  # one tile bigger than the array
        ((1, 9), (1, 1), (1, 9)),
    ],
)
def test_tiles_cover_the_array_and_are_written_back(
    backend, shape, tile_shape, grid_shape
):
    A = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) + 1
    expected = -A
    with stf.context(backend=backend) as ctx:
        grid = stf.tiles(ctx, A, tile_shape, name="A")
        assert grid.shape == grid_shape and len(grid) == np.prod(grid_shape)
        covered = np.zeros(shape, dtype=int)
        for (i, j), tile in grid:
            rows, cols = grid.bounds(i, j)
            covered[rows, cols] += 1
            assert tile.shape == A[rows, cols].shape
            assert grid[i, j] is tile
        assert (covered == 1).all()
        _negate_every_tile(ctx, grid)
        assert not np.array_equal(A, expected)  # written at finalize, not before
        np.testing.assert_array_equal(
            ctx.wait(grid[-1, -1]), expected[grid.bounds(-1, -1)]
        )
    np.testing.assert_array_equal(A, expected)


def test_tasks_see_contiguous_tiles_of_a_fortran_array():
    A = np.asfortranarray(np.arange(20.0).reshape(4, 5))
    seen = []
    with stf.context(backend="emulated") as ctx:
        grid = stf.tiles(ctx, A, (3, 2))
        with ctx.task(grid[1, 2].rw()) as t:
            (view,) = t.views()
            block = np.asarray(view)
            seen.append((block.shape, block.flags.c_contiguous))
            block[...] = -1
    assert seen == [((1, 1), True)]
    assert A.flags.f_contiguous and A[3, 4] == -1 and A[2, 4] == 14


def test_tiles_of_a_strided_view_write_into_the_view():
    base = np.zeros((6, 6))
    view = base[::2, 1::2]  # 3 x 3, not contiguous
    with stf.context(backend="emulated") as ctx:
        grid = stf.tiles(ctx, view, 2)
        for _, tile in grid:
            with ctx.task(tile.rw()) as t:
                add_to(t, 0, None, 1.0)
    assert base.sum() == 9 and (base[::2, 1::2] == 1).all()


def test_read_only_arrays_give_read_only_tiles():
    A = np.arange(12.0).reshape(3, 4)
    A.flags.writeable = False
    with stf.context(backend="emulated") as ctx:
        grid = stf.tiles(ctx, A, 2)
        with pytest.raises(AccessModeError, match="read-only"):
            grid[0, 0].rw()
        np.testing.assert_array_equal(ctx.wait(grid[1, 1]), [[10.0, 11.0]])


def test_stackable_and_graph_contexts():
    A = np.ones((4, 4))
    with stf.stackable_context(backend="emulated") as sctx:
        grid = stf.tiles(sctx, A, 2)
        with sctx.repeat(3):
            for _, tile in grid:
                with sctx.task(tile.rw()) as t:
                    add_to(t, 0, None, 1.0)
    assert (A == 4).all()
    B = np.ones((3, 3))
    with stf.context(backend="emulated", use_graph=True) as ctx:
        _negate_every_tile(ctx, stf.tiles(ctx, B, 2))
    assert (B == -1).all()


def test_an_abandoned_context_leaves_the_array_as_it_was():
    A = np.ones((2, 2))
    ctx = stf.context(backend="emulated")
    grid = stf.tiles(ctx, A, 1)
    _negate_every_tile(ctx, grid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        warnings.simplefilter("ignore", UnfinalizedContextWarning)
        del ctx, grid
        import gc

        gc.collect()
    assert (A == 1).all()


def test_mistakes_are_refused_with_the_fix():
    with stf.context(backend="emulated") as ctx:
        with pytest.raises(TypeError, match="np.asarray"):
            stf.tiles(ctx, [[1.0, 2.0]], 1)
        with pytest.raises(TypeError, match="MaskedArray.*filled"):
            stf.tiles(ctx, np.ma.array(np.ones((2, 2)), mask=[[0, 1], [0, 0]]), 1)
        with pytest.raises(ValueError, match="2-D.*3-D"):
            stf.tiles(ctx, np.ones((2, 2, 2)), 1)
        with pytest.raises(ValueError, match="empty"):
            stf.tiles(ctx, np.ones((0, 3)), 1)
        with pytest.raises(ValueError, match="positive"):
            stf.tiles(ctx, np.ones((2, 2)), (0, 1))
        with pytest.raises(TypeError, match="two integers"):
            stf.tiles(ctx, np.ones((2, 2)), (1.5, 1))
        grid = stf.tiles(ctx, np.ones((3, 3)), 2)
        with pytest.raises(IndexError, match=r"tile \(2, 0\) is outside the 2 x 2"):
            grid[2, 0]
        with pytest.raises(TypeError, match=r"grid\[i, j\]"):
            grid[0]
        assert repr(grid) == (
            "<stflow.TileGrid 2x2 tiles of 2x2 over an array of shape (3, 3)>"
        )


@pytest.mark.parametrize("triangle", ["lower", "upper"])
def test_one_triangle_of_tiles_leaves_the_other_blocks_to_the_caller(backend, triangle):
    """``triangle=``: only the tiles on and below (above) the diagonal are logical
    data; the other blocks are neither read nor written back, so the caller may
    change them while the context works (the Cholesky example zeroes them on a
    thread of its own)."""
    A = np.arange(7.0 * 7.0).reshape(7, 7) + 1
    expected = A.copy()
    inside = (lambda i, j: j <= i) if triangle == "lower" else (lambda i, j: j >= i)
    with stf.context(backend=backend) as ctx:
        grid = stf.tiles(ctx, A, 3, name="A", triangle=triangle)  # 3 x 3 tiles
        assert grid.triangle == triangle and len(grid) == 6
        assert [index for index, _ in grid] == [
            (i, j) for i in range(3) for j in range(3) if inside(i, j)
        ]
        outside = (0, 2) if triangle == "lower" else (2, 0)
        with pytest.raises(KeyError, match=re.escape(f"tile {outside} is not regist")):
            grid[outside]
        _negate_every_tile(ctx, grid)
        for (i, j), _ in grid:
            expected[grid.bounds(i, j)] *= -1
        block = A[grid.bounds(*outside)]
        block[...] = 0.5  # the caller's meanwhile: nothing writes it back
        expected[grid.bounds(*outside)] = 0.5
    np.testing.assert_array_equal(A, expected)
    assert repr(grid) == (
        f"<stflow.TileGrid 3x3 tiles ({triangle} triangle) of 3x3 over an array "
        "of shape (7, 7)>"
    )


def test_a_triangle_must_be_lower_or_upper():
    with stf.context(backend="emulated") as ctx:
        with pytest.raises(ValueError, match='"lower", "upper" or None'):
            stf.tiles(ctx, np.ones((4, 4)), 2, triangle="diagonal")
