"""The emulated backend's device memory map (stflow.backends._host_memory)."""

from __future__ import annotations

import numpy as np


def test_the_emulated_memory_map_survives_buffers_dropped_without_free():
    """A buffer dropped without ``free`` (a leak) may have its address handed out
    again: the memory map then still answers ``locate`` for every address."""
    import gc

    from stflow.backends._host_memory import HostMemory

    memory = HostMemory()
    for _ in range(50):
        memory.allocate(0, 8192, np.dtype(np.uint8))  # dropped at once
        gc.collect()
    kept = memory.allocate(1, 8192, np.dtype(np.uint8))
    assert len(memory._starts) == len(memory._ranges)
    assert memory.locate(kept.ptr + 100) == 1
    memory.release(kept)
    for start in list(memory._starts):
        memory.locate(start)  # no stale start without range
