"""How the distributed layer cuts a value into messages (stflow._dist.staging)."""

from __future__ import annotations

import ctypes
import threading

import pytest

from stflow._dist.staging import BufferPool, piece_bounds, piece_size, send_limit
from stflow.backends._base import HOST


@pytest.mark.parametrize(
    "nbytes, piece, expected",
    [
        (0, 4, [(0, 0)]),  # an empty value is one empty message
        (4, 4, [(0, 4)]),
        (5, 4, [(0, 4), (4, 5)]),
        (12, 4, [(0, 4), (4, 8), (8, 12)]),
    ],
)
def test_piece_bounds_cover_the_value_once_in_order(nbytes, piece, expected):
    assert piece_bounds(nbytes, piece) == expected


def test_piece_bounds_of_random_sizes_tile_the_bytes():
    for nbytes in range(0, 200, 7):
        for piece in (1, 3, 8, 64, 1000):
            bounds = piece_bounds(nbytes, piece)
            assert bounds[0][0] == 0 and bounds[-1][1] == nbytes
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            assert all(0 < stop - start <= piece for start, stop in bounds) or nbytes == 0


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
    from stflow._dist import staging as _staging

    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "1")
    assert _staging.device_direct(False) and _staging.device_direct(True)
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "0")
    assert not _staging.device_direct(True)
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "yes")
    with pytest.raises(ValueError, match="STFLOW_MPI_CUDA_AWARE must be 1"):
        _staging.device_direct(True)
    monkeypatch.delenv("STFLOW_MPI_CUDA_AWARE")
    monkeypatch.setattr(_staging, "mpi_cuda_aware", lambda: True)
    assert _staging.device_direct(True)  # GPU memory: MPI is asked
    assert not _staging.device_direct(False)  # emulated: only when set


def test_mpi_is_asked_through_mpi4py_when_it_can_answer(monkeypatch):
    MPI = pytest.importorskip("mpi4py.MPI")
    from stflow._dist.staging import mpi_cuda_aware

    answer = mpi_cuda_aware()  # Open MPI's extension, or False
    assert answer in (True, False)
    monkeypatch.setattr(MPI, "Query_cuda_support", lambda: True, raising=False)
    assert mpi_cuda_aware() is True


# -- the pool of message buffers ----------------------------------------------------


@pytest.fixture
def emulated():
    from stflow.backends import get_backend

    backend = get_backend("emulated")
    stream = backend.create_stream(0)
    yield backend, stream
    backend.destroy_stream(stream)


def _given_back_busy(pool, backend, stream):
    """A buffer of ``pool`` given back after an event that completes only once the
    returned gate is set (the stream is held by a host function until then)."""
    busy = pool.take(4096)
    gate = threading.Event()
    backend.launch_host_func(stream, lambda: gate.wait(10))
    event = backend.record(stream)
    pool.give(busy, after=event)
    return busy, event, gate


def test_a_pooled_buffer_is_reused_by_size_rounded_to_pages(emulated):
    backend, _ = emulated
    pool = BufferPool(backend, HOST, keep=1 << 20)
    first = pool.take(100)
    assert first.nbytes == 4096 and first.device == HOST
    pool.give(first)
    assert pool.take(4000) is first  # the same page-sized buffer
    second = pool.take(4000)
    assert second is not first  # taken: a new one
    third = pool.take(5000)
    assert third.nbytes == 8192
    empty = pool.take(0)
    assert empty.nbytes == 0 and empty.ptr == 0
    pool.give(empty)  # nothing to keep
    assert pool.cached == 0
    for taken in (first, second, third):
        pool.give(taken)
    assert pool.cached == 4096 + 4096 + 8192
    pool.close()


def test_a_buffer_comes_back_only_after_its_last_work(emulated):
    backend, stream = emulated
    pool = BufferPool(backend, HOST, keep=1 << 20)
    busy, event, gate = _given_back_busy(pool, backend, stream)
    other = pool.take(8192)
    assert other is not busy  # another size: a new buffer
    pool.give(other)
    threading.Timer(0.05, gate.set).start()
    again = pool.take(4096)  # the same size: waits for it
    assert again is busy and backend.query(event)
    assert pool.made == 2
    pool.give(again)
    pool.close()


def test_the_pool_keeps_at_most_its_bound_and_frees_the_rest(emulated):
    backend, _ = emulated
    pool = BufferPool(backend, 0, keep=8192)  # device 0's memory
    buffers = [pool.take(4096) for _ in range(3)]
    assert all(backend.locate(b.ptr) == 0 for b in buffers)
    for b in buffers:
        pool.give(b)
    assert pool.cached == 8192  # the third was freed
    assert backend.locate(buffers[2].ptr) != 0
    pool.close()
    assert pool.cached == 0 and not pool.spare
    assert all(backend.locate(b.ptr) != 0 for b in buffers)


def test_closing_the_pool_waits_for_the_work_still_using_a_buffer(emulated):
    backend, stream = emulated
    pool = BufferPool(backend, HOST, keep=1 << 20)
    _, event, gate = _given_back_busy(pool, backend, stream)
    threading.Timer(0.05, gate.set).start()
    pool.close()  # returns once the stream ran
    assert backend.query(event) and not pool.pending


@pytest.mark.parametrize("buffers", [None, "1", "2", "3"])
def test_a_sender_waits_for_its_oldest_send_rather_than_allocate_more(
    emulated, monkeypatch, buffers
):
    """A sender allocates buffers of a size while fewer than send_buffers() of them
    are in flight (BUFFERS_PER_SIZE, or STFLOW_MPI_SEND_BUFFERS), then waits for the
    oldest send rather than allocate another (page-locked memory costs about as much
    to allocate as to send); other sizes and spare buffers never make it wait."""
    import numpy as np

    from stflow._dist.staging import BUFFERS_PER_SIZE, PinnedStaging

    if buffers is None:
        monkeypatch.delenv("STFLOW_MPI_SEND_BUFFERS", raising=False)
    else:
        monkeypatch.setenv("STFLOW_MPI_SEND_BUFFERS", buffers)
    count = BUFFERS_PER_SIZE if buffers is None else int(buffers)
    backend, _ = emulated
    staging = PinnedStaging(backend, keep=1 << 20)
    assert staging.buffers == count
    bounds = [(0, 8000)]
    in_flight = []
    for _ in range(count):
        assert not staging.awaits_buffer(8000, in_flight)
        in_flight.append(staging.buffer((1000,), np.float64, bounds))
    assert staging.awaits_buffer(8000, in_flight)  # enough in flight: wait
    assert staging.awaits_buffer(5000, in_flight)  # the same page count
    assert not staging.awaits_buffer(9000, in_flight)  # another size
    staging.release(in_flight.pop(0))  # the oldest was received
    assert not staging.awaits_buffer(8000, in_flight)  # its buffer is spare
    assert staging.pool.made == count
    for message in in_flight:
        staging.release(message)
    staging.close()


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5"])
def test_a_bad_send_buffer_count_names_the_variable(monkeypatch, text):
    from stflow._dist.staging import send_buffers

    monkeypatch.setenv("STFLOW_MPI_SEND_BUFFERS", text)
    with pytest.raises(
        ValueError,
        match="STFLOW_MPI_SEND_BUFFERS must be a positive "
        "number of buffers per message size",
    ):
        send_buffers()


def test_device_messages_on_a_gpu_are_cuda_array_interface_buffers(emulated):
    """Where device memory is a GPU's, MPI gets each piece as a CUDA Array Interface
    object over the pooled device buffer (a CUDA-aware MPI reads those); elsewhere
    NumPy arrays over the same bytes."""
    import numpy as np

    from stflow._dist.staging import DirectStaging, PinnedStaging

    backend, _ = emulated

    class OnAGpu:  # the emulated backend, claiming GPU memory
        gpu_memory = True

        def __getattr__(self, name):
            return getattr(backend, name)

    bounds = [(0, 16), (16, 24)]
    direct = DirectStaging(OnAGpu(), 0, keep=1 << 20)
    message = direct.buffer((3,), np.float64, bounds)
    base = message.allocation.ptr
    assert [
        (
            p.__cuda_array_interface__["data"][0] - base,
            p.__cuda_array_interface__["shape"],
        )
        for p in message.pieces
    ] == [(0, (16,)), (16, (8,))]
    direct.release(message)
    direct.close()
    pinned = PinnedStaging(OnAGpu(), keep=1 << 20)  # host memory: NumPy arrays
    message = pinned.buffer((3,), np.float64, bounds)
    message.pieces[0][...] = np.array([1.0, 2.0]).view(np.uint8)
    message.pieces[1][...] = np.array([3.0]).view(np.uint8)
    assert [p.ctypes.data - message.allocation.ptr for p in message.pieces] == [0, 16]
    values = np.frombuffer(
        (ctypes.c_char * 24).from_address(message.allocation.ptr), np.float64
    )
    np.testing.assert_array_equal(values, [1.0, 2.0, 3.0])  # one buffer, in order
    pinned.release(message)
    again = pinned.buffer((3,), np.float64, bounds)  # the same buffer and
    assert again.allocation is message.allocation  # the same byte view
    assert again.pieces[0].base is message.pieces[0].base
    pinned.release(again)
    pinned.close()


def test_send_ahead_is_off_unless_asked(monkeypatch):
    from stflow._dist.exchanges import _send_ahead

    monkeypatch.delenv("STFLOW_MPI_SEND_AHEAD", raising=False)
    assert _send_ahead() is False
    monkeypatch.setenv("STFLOW_MPI_SEND_AHEAD", "1")
    assert _send_ahead() is True
    monkeypatch.setenv("STFLOW_MPI_SEND_AHEAD", "yes")
    with pytest.raises(ValueError, match="STFLOW_MPI_SEND_AHEAD must be 1"):
        _send_ahead()
