"""User host arrays page-locked in pieces (``STFLOW_PIN_PIECE``): one registration per
piece, and copies and fills whose host range spans two pieces cut at the boundary (the
driver refuses a copy spanning two registrations)."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf

PIECE = 1 << 16  # 64 KiB: a 128 x 128 matrix of float64 is two pieces


@pytest.fixture
def pieces(monkeypatch, cuda):
    monkeypatch.setenv("STFLOW_PIN_PIECE", str(PIECE))
    yield cuda
    cuda.settle_host_registrations()


def _sync(cuda, stream):
    cuda.synchronize(cuda.record(stream))


def _matrix(rows, cols, offset=2):
    """A float64 matrix starting ``offset`` elements into a larger buffer."""
    buffer = np.arange(float(rows * cols + offset + 7))
    return buffer[offset : offset + rows * cols].reshape(rows, cols)


def test_a_large_array_is_registered_in_pieces_and_unregistered(pieces):
    cuda = pieces
    a = _matrix(160, 160)
    token = cuda.register_host(a)
    assert token is not None
    parts = cuda._registered[token][3]
    assert len(parts) == -(-(a.ctypes.data % 4096 + a.nbytes) // PIECE)
    assert sum(size for _, size in parts) == a.nbytes
    assert cuda.is_pinned(a.ctypes.data, a.nbytes)
    assert set(cuda._cuts) >= {start for start, _ in parts[1:]}
    cuda.unregister_host(token)
    cuda.settle_host_registrations()
    assert not cuda.is_pinned(a.ctypes.data, a.nbytes)
    assert not set(cuda._cuts) & {start for start, _ in parts}


@pytest.mark.parametrize("tile", [(16, 16), (24, 40), (160, 160), (7, 160)])
def test_tiles_spanning_two_pieces_move_exactly_both_ways(pieces, stream, tile):
    cuda = pieces
    a = _matrix(160, 160)
    expected = a.copy()
    token = cuda.register_host(a)
    assert len(cuda._registered[token][3]) > 1
    try:
        mb, nb = tile
        for i in range(0, 160, mb):
            for j in range(0, 160, nb):
                view = a[i : i + mb, j : j + nb]
                shape = view.shape
                device = cuda.allocate(0, view.nbytes, stream, np.dtype(np.float64))
                cuda.copy_strided(
                    device.ptr, None, view.ctypes.data, view.strides, shape, 8, stream
                )
                back = np.full(shape, -1.0)
                cuda.copy(back.ctypes.data, device.ptr, back.nbytes, stream)
                _sync(cuda, stream)
                np.testing.assert_array_equal(back, expected[i : i + mb, j : j + nb])
                # and back into the matrix, negated, through the device
                negated = -back
                cuda.copy(device.ptr, negated.ctypes.data, negated.nbytes, stream)
                cuda.copy_strided(
                    view.ctypes.data, view.strides, device.ptr, None, shape, 8, stream
                )
                _sync(cuda, stream)
                cuda.free(device, stream)
        np.testing.assert_array_equal(a, -expected)
    finally:
        cuda.unregister_host(token)


def test_contiguous_copies_and_fills_across_pieces(pieces, stream):
    cuda = pieces
    a = _matrix(1, 40000)[0]  # 320 000 bytes: five pieces
    token = cuda.register_host(a)
    assert len(cuda._registered[token][3]) >= 5
    try:
        device = cuda.allocate(0, a.nbytes, stream, np.dtype(np.float64))
        cuda.copy(device.ptr, a.ctypes.data, a.nbytes, stream)
        cuda.fill(a.ctypes.data, a.nbytes, np.float64(3.5).tobytes(), stream)
        _sync(cuda, stream)
        assert (a == 3.5).all()
        cuda.copy(a.ctypes.data, device.ptr, a.nbytes, stream)
        _sync(cuda, stream)
        np.testing.assert_array_equal(a, _matrix(1, 40000)[0])
        cuda.free(device, stream)
    finally:
        cuda.unregister_host(token)


@pytest.mark.parametrize("use_graph", [False, True])
def test_tiles_of_a_matrix_in_pieces_in_a_context(pieces, cupy, use_graph):
    n, nb = 200, 48
    parent = np.arange(float((n + 3) * n)).reshape(n + 3, n)
    a = parent[1 : n + 1]  # rows start 8 * n bytes in: not page-aligned
    outside = parent.copy()
    with stf.context(backend="cuda", use_graph=use_graph) as ctx:
        grid = stf.tiles(ctx, a, nb)
        for (i, j), tile in grid:
            with ctx.task(tile.rw()) as t:
                t.run(lambda xp, x, k=i * 10 + j: x.__imul__(2.0).__iadd__(k))
    expected = outside.copy()
    for i in range(-(-n // nb)):
        for j in range(-(-n // nb)):
            block = expected[1 + i * nb : 1 + min(n, (i + 1) * nb), j * nb : (j + 1) * nb]
            block *= 2.0
            block += i * 10 + j
    np.testing.assert_array_equal(parent, expected)  # rows 0 and n + 1 untouched
