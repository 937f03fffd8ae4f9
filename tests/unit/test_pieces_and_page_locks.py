"""Page-locking in pieces: the pieces, the emulated model of the driver's
registrations, and the thread of the pins (no backend: a stand-in records calls)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from stflow._pin_pieces import PiecePins, piece_bounds
from stflow.errors import HostPinningError
from stflow.backends._page_locks import PageLocks


def _pinning_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stflow-pin-pieces"]


@pytest.mark.parametrize("ptr", [4096 * 7, 4096 * 7 + 16, 4096 * 8 - 8])
@pytest.mark.parametrize("nbytes, piece", [(1, 4096), (4096, 4096), (5000, 4096),
                                           (100_000, 4096), (100_000, 10_000),
                                           (100_000, 1), (1 << 20, 1 << 18)])
def test_pieces_are_page_aligned_disjoint_and_cover_the_range(ptr, nbytes, piece):
    page = 4096
    bounds = piece_bounds(ptr, nbytes, piece, page)
    assert bounds[0][0] <= ptr and bounds[-1][1] >= ptr + nbytes
    assert bounds[0][0] > ptr - page and bounds[-1][1] < ptr + nbytes + page
    for (start, end), (after, _) in zip(bounds, bounds[1:]):
        assert end == after                          # consecutive: nothing left out
    for start, end in bounds:
        assert start % page == 0 and end % page == 0 and end > start
        assert end - start <= max(piece, page) + page - 1
    if len(bounds) > 2:                              # the edge pages on their own
        assert bounds[0][1] - bounds[0][0] == page
        assert bounds[-1][1] - bounds[-1][0] == page


def test_page_locks_model_the_driver():
    locks = PageLocks(page=64)
    memory = np.zeros(1024, dtype=np.uint8)
    base = memory.ctypes.data
    first = memory[(-base) % 64:][:200]              # starts on a page
    token = locks.register(first)
    start = first.ctypes.data
    assert token == start and locks.live() == [(start, start + 256)]
    assert locks.register(first[:100]) == token      # same start, inside: counted
    assert locks.registrations == 1
    neighbour = memory[(-base) % 64 + 250:][:100]     # shares the page at 192..256
    assert locks.register(neighbour) is None         # a page is registered once
    assert locks.covers(start, 200) and not locks.covers(start, 300)
    locks.unregister(token)
    assert locks.live() == [(start, start + 256)]    # one use left
    locks.unregister(token)
    assert locks.live() == [] and not locks.covers(start, 1)
    assert locks.register(neighbour) is not None     # the page is free again


class _Backend:
    """Registers as the emulated model does, optionally slowly or failing."""

    def __init__(self, delay: float = 0.0, fail_after: int | None = None) -> None:
        self.locks = PageLocks(page=64)
        self.delay = delay
        self.fail_after = fail_after
        self.order: list[int] = []

    def register_host(self, array):
        if self.fail_after is not None and len(self.order) >= self.fail_after:
            raise RuntimeError("the driver is gone")
        time.sleep(self.delay)
        token = self.locks.register(array)
        self.order.append(array.ctypes.data)
        return token

    def unregister_host(self, token):
        self.locks.unregister(token)

    def is_pinned(self, ptr, nbytes):
        return self.locks.covers(ptr, nbytes)


def _pieces(monkeypatch, backend, nbytes=64 * 40, piece=64 * 4):
    import stflow._pin_pieces as module
    monkeypatch.setattr(module, "PAGE", 64)
    memory = np.zeros(nbytes + 64, dtype=np.uint8)
    array = memory[(-memory.ctypes.data) % 64 + 8:][:nbytes - 16]
    return PiecePins(backend, array, piece), array


def test_pieces_wanted_by_a_copy_are_locked_first(monkeypatch):
    backend = _Backend(delay=0.01)
    pins, array = _pieces(monkeypatch, backend)
    assert len(pins.bounds) == 12 and pins.start()
    assert backend.order == [pins.bounds[0][0], pins.bounds[-1][0]]   # edges at once
    start, end = pins.bounds[9]
    pins.wait(start + 3, 10, "A[3,0]")               # waits for piece 9 only
    assert backend.locks.covers(start, end - start)
    position = backend.order.index(start)
    assert position <= 4, backend.order              # not behind pieces 2..8
    pins.wait(array.ctypes.data, array.nbytes, "A")  # then everything
    assert backend.locks.covers(array.ctypes.data, array.nbytes)
    assert sorted(backend.order) == [s for s, _ in pins.bounds]       # each once
    assert pins.release() is None
    assert backend.locks.live() == [] and not _pinning_threads()


def test_release_stops_the_thread_and_undoes_every_piece(monkeypatch):
    backend = _Backend(delay=0.02)
    pins, _ = _pieces(monkeypatch, backend)
    assert pins.start()
    time.sleep(0.03)
    assert pins.release() is None                    # while pieces remain
    assert not _pinning_threads()
    assert backend.locks.live() == []
    assert len(backend.order) < len(pins.bounds)     # it did stop early


def test_a_failure_of_the_thread_is_raised_by_the_next_wait(monkeypatch):
    backend = _Backend(fail_after=3)
    pins, array = _pieces(monkeypatch, backend)
    assert pins.start()
    with pytest.raises(HostPinningError, match="STFLOW_PIN_PIECE") as caught:
        pins.wait(array.ctypes.data, array.nbytes, "A[1,1]")
    assert "A[1,1]" in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert pins.release() is None                    # raised once, not again
    assert backend.locks.live() == [] and not _pinning_threads()


def test_a_failure_nobody_waited_for_is_returned_by_release(monkeypatch):
    backend = _Backend(fail_after=3)
    pins, _ = _pieces(monkeypatch, backend)
    assert pins.start()
    deadline = time.monotonic() + 5
    while pins.failure is None and time.monotonic() < deadline:
        time.sleep(0.001)
    failure = pins.release()
    assert isinstance(failure, HostPinningError)
    assert "the driver is gone" in str(failure)
    assert backend.locks.live() == []


def test_an_edge_page_registered_by_a_neighbour_counts_as_locked(monkeypatch):
    backend = _Backend()
    pins, array = _pieces(monkeypatch, backend)
    end = pins.bounds[-1][0]
    other = backend.locks.register(_view(array, end - array.ctypes.data, 8))
    assert other is not None
    assert pins.start()                              # refused, but page-locked
    pins.wait(array.ctypes.data, array.nbytes, "A")
    assert pins.release() is None
    assert backend.locks.live() == [(end, end + 64)]  # the neighbour's stays


def test_a_refused_edge_page_leaves_the_array_unpinned(monkeypatch):
    backend = _Backend()
    backend.locks.register = lambda array: None      # read-only memory, say
    pins, _ = _pieces(monkeypatch, backend)
    assert not pins.start()
    assert backend.locks.live() == [] and not _pinning_threads()


def _view(array, offset, nbytes):
    from stflow.backends._base import pointer_array
    return pointer_array(array.ctypes.data + offset, (nbytes,), np.dtype(np.uint8),
                         False, array)
