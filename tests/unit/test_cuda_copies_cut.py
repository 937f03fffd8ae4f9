"""The CUDA backend's copies of host memory registered in pieces, with a stand-in for
the driver: every copy it issues stays within one registration (the driver refuses one
spanning two), and together they move exactly the elements of the layout.

The stand-in performs each copy with ``memmove`` (both sides are host memory here) and
fails on a copy whose source or destination range contains a registration boundary,
as ``cuMemcpy2DAsync`` does on a GPU (``CUDA_ERROR_INVALID_VALUE``). The same code runs
on a GPU in ``tests/gpu/test_pinned_pieces.py``.
"""

from __future__ import annotations

import ctypes
import random
import types

import numpy as np
import pytest

from stflow.backends import _cuda_driver
from stflow.backends._cuda_memory import CudaMemory

PAGE = 4096


class _Driver:
    """What ``CudaMemory``'s copies call of ``cuda.bindings.driver``."""

    class CUmemorytype:
        CU_MEMORYTYPE_UNIFIED = 3

    class CUDA_MEMCPY2D:  # noqa: N801 - the driver's name
        pass

    def __init__(self, cuts):
        self.cuts = cuts
        self.calls = 0

    def _within_one(self, lo, hi):
        assert not [c for c in self.cuts if lo < c < hi], (
            f"a copy of [0x{lo:x}, 0x{hi:x}) spans a registration boundary"
        )

    def cuMemcpyAsync(self, dst, src, nbytes, stream):  # noqa: N802
        self.calls += 1
        self._within_one(src, src + nbytes)
        self._within_one(dst, dst + nbytes)
        ctypes.memmove(dst, src, nbytes)
        return (0,)

    def cuMemcpy2DAsync(self, m, stream):  # noqa: N802
        self.calls += 1
        last = m.Height - 1
        self._within_one(m.srcDevice, m.srcDevice + last * m.srcPitch + m.WidthInBytes)
        self._within_one(m.dstDevice, m.dstDevice + last * m.dstPitch + m.WidthInBytes)
        for row in range(m.Height):
            ctypes.memmove(
                m.dstDevice + row * m.dstPitch,
                m.srcDevice + row * m.srcPitch,
                m.WidthInBytes,
            )
        return (0,)


def _memory(monkeypatch, cuts):
    driver = _Driver(cuts)
    monkeypatch.setattr(_cuda_driver, "driver", driver)
    memory = CudaMemory.__new__(CudaMemory)  # the copies need nothing else
    memory._cuts = tuple(cuts)
    return memory, driver


def _page_cuts(array, every=1):
    """Registration boundaries at every ``every``-th page inside ``array``."""
    lo = array.ctypes.data
    first = -(-lo // PAGE) * PAGE
    return list(range(first, lo + array.nbytes, PAGE * every))


@pytest.mark.parametrize("seed", range(60))
def test_tiles_move_exactly_without_spanning_a_boundary(monkeypatch, seed):
    rng = random.Random(seed)
    rows, cols = rng.randint(20, 90), rng.randint(20, 700)
    dtype = rng.choice([np.float64, np.float32])
    parent = np.arange(rows * cols + 3, dtype=dtype)[1 : 1 + rows * cols].reshape(
        rows, cols
    )
    cuts = _page_cuts(parent, rng.choice([1, 1, 2, 3]))
    memory, driver = _memory(monkeypatch, cuts)
    stream = types.SimpleNamespace(native=0)
    for _ in range(6):
        r0, c0 = rng.randrange(rows), rng.randrange(cols)
        r1 = rng.randint(r0 + 1, rows)
        c1 = cols if rng.random() < 0.3 else rng.randint(c0 + 1, cols)  # whole rows too
        view = parent[r0:r1, c0:c1]
        dense = np.full(view.shape, -1, dtype)  # the "device" instance
        memory._pitched_copies(
            dense.ctypes.data,
            None,
            view.ctypes.data,
            view.strides,
            view.shape,
            view.itemsize,
            stream,
        )
        np.testing.assert_array_equal(dense, view)
        dense *= -1  # and back: "device" to the registered view
        outside = parent.copy()
        memory._pitched_copies(
            view.ctypes.data,
            view.strides,
            dense.ctypes.data,
            None,
            view.shape,
            view.itemsize,
            stream,
        )
        expected = outside
        expected[r0:r1, c0:c1] = dense
        np.testing.assert_array_equal(parent, expected)  # nothing else touched
    assert driver.calls


def test_a_contiguous_copy_is_cut_at_every_boundary(monkeypatch):
    host = np.arange(5 * PAGE, dtype=np.uint8)
    cuts = _page_cuts(host)
    memory, driver = _memory(monkeypatch, cuts)
    device = np.zeros_like(host)
    runs = memory._runs(device.ctypes.data, host.ctypes.data, host.nbytes)
    assert len(runs) == len([c for c in cuts if host.ctypes.data < c]) + 1
    for offset, size in runs:
        driver.cuMemcpyAsync(
            device.ctypes.data + offset, host.ctypes.data + offset, size, 0
        )
    np.testing.assert_array_equal(device, host)
