"""Host memory page-locked in pieces, and copies kept within one piece.

Page-locking a large user array (``cuMemHostRegister``) costs about 28 ms per GiB on
one thread, paid before its first transfer. Locked as several registrations, one per
piece, the pieces are locked by several threads at once. The pieces are disjoint and
page-aligned (the driver refuses two registrations of one page), and together cover
the array exactly: :func:`pieces`.

The driver refuses a copy whose host range spans two registrations
(``CUDA_ERROR_INVALID_VALUE`` for a pitched copy), and a tile of a matrix registered in
pieces may span two: a NumPy matrix's data starts 16 bytes into a page, so no page
boundary falls between two block rows. :func:`split_rows` cuts such a copy at the
pieces' boundaries: the rows wholly on one side stay 2-D copies, a row crossing a
boundary becomes one 1-D copy on each side. Pure functions, unit-tested without a GPU
(``tests/unit/test_registrations.py``); ``_cuda_memory.CudaMemory`` uses them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

__all__ = ["cuts_within", "pieces", "split_range", "split_rows"]


def pieces(ptr: int, nbytes: int, piece: int, page: int) -> list[tuple[int, int]]:
    """``(start, size)`` of the registrations covering ``[ptr, ptr + nbytes)``: about
    ``piece`` bytes each, every boundary between two of them on a page boundary, the
    first starting at ``ptr`` and the last ending at ``ptr + nbytes``."""
    if nbytes <= 0:
        return []
    piece = max(page, piece - piece % page)
    end = ptr + nbytes
    out = []
    start = ptr
    boundary = ptr - ptr % page + piece
    while boundary < end:
        out.append((start, boundary - start))
        start = boundary
        boundary += piece
    out.append((start, end - start))
    return out


def cuts_within(cuts: Sequence[int], lo: int, hi: int) -> list[int]:
    """The addresses of the sorted ``cuts`` strictly inside ``(lo, hi)``."""
    first = bisect.bisect_right(cuts, lo)
    last = bisect.bisect_left(cuts, hi, first)
    return list(cuts[first:last])


def split_range(ptr: int, nbytes: int, cuts: Sequence[int]) -> list[tuple[int, int]]:
    """``(offset, size)`` of the runs of ``[ptr, ptr + nbytes)`` between the sorted
    ``cuts`` (boundaries of registrations)."""
    out = []
    start = 0
    for cut in cuts_within(cuts, ptr, ptr + nbytes):
        out.append((start, cut - ptr - start))
        start = cut - ptr
    out.append((start, nbytes - start))
    return out


def split_rows(
    base: int, pitch: int, width: int, height: int, cuts: Sequence[int]
) -> list[tuple[int, int, int, int]]:
    """Copies of a 2-D region none of which spans a cut.

    The region is ``height`` rows of ``width`` bytes, row ``r`` at ``base + r *
    pitch`` (``pitch >= width``); ``cuts`` are the sorted addresses where a
    registration starts. Returns ``(row, rows, offset, size)`` tuples: ``rows``
    consecutive rows from ``row``, bytes ``[offset, offset + size)`` of each, in
    address order, which together are the region exactly. Rows between cuts stay
    together; a row a cut falls inside is split at it.
    """
    inside = cuts_within(cuts, base, base + (height - 1) * pitch + width)
    if not inside:
        return [(0, height, 0, width)]
    starts = {0}  # rows beginning a run of whole rows
    split: dict[int, list[int]] = {}  # row -> offsets where it is cut
    for cut in inside:
        row, offset = divmod(cut - base, pitch)
        if offset == 0:
            starts.add(row)
        elif offset >= width:  # in the gap after the row's bytes
            starts.add(row + 1)
        else:
            split.setdefault(row, []).append(offset)
            starts.update((row, row + 1))
    out = []
    bounds = sorted(s for s in starts if s < height) + [height]
    for first, stop in zip(bounds, bounds[1:]):
        offsets = split.get(first)
        if offsets is None:
            out.append((first, stop - first, 0, width))
            continue
        edges = [0, *offsets, width]  # a split row is a run of its own
        out.extend((first, 1, a, b - a) for a, b in zip(edges, edges[1:]))
    return out
