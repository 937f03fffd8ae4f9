"""How the distributed layer cuts a value into messages (stflow._staging)."""

from __future__ import annotations

import pytest

from stflow._staging import piece_bounds, piece_size, send_limit


@pytest.mark.parametrize("nbytes, piece, expected", [
    (0, 4, [(0, 0)]),                      # an empty value is one empty message
    (4, 4, [(0, 4)]),
    (5, 4, [(0, 4), (4, 5)]),
    (12, 4, [(0, 4), (4, 8), (8, 12)]),
])
def test_piece_bounds_cover_the_value_once_in_order(nbytes, piece, expected):
    assert piece_bounds(nbytes, piece) == expected


def test_piece_bounds_of_random_sizes_tile_the_bytes():
    for nbytes in range(0, 200, 7):
        for piece in (1, 3, 8, 64, 1000):
            bounds = piece_bounds(nbytes, piece)
            assert bounds[0][0] == 0 and bounds[-1][1] == nbytes
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            assert all(0 < stop - start <= piece for start, stop in bounds) \
                or nbytes == 0


def test_piece_size_defaults_to_4_mib_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv("STFLOW_MPI_PIECE", raising=False)
    assert piece_size() == 4 << 20
    monkeypatch.setenv("STFLOW_MPI_PIECE", "65536")
    assert piece_size() == 65536


@pytest.mark.parametrize("text", ["0", "-3", "4MiB", "1.5"])
def test_a_bad_piece_size_names_the_variable(monkeypatch, text):
    monkeypatch.setenv("STFLOW_MPI_PIECE", text)
    with pytest.raises(ValueError, match="STFLOW_MPI_PIECE must be a positive"):
        piece_size()


def test_the_send_limit_defaults_to_512_mib_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv("STFLOW_MPI_SEND_LIMIT", raising=False)
    assert send_limit() == 512 << 20
    monkeypatch.setenv("STFLOW_MPI_SEND_LIMIT", "1")
    assert send_limit() == 1
    monkeypatch.setenv("STFLOW_MPI_SEND_LIMIT", "lots")
    with pytest.raises(ValueError, match="STFLOW_MPI_SEND_LIMIT must be a positive"):
        send_limit()


def test_device_direct_follows_the_setting_then_asks_mpi(monkeypatch):
    from stflow import _staging
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "1")
    assert _staging.device_direct(False) and _staging.device_direct(True)
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "0")
    assert not _staging.device_direct(True)
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "yes")
    with pytest.raises(ValueError, match="STFLOW_MPI_CUDA_AWARE must be 1"):
        _staging.device_direct(True)
    monkeypatch.delenv("STFLOW_MPI_CUDA_AWARE")
    monkeypatch.setattr(_staging, "mpi_cuda_aware", lambda: True)
    assert _staging.device_direct(True)           # GPU memory: MPI is asked
    assert not _staging.device_direct(False)      # emulated: only when set


def test_mpi_is_asked_through_mpi4py_when_it_can_answer(monkeypatch):
    MPI = pytest.importorskip("mpi4py.MPI")
    from stflow._staging import mpi_cuda_aware
    answer = mpi_cuda_aware()                 # Open MPI's extension, or False
    assert answer in (True, False)
    monkeypatch.setattr(MPI, "Query_cuda_support", lambda: True, raising=False)
    assert mpi_cuda_aware() is True
