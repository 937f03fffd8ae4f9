"""The arithmetic of strided layouts (stflow._core.layout): pure, no backend."""

from __future__ import annotations

import numpy as np
import pytest

from stflow._core.layout import (
    check_strides,
    dense_strides,
    extent,
    pitched,
    region,
    regions_overlap,
)
from stflow.errors import ShapeError


def _layout(view: np.ndarray) -> tuple[int, tuple[int, ...], tuple[int, ...] | None, int]:
    strides = check_strides(view.shape, view.strides, view.itemsize, "view")
    return view.__array_interface__["data"][0], view.shape, strides, view.itemsize


PARENT = np.zeros((12, 10))


@pytest.mark.parametrize(
    "view, expected",
    [
        (PARENT, None),  # C order
        (PARENT[3:5], None),  # whole rows: still C order
        (PARENT[:1, 2:7], None),  # one row: extent 1 ignored
        (PARENT[2:6, 1:4], (80, 8)),  # a tile
        (PARENT[::3], (240, 8)),  # every third row
        (PARENT[:, ::3], (80, 24)),  # interleaved rows (column step)
        (PARENT.T, (8, 80)),  # Fortran order
        (PARENT[:, :1], (80, 8)),  # a column: rows 80 bytes apart
        (PARENT[:4, 0], (80,)),  # ... as a strided vector
    ],
)
def test_check_strides_accepts_positive_disjoint_layouts(view, expected):
    assert check_strides(view.shape, view.strides, view.itemsize, "x") == expected


@pytest.mark.parametrize(
    "shape, strides, itemsize, pattern",
    [
        ((4,), (-8,), 8, r"stride -8 of axis 0 .* is negative"),
        ((3, 4), (0, 8), 8, r"stride 0 of axis 0 .* is zero \(a broadcast dimension\)"),
        ((3, 4), (16, 8), 8, r"elements that share bytes"),
        ((4,), (4,), 8, r"elements that share bytes"),  # stride below the item size
        ((3, 3, 3), (24, 16, 8), 8, r"elements that share bytes"),
        ((2, 3), (8,), 8, r"strides \(8,\) do not match the shape"),
    ],
)
def test_check_strides_refuses_what_cannot_be_copied(shape, strides, itemsize, pattern):
    with pytest.raises(ShapeError, match=pattern):
        check_strides(shape, strides, itemsize, "x")


def test_check_strides_finds_overlap_in_interleaved_two_d_layouts_exactly():
    # Rows 200 bytes apart, elements 12 apart: rows interleave (a row spans 204 bytes)
    # but no two float32 elements share a byte.
    assert check_strides((5, 17), (200, 12), 4, "x") == (200, 12)
    # Rows 20 bytes apart with elements 8 apart: row 1's first element (20) falls
    # inside row 0's third (16..24).
    with pytest.raises(ShapeError):
        check_strides((3, 4), (20, 8), 8, "x")
    # Fine-grained against brute force on small layouts.
    rng = np.random.default_rng(0)
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(2, 6, size=2))
        strides = tuple(int(s) for s in rng.integers(1, 40, size=2))
        addresses = np.sort(
            np.add.outer(
                np.arange(shape[0]) * strides[0], np.arange(shape[1]) * strides[1]
            ).ravel()
        )
        overlapping = bool(np.any(np.diff(addresses) < 4))
        if overlapping:
            with pytest.raises(ShapeError):
                check_strides(shape, strides, 4, "x")
        else:
            assert check_strides(shape, strides, 4, "x") is not None


def test_extent_spans_first_to_last_element():
    tile = PARENT[2:6, 1:4]
    assert extent(tile.shape, (80, 8), 8) == 3 * 80 + 2 * 8 + 8
    assert extent((4, 3), None, 8) == 96
    assert extent((0, 3), (80, 8), 8) == 0
    assert dense_strides((4, 3, 2), 8) == (48, 16, 8)


def test_pitched_copy_of_a_tile_is_one_two_d_copy():
    pieces = pitched((2048, 512), None, (32768, 8), 8)
    assert pieces.copies == 1
    assert (pieces.width, pieces.height) == (4096, 2048)
    assert (pieces.dst_pitch, pieces.src_pitch) == (4096, 32768)
    assert list(pieces.offsets()) == [(0, 0)]


def test_pitched_merges_contiguous_dimensions_and_loops_over_planes():
    rows = np.zeros((6, 8, 10))[1:4, 2:7, :]  # whole rows: one run per plane
    merged = pitched(rows.shape, None, rows.strides, 8)
    assert (merged.copies, merged.width, merged.height) == (1, 400, 3)
    assert (merged.dst_pitch, merged.src_pitch) == (400, 640)
    block = np.zeros((6, 8, 10))[1:4, 2:7, 1:9]  # a 3-D block: one per plane
    pieces = pitched(block.shape, None, block.strides, 8)
    assert (pieces.copies, pieces.width, pieces.height) == (3, 64, 5)
    assert list(pieces.offsets()) == [(0, 0), (320, 640), (640, 1280)]
    dense = pitched((4, 5), None, None, 8)  # C order on both sides: one run
    assert (dense.copies, dense.width, dense.height) == (1, 160, 1)


def test_pitched_copies_element_by_element_when_the_last_axis_steps():
    pieces = pitched((3, 4), None, (80, 24), 8)
    assert (pieces.width, pieces.height) == (8, 4)
    assert (pieces.dst_pitch, pieces.src_pitch) == (8, 24)
    assert list(pieces.offsets()) == [(0, 0), (32, 80), (64, 160)]


@pytest.mark.parametrize("seed", range(40))
def test_pitched_pieces_move_exactly_the_elements(seed):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    parent = np.arange(float(np.prod([9] * ndim))).reshape([9] * ndim)
    index = tuple(
        slice(int(rng.integers(0, 2)), None, int(rng.integers(1, 4))) for _ in range(ndim)
    )
    view = parent[index]
    dst = np.full(view.shape, -1.0)
    pieces = pitched(view.shape, None, view.strides, 8)
    source = parent.view(np.uint8).reshape(-1)
    target = dst.view(np.uint8).reshape(-1)
    base = view.__array_interface__["data"][0] - parent.__array_interface__["data"][0]
    for dst_offset, src_offset in pieces.offsets():
        for row in range(pieces.height):
            start = base + src_offset + row * pieces.src_pitch
            at = dst_offset + row * pieces.dst_pitch
            target[at : at + pieces.width] = source[start : start + pieces.width]
    np.testing.assert_array_equal(dst, view)


def test_regions_overlap_is_exact_for_interleaved_tiles():
    matrix = np.zeros((8, 8))
    tiles = [matrix[i : i + 4, j : j + 4] for i in (0, 4) for j in (0, 4)]
    regions = [region(*_layout(t)) for t in tiles]
    for a in range(4):
        for b in range(4):
            assert regions_overlap(regions[a], regions[b]) == (a == b)
    shifted = region(*_layout(matrix[2:6, 2:6]))
    assert all(regions_overlap(shifted, r) for r in regions)
    rows = np.zeros((6, 4))
    even, odd = region(*_layout(rows[::2])), region(*_layout(rows[1::2]))
    assert not regions_overlap(even, odd)
    whole = region(rows.__array_interface__["data"][0], (rows.nbytes,), None, 1)
    assert regions_overlap(whole, odd)
