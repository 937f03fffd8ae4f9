"""Helpers for the CUDA-only tests (``tests/gpu``)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

SPIN_SOURCE = r"""
extern "C" __global__ void spin_then_store(unsigned long long cycles, int* out, int value)
{
    unsigned long long start = clock64();
    while (clock64() - start < cycles) { }
    *out = value;
}
"""

SPIN_CYCLES = 200_000_000
"""About 0.1 s at H200 clocks: far longer than any host-side submission in a test."""


@functools.cache
def spin_kernel() -> Any:
    """A one-thread CuPy kernel: spin ``cycles`` clock ticks, then store ``value``."""
    import cupy

    return cupy.RawKernel(SPIN_SOURCE, "spin_then_store")


def cupy_stream(handle: Any) -> Any:
    """A CuPy stream object for a raw stream handle (``with cupy_stream(h): ...``).

    CuPy 14 replaced ``ExternalStream`` with ``Stream.from_external``, which takes an
    object speaking the CUDA stream protocol (``__cuda_stream__``).
    """
    from stflow.testing import cupy_stream as stream

    return stream(handle)


def launch_spin(
    stream_handle: int, out_ptr: int, value: int, cycles: int = SPIN_CYCLES
) -> None:
    """Enqueue the spin kernel on a raw stream; it writes ``value`` (int32) at the end."""
    with cupy_stream(stream_handle):
        spin_kernel()(
            (1,), (1,), (np.uint64(cycles), np.uint64(out_ptr), np.int32(value))
        )


def sync(backend: Any, stream: Any) -> None:
    """Block until everything enqueued on ``stream`` so far has completed."""
    backend.synchronize(backend.record(stream))


def free_device_memory(backend: Any) -> int:
    """Free bytes on device 0 after synchronising it and trimming the memory pools."""
    from cuda.bindings import driver

    backend.set_current_device(0)
    (err,) = driver.cuCtxSynchronize()
    assert not err, err
    backend.trim_pools()
    err, free, _total = driver.cuMemGetInfo()
    assert not err, err
    return int(free)
