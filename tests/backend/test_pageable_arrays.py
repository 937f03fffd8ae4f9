"""User host arrays that are not page-locked (``STFLOW_PIN_LIMIT``): their copies are
staged, host tasks work in the user's own buffer, and nothing changes in the results.

On CUDA the copies go through the pinned chunks of ``backends/_cuda_staging.py``; the
emulated backend plays the same part when told that host instances must be page-locked
(``pinned_host_required``, as on CUDA) and reads a source the runtime declares ready at
once (``Backend.copy``'s ``source_ready``), so that a wrong claim shows as a wrong
result in the differential programs below.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import stflow as stf
from stflow._core import config
from stflow.backends import get_backend
from stflow.backends._base import USER_PAGEABLE
from stflow.backends._cuda_staging import CHUNK, bands
from stflow.errors import ScopeError
from stflow.testing import check_program, check_scoped_program, generate_program

SEEDS = int(os.environ.get("STFLOW_DIFFERENTIAL_SEEDS", "1000"))
CHUNK_OF_SEEDS = 100


@pytest.fixture
def pageable(backend, monkeypatch):
    """Every user host array stays pageable (a limit of 0 bytes)."""
    monkeypatch.setenv("STFLOW_PIN_LIMIT", "0")
    if backend == "emulated":
        monkeypatch.setattr(get_backend("emulated"), "pinned_host_required", True)
    return backend


@pytest.mark.parametrize("mode", ["stream", "graph", "scopes", "tight"])
@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 300), CHUNK_OF_SEEDS),
    ids=lambda first: f"seeds{first}-{first + CHUNK_OF_SEEDS - 1}",
)
def test_random_programs_with_pageable_user_arrays_match_the_oracle(
    pageable, mode, first
):
    """Random programs (strided views of shared parents among them) whose user arrays
    all stay pageable, in stream and graph mode, in scopes and under a tight budget
    (evictions write back into the pageable arrays)."""
    backend = pageable
    devices = get_backend(backend).device_count
    failures = []
    for seed in range(first, first + CHUNK_OF_SEEDS):
        try:
            if mode == "scopes":
                check_scoped_program(seed, devices, backend)
            else:
                check_program(
                    generate_program(seed, devices),
                    backend,
                    use_graph=mode == "graph",
                    memory_budget="tight" if mode == "tight" else None,
                )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:3])


def test_host_callbacks_work_in_the_users_own_buffer(pageable):
    """A pageable array's host callbacks (``host_launch``) get the array itself (no
    page-locked copy of the runtime's); device tasks get their copies staged, host
    tasks (whose stream may reach the data from a device) a page-locked instance,
    and the tiles written back touch nothing between them."""
    parent = np.full((12, 10), -7.25)
    parent[:8, :8] = np.arange(64.0).reshape(8, 8)
    expected = parent.copy()
    expected[:8, :8] = ((np.arange(64.0).reshape(8, 8) * 2 + 1) * 3 + 1) * 5
    seen = []

    def add_one(tile):
        seen.append(tile.__array_interface__["data"][0])
        tile += 1

    with stf.context(backend=pageable) as ctx:
        grid = stf.tiles(ctx, parent[:8, :8], 4)
        for _, tile in grid:
            with ctx.task(stf.exec_place.device(0), tile.rw()) as t:
                t.run(lambda xp, a: xp.multiply(a, 2, out=a))
            ctx.host_launch(tile.rw(), fn=add_one)
            with ctx.task(stf.exec_place.device(0), tile.rw()) as t:
                t.run(lambda xp, a: xp.multiply(a, 3, out=a))
            with ctx.task(stf.exec_place.host(), tile.rw()) as t:
                t.run(lambda xp, a: xp.add(a, 1, out=a))
            with ctx.task(stf.exec_place.device(0), tile.rw()) as t:
                t.run(lambda xp, a: xp.multiply(a, 5, out=a))
    np.testing.assert_array_equal(parent, expected)
    base = parent.__array_interface__["data"][0]
    starts = sorted(base + (r * 10 + c) * 8 for r in (0, 4) for c in (0, 4))
    assert sorted(seen) == starts  # the tiles where they live in the user's array


def test_device_work_on_host_memory_gets_a_page_locked_instance(pageable):
    """A device task naming the host as its data place needs memory the device
    reaches: the runtime's own page-locked instance, copied from the pageable array
    and written back into it."""
    x = np.arange(16.0)
    with stf.context(backend=pageable) as ctx:
        lx = ctx.logical_data(x, name="x")
        state = lx._state
        assert state.reference.device == USER_PAGEABLE
        with ctx.task(stf.exec_place.device(0), lx.rw(stf.data_place.host())) as t:
            t.run(lambda xp, a: xp.add(a, 1, out=a))
        assert (
            state.instances[stf.data_place.host()._device].allocation.ptr
            != (x.__array_interface__["data"][0])
        )
    np.testing.assert_array_equal(x, np.arange(16.0) + 1)


def test_arrays_up_to_the_limit_are_page_locked(backend, monkeypatch):
    """``STFLOW_PIN_LIMIT``: arrays above it stay pageable, the others are
    page-locked (where the backend page-locks at all)."""
    monkeypatch.setenv("STFLOW_PIN_LIMIT", "1KiB")
    if backend == "emulated":
        monkeypatch.setattr(get_backend("emulated"), "pinned_host_required", True)
    small, large = np.ones(128), np.ones(129)  # 1024 and 1032 bytes
    with stf.context(backend=backend) as ctx:
        ls, ll = ctx.logical_data(small), ctx.logical_data(large)
        assert ll._state.reference.device == USER_PAGEABLE
        assert ls._state.reference.device != USER_PAGEABLE
        for ld in (ls, ll):
            with ctx.task(ld.rw()) as t:
                t.run(lambda xp, a: xp.multiply(a, 5, out=a))
    np.testing.assert_array_equal(small, 5.0)
    np.testing.assert_array_equal(large, 5.0)


def test_loop_bodies_page_lock_the_pageable_arrays_they_copy(pageable):
    """A copy into a loop body (a conditional graph node: no host work) cannot be
    staged; the pageable array it reads or writes is page-locked then, for the
    rest of its life (nested loops, where the import of the inner loop is
    recorded into the outer body; seed 4 of the scoped programs failed so)."""
    backend = pageable
    a = np.arange(64.0)
    b = np.arange(64.0).reshape(8, 8)[:, ::2]  # a strided view
    expected_a = a + 2 * 3
    expected_b = b * 2.0**6
    with stf.stackable_context(backend=backend) as sctx:
        la, lb = sctx.logical_data(a), sctx.logical_data(b)
        assert la._state.pin is None and la._state.reference.device == USER_PAGEABLE
        with sctx.repeat(2):
            with sctx.repeat(3):
                with sctx.task(la.rw(), lb.rw()) as t:
                    t.run(
                        lambda xp, x, y: (xp.add(x, 1, out=x), xp.multiply(y, 2, out=y))
                    )
        assert la._state.pin is not None and lb._state.pin is not None
    np.testing.assert_array_equal(a, expected_a)
    np.testing.assert_array_equal(b, expected_b)


def test_a_loop_body_refuses_pageable_memory_it_cannot_page_lock(pageable, monkeypatch):
    """Memory the registry cannot page-lock (a buffer that is not a NumPy array;
    played here by a registry that page-locks nothing) is refused when a copy of
    it is recorded into a loop body: a ``ScopeError`` naming the way out, not a
    failure inside the graph."""
    from stflow._engine.registry import DataRegistry

    monkeypatch.setattr(DataRegistry, "pin_pageable", lambda self, ptr, nbytes: None)
    a = np.arange(16.0)
    sctx = stf.stackable_context(backend=pageable)
    la = sctx.logical_data(a)
    with pytest.raises(ScopeError, match="pageable host memory in the body of a loop"):
        with sctx.repeat(2):
            with sctx.repeat(2):  # the import is recorded into the outer body
                with sctx.task(la.rw()) as t:
                    t.run(lambda xp, x: xp.add(x, 1, out=x))
    sctx.finalize()
    np.testing.assert_array_equal(a, np.arange(16.0))


def test_large_copies_cross_many_chunks(pageable):
    """A copy larger than the ring of chunks (and with rows that do not divide a
    chunk) comes and goes whole."""
    rows = (CHUNK // (8 * 1000)) * 3 + 7  # three chunks and a band, rows of 8000 B
    a = np.arange(rows * 1000, dtype=np.float64).reshape(rows, 1000)
    view = a[:, 1:999]  # strided rows
    expected = a.copy()
    expected[:, 1:999] = -expected[:, 1:999]
    with stf.context(backend=pageable) as ctx:
        ld = ctx.logical_data(view)
        with ctx.task(ld.rw()) as t:
            t.run(lambda xp, v: xp.negative(v, out=v))
    np.testing.assert_array_equal(a, expected)


def test_the_limit_is_a_size():
    assert config.parse_size("1GiB", "STFLOW_PIN_LIMIT") == 1 << 30


@pytest.mark.parametrize(
    "rows, row_bytes, expected",
    [
        (10, CHUNK // 4, [(0, 4), (4, 4), (8, 2)]),
        (3, CHUNK, [(0, 1), (1, 1), (2, 1)]),
        (5, CHUNK + 1, []),
        (0, 8, []),
        (1 << 20, 1, [(0, 1 << 20)]),
    ],
)
def test_copies_are_cut_in_bands_of_a_chunk(rows, row_bytes, expected):
    assert bands(rows, row_bytes) == expected
