"""Pieces of a host registration and copies kept within one piece (pure functions of
``stflow.backends._registrations``)."""

from __future__ import annotations

import random

import pytest

from stflow.backends._registrations import pieces, split_range, split_rows

PAGE = 4096


@pytest.mark.parametrize("offset", [0, 16, 4095])
@pytest.mark.parametrize("nbytes", [1, 4096, 10 * 4096 + 7, (1 << 22) + 333])
@pytest.mark.parametrize("piece", [4096, 3 * 4096, 1 << 20, 5000])
def test_pieces_are_disjoint_page_aligned_and_cover_the_array(offset, nbytes, piece):
    ptr = (1 << 30) + offset
    parts = pieces(ptr, nbytes, piece, PAGE)
    assert parts[0][0] == ptr
    assert sum(size for _, size in parts) == nbytes
    for (start, size), (following, _) in zip(parts, parts[1:]):
        assert size > 0 and start + size == following  # contiguous, in order
        assert following % PAGE == 0  # no page in two registrations
    assert parts[-1][0] + parts[-1][1] == ptr + nbytes
    largest = max(PAGE, piece - piece % PAGE)
    assert all(size <= largest for _, size in parts)


def test_no_pieces_for_nothing():
    assert pieces(4096, 0, 1 << 20, PAGE) == []


def _spans(base, pitch, copy):
    row, rows, offset, size = copy
    first = base + row * pitch + offset
    return first, base + (row + rows - 1) * pitch + offset + size


def _bytes(base, pitch, copy):
    row, rows, offset, size = copy
    return {
        base + r * pitch + offset + b for r in range(row, row + rows) for b in range(size)
    }


@pytest.mark.parametrize("seed", range(300))
def test_split_rows_covers_the_region_exactly_and_no_copy_spans_a_cut(seed):
    rng = random.Random(seed)
    width = rng.randint(1, 40)
    pitch = width + rng.choice([0, 0, rng.randint(1, 30)])
    height = rng.randint(1, 12)
    base = rng.randint(0, 500)
    end = base + (height - 1) * pitch + width
    cuts = sorted(rng.sample(range(base - 20, end + 20), rng.randint(0, 6)))
    copies = split_rows(base, pitch, width, height, cuts)
    region = {base + r * pitch + b for r in range(height) for b in range(width)}
    seen: set[int] = set()
    for copy in copies:
        row, rows, offset, size = copy
        assert rows >= 1 and size >= 1 and offset + size <= width
        assert rows == 1 or (offset, size) == (0, width)  # 2-D copies are whole rows
        lo, hi = _spans(base, pitch, copy)
        assert not any(lo < cut < hi for cut in cuts)
        chunk = _bytes(base, pitch, copy)
        assert not chunk & seen
        seen |= chunk
    assert seen == region
    if not any(base < cut < end for cut in cuts):
        assert copies == [(0, height, 0, width)]


def test_a_tile_at_the_end_of_a_block_row_becomes_three_copies():
    # A 4 x 4 tile at the right edge of a 16-column matrix of 8-byte elements whose data
    # starts 16 bytes into a page; the registration boundary is 16 bytes before row 4.
    base, pitch = 16 + 12 * 8, 16 * 8
    cut = 4 * pitch  # page boundary: 16 bytes before the start of matrix row 4
    copies = split_rows(base, pitch, 32, 4, [cut])
    assert copies == [(0, 3, 0, 32), (3, 1, 0, 16), (3, 1, 16, 16)]


def test_a_cut_between_rows_splits_into_two_2d_copies():
    copies = split_rows(0, 100, 40, 10, [250])  # in the gap after row 2
    assert copies == [(0, 3, 0, 40), (3, 7, 0, 40)]
    assert split_rows(0, 100, 40, 10, [300]) == [(0, 3, 0, 40), (3, 7, 0, 40)]


def test_split_range():
    assert split_range(100, 50, []) == [(0, 50)]
    assert split_range(100, 50, [100, 150]) == [(0, 50)]
    assert split_range(100, 50, [90, 110, 120, 200]) == [(0, 10), (10, 10), (20, 30)]
