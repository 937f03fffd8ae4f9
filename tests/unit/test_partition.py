"""The partition mapper contract and the named partitioners (pure)."""

from __future__ import annotations

import pytest

from stflow import partitions
from stflow._places.partition import (
    MAX_CHUNKS,
    chunk_owners,
    chunk_size,
    native_grid_dims,
)


def test_grid_dims_reach_the_mapper_in_native_order_padded_with_one():
    assert native_grid_dims((2,)) == (2, 1, 1, 1)
    assert native_grid_dims((2, 3)) == (3, 2, 1, 1)
    assert native_grid_dims((2, 3, 4, 5)) == (5, 4, 3, 2)


def test_chunks_are_the_granularity_until_there_would_be_too_many():
    assert chunk_size(1, 256) == 256
    assert chunk_size(256 * MAX_CHUNKS, 256) == 256
    big = chunk_size(256 * MAX_CHUNKS + 1, 256)
    assert big % 256 == 0 and -(-(256 * MAX_CHUNKS + 1) // big) <= MAX_CHUNKS


def test_owners_are_c_order_linear_indices_of_native_coordinates():
    # A (2, 3) grid: native x (fastest) is the C axis of extent 3.
    owners = chunk_owners(
        lambda c, d, g: (c[0] // 100 % 3, c[0] // 300, 0, 0), 600, 100, (2, 3), "test"
    )
    assert owners == [0, 1, 2, 3, 4, 5]
    assert chunk_owners(lambda c, d, g: 1, 10, 100, (2,), "test") == [1]
    assert chunk_owners(lambda c, d, g: [1], 0, 100, (2,), "test") == [1]


@pytest.mark.parametrize(
    "result, match",
    [
        ((2, 0, 0, 0), "out-of-range"),
        ((0, 0, 1, 0), "out-of-range"),
        (-1, "out-of-range"),
        ("x", "grid coordinate"),
        ((0, 0, 0, 0, 0), "1 to 4"),
        ((), "1 to 4"),
        (1.5, "grid coordinate"),
    ],
)
def test_bad_coordinates_raise_value_error(result, match):
    with pytest.raises(ValueError, match=match):
        chunk_owners(lambda c, d, g: result, 100, 100, (2,), "test")


def test_named_partitioners():
    grid = (4, 1, 1, 1)
    assert [
        partitions.blocked()((b, 0, 0, 0), (400, 1, 1, 1), grid)[0]
        for b in (0, 99, 100, 399)
    ] == [0, 0, 1, 3]
    cyclic = partitions.cyclic(64)
    assert [
        cyclic((b, 0, 0, 0), (1000, 1, 1, 1), grid)[0] for b in (0, 64, 128, 192, 256)
    ] == [0, 1, 2, 3, 0]
    # (8, 10) float64 tiled along axis 1 over 2 members: columns 0-4 | 5-9.
    tiled = partitions.tiled((8, 10), 8, axis=1)
    assert [
        tiled((8 * k, 0, 0, 0), (640, 1, 1, 1), (2, 1, 1, 1))[0]
        for k in (0, 4, 5, 9, 10, 15)
    ] == [0, 0, 1, 1, 0, 1]
    two_d = partitions.blocked()((399, 0, 0, 0), (400, 1, 1, 1), (2, 2, 1, 1))
    assert two_d == (1, 1, 0, 0)
    with pytest.raises(ValueError):
        partitions.cyclic(0)
    with pytest.raises(TypeError):
        partitions.cyclic(1.5)
    with pytest.raises(ValueError):
        partitions.tiled((4, 4), 8, axis=2)
    assert repr(partitions.cyclic(64)) == "cyclic(block_bytes=64)"
