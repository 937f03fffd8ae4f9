"""stf.block_cyclic: the owners of tiles dealt over a grid of ranks."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf


def test_tiles_are_dealt_round_robin_along_both_axes():
    owner = stf.block_cyclic(2, 3)
    assert owner.ranks == 6
    assert [[owner(i, j) for j in range(4)] for i in range(3)] == [
        [0, 1, 2, 0],
        [3, 4, 5, 3],
        [0, 1, 2, 0],
    ]


@pytest.mark.parametrize(
    "ranks, grid",
    [
        (1, (1, 1)),
        (2, (1, 2)),
        (4, (2, 2)),
        (6, (2, 3)),
        (7, (1, 7)),
        (12, (3, 4)),
        (16, (4, 4)),
    ],
)
def test_over_makes_the_most_square_grid_of_exactly_that_many_ranks(ranks, grid):
    owner = stf.block_cyclic.over(ranks)
    assert (owner.p, owner.q) == grid and owner.ranks == ranks
    same = stf.block_cyclic(*grid)
    assert owner == same and hash(owner) == hash(same)
    assert {owner(i, j) for i in range(ranks) for j in range(ranks)} == set(range(ranks))


@pytest.mark.parametrize("p, q", [(0, 1), (1, -2), (1.5, 1), (True, 1), ("2", 2)])
def test_a_grid_needs_positive_integers(p, q):
    with pytest.raises(ValueError, match="block_cyclic: [pq] must be a positive"):
        stf.block_cyclic(p, q)
    with pytest.raises(ValueError, match="ranks must be positive"):
        stf.block_cyclic.over(0)


def test_repr_names_the_grid():
    assert repr(stf.block_cyclic(2, 4)) == "stflow.block_cyclic(p=2, q=4)"


def test_owner_is_for_distributed_contexts_only():
    with stf.context(backend="emulated") as ctx:
        with pytest.raises(TypeError, match="distributed_context"):
            stf.tiles(ctx, np.zeros((4, 4)), 2, owner=stf.block_cyclic(1, 1))
