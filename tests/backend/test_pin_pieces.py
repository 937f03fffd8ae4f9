"""STFLOW_PIN_PIECE: a tiled array page-locked in pieces as its tiles are first
needed. On the emulated backend the driver's registrations are modelled
(``backends/_page_locks.py``) and traced, so the order of registrations and copies
is checked; on CUDA the results and the unregistering are."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import stflow as stf
from stflow.backends import get_backend
from stflow.testing import check_program, generate_program

from helpers.bodies import add_to

PAGE = 64
"""The page of the emulated model in these tests: small arrays get many pieces."""


@pytest.fixture
def small_pages(monkeypatch):
    """The emulated model and the pieces with 64-byte pages, its trace on."""
    import stflow._pin_pieces as pieces
    locks = get_backend("emulated").page_locks
    monkeypatch.setattr(pieces, "PAGE", PAGE)
    monkeypatch.setattr(locks, "page", PAGE)
    monkeypatch.setattr(locks, "trace", [])
    return locks


def _pinning_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stflow-pin-pieces"]


def _negated(backend, A, nb):
    with stf.context(backend=backend) as ctx:
        grid = stf.tiles(ctx, A, nb, name="A")
        for (i, j), tile in grid:
            device = (i + j) % get_backend(backend).device_count
            with ctx.task(stf.exec_place.device(device), tile.rw()) as t:
                add_to(t, 0, 0, -2.0)                # x += -2 x


@pytest.mark.parametrize("piece", ["0", "4096", "64KiB"])
def test_results_are_exact_whole_or_in_pieces(backend, monkeypatch, piece):
    monkeypatch.setenv("STFLOW_PIN_PIECE", piece)
    A = np.random.default_rng(1).standard_normal((300, 260))
    expected = -A
    _negated(backend, A, (64, 48))
    np.testing.assert_array_equal(A, expected)
    assert not _pinning_threads()
    if backend == "cuda":
        cuda = get_backend("cuda")
        cuda.settle_host_registrations()              # unregistering is deferred
        assert not cuda.is_pinned(A.ctypes.data, A.nbytes)
    else:
        assert get_backend("emulated").page_locks.live() == []


def _events_on(trace, start, end):
    return [(kind, a, b) for kind, a, b in trace if a < end and start < b]


def test_pieces_are_disjoint_pages_and_each_copy_follows_them(small_pages,
                                                              monkeypatch):
    monkeypatch.setenv("STFLOW_PIN_PIECE", str(4 * PAGE))
    register = small_pages.register

    def slowly(array):                                # the thread lags behind
        time.sleep(0.002)
        return register(array)

    monkeypatch.setattr(small_pages, "register", slowly)
    A = np.arange(40.0 * 24).reshape(40, 24)          # 7680 bytes: 30 pages
    expected = -A
    _negated("emulated", A, (8, 8))
    np.testing.assert_array_equal(A, expected)
    start, end = A.ctypes.data, A.ctypes.data + A.nbytes
    events = _events_on(small_pages.trace, start, end)
    registered = [(a, b) for kind, a, b in events if kind == "register"]
    assert len(registered) >= 8                       # in pieces
    for a, b in registered:
        assert a % PAGE == 0 and b % PAGE == 0
    ordered = sorted(registered)
    assert all(b <= c for (_, b), (c, _) in zip(ordered, ordered[1:]))   # disjoint
    assert ordered[0][0] <= start and ordered[-1][1] >= end               # covering
    live: list[tuple[int, int]] = []
    copies = 0
    for kind, a, b in events:
        if kind == "register":
            live.append((a, b))
        elif kind == "unregister":
            live.remove((a, b))
        else:
            copies += 1
            covered = sum(min(b, hi) - max(a, lo) for lo, hi in live
                          if lo < b and a < hi)
            assert covered == b - a, f"copy of 0x{a:x}..0x{b:x} before its pieces"
    assert copies >= 2 * 15                           # to the devices and back
    assert live == [] and small_pages.live() == []
    assert not _pinning_threads()


def test_device_work_on_host_data_waits_for_its_pieces(small_pages, monkeypatch):
    monkeypatch.setenv("STFLOW_PIN_PIECE", str(2 * PAGE))
    register = small_pages.register
    monkeypatch.setattr(small_pages, "register",
                        lambda array: (time.sleep(0.002), register(array))[1])
    A = np.arange(64.0 * 16).reshape(64, 16)
    covered = []
    with stf.context(backend="emulated") as ctx:
        grid = stf.tiles(ctx, A, 8)
        last = grid[grid.shape[0] - 1, 1]
        with ctx.task(stf.exec_place.device(0),
                      last.read(stf.data_place.host())) as t:
            (view,) = t.views()
            block = np.asarray(view)
            covered.append(small_pages.covers(block.ctypes.data,
                                              block[-1, -1:].ctypes.data + 8
                                              - block.ctypes.data))
    assert covered == [True]
    assert small_pages.live() == [] and not _pinning_threads()


def test_nothing_stays_pinned_after_an_exception(small_pages, monkeypatch):
    monkeypatch.setenv("STFLOW_PIN_PIECE", str(4 * PAGE))
    A = np.ones((64, 32))
    with pytest.raises(ZeroDivisionError):
        with stf.context(backend="emulated") as ctx:
            grid = stf.tiles(ctx, A, 16)
            with ctx.task(stf.exec_place.device(0), grid[0, 0].rw()) as t:
                add_to(t, 0, 0, 1.0)
            assert small_pages.live() != []           # pinned meanwhile
            1 / 0
    assert small_pages.live() == []
    assert not _pinning_threads()
    np.testing.assert_array_equal(A[:16, :16], 2.0)   # finalized on the way out


def test_a_failed_piece_is_a_clear_error_and_nothing_stays_pinned(small_pages,
                                                                  monkeypatch):
    from stflow.errors import HostPinningError
    monkeypatch.setenv("STFLOW_PIN_PIECE", str(4 * PAGE))
    register = small_pages.register
    calls = []

    def failing(array):
        calls.append(array)
        if len(calls) > 3:
            raise OSError("ENOMEM: cannot lock more memory")
        return register(array)

    monkeypatch.setattr(small_pages, "register", failing)
    A = np.ones((64, 32))
    ctx = stf.context(backend="emulated")
    grid = stf.tiles(ctx, A, 16)
    with pytest.raises(HostPinningError, match=r"tile\[3,0\].*STFLOW_PIN_PIECE"):
        with ctx.task(stf.exec_place.device(0), grid[3, 0].rw()) as t:
            add_to(t, 0, 0, 1.0)
    ctx.finalize()                                    # raised once: not again
    assert small_pages.live() == [] and not _pinning_threads()
    np.testing.assert_array_equal(A, 1.0)             # the task never ran


@pytest.mark.parametrize("seed", [3, 17, 42, 101, 256, 777])
def test_random_programs_with_strided_parents_in_pieces(small_pages, monkeypatch,
                                                        seed):
    """The differential test's programs (strided views of parent arrays among
    them) with every array beyond two small pages page-locked in pieces."""
    monkeypatch.setenv("STFLOW_PIN_PIECE", str(2 * PAGE))
    program = generate_program(seed, get_backend("emulated").device_count)
    check_program(program, "emulated")
    registered = sum(kind == "register" for kind, _, _ in small_pages.trace)
    assert registered > len(program.data)             # pieces, not whole arrays
    assert small_pages.live() == [] and not _pinning_threads()
