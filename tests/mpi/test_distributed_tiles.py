"""stf.tiles on a distributed_context: tiles owned by the ranks a distribution
function names, each owner reading and getting back only its own blocks."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf


def _double_every_tile(ctx, grid):
    for _, tile in grid:
        with ctx.task(tile.rw()) as t:  # executes on the tile's owner
            t.run(lambda xp, a: a.__imul__(2.0))


def test_default_block_cyclic_tiles_come_back_to_their_owners_only(comm):
    size, rank = comm.Get_size(), comm.Get_rank()
    A = np.arange(70.0).reshape(7, 10)
    original = A.copy()
    owner = stf.block_cyclic.over(size)
    with stf.distributed_context(comm, backend="emulated") as ctx:
        grid = stf.tiles(ctx, A, (3, 4), name="A")
        assert grid.shape == (3, 3)
        for (i, j), tile in grid:
            assert tile.owner == owner(i, j)
        _double_every_tile(ctx, grid)
        whole = np.block([[ctx.wait(grid[i, j]) for j in range(3)] for i in range(3)])
    np.testing.assert_array_equal(whole, 2 * original)  # on every rank
    for (i, j), _ in grid:
        where = grid.bounds(i, j)
        want = 2 * original[where] if owner(i, j) == rank else original[where]
        np.testing.assert_array_equal(A[where], want)


def test_a_distribution_function_of_ones_own(comm):
    size, rank = comm.Get_size(), comm.Get_rank()
    A = np.ones((6, 6))
    with stf.distributed_context(comm, backend="emulated") as ctx:
        grid = stf.tiles(ctx, A, 2, owner=lambda i, j: (i + 2 * j) % size)
        _double_every_tile(ctx, grid)
    for (i, j), tile in grid:
        assert tile.owner == (i + 2 * j) % size
        mine = tile.owner == rank
        assert (A[grid.bounds(i, j)] == (2.0 if mine else 1.0)).all()


def test_a_rank_owning_no_tile_may_pass_a_placeholder(comm):
    rank = comm.Get_rank()
    values = np.arange(16.0).reshape(4, 4)
    # Only rank 0 holds the matrix; the others pass a view taking no memory.
    A = values.copy() if rank == 0 else np.broadcast_to(np.float64(0), (4, 4))
    with stf.distributed_context(comm, backend="emulated") as ctx:
        grid = stf.tiles(ctx, A, 2, owner=stf.block_cyclic(1, 1))
        _double_every_tile(ctx, grid)
        total = ctx.wait(grid[1, 1])
    np.testing.assert_array_equal(total, 2 * values[2:, 2:])
    if rank == 0:
        np.testing.assert_array_equal(A, 2 * values)


def test_owners_outside_the_communicator_are_refused(comm):
    size = comm.Get_size()
    ctx = stf.distributed_context(comm, backend="emulated")
    try:
        with pytest.raises(ValueError, match=r"owner\(0, 1\) returned"):
            stf.tiles(ctx, np.zeros((4, 4)), 2, owner=lambda i, j: j * size)
        with pytest.raises(ValueError, match="spans"):
            stf.tiles(ctx, np.zeros((4, 4)), 2, owner=stf.block_cyclic(size + 1, 1))
        with pytest.raises(TypeError, match="function of the tile indices"):
            stf.tiles(ctx, np.zeros((4, 4)), 2, owner=3)
    finally:
        ctx.finalize()
