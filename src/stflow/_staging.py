"""How the distributed layer moves a value between a local data and an MPI message.

:class:`HostStaging` (the emulated backend, graph mode): the value is read with
``context.wait`` into a new NumPy array, sent from it, and a received array is written
into the local data by a task (``target[...] = buffer``).

:class:`PinnedStaging` (CUDA, stream mode): the messages live in page-locked host
memory from CuPy's pinned pool, and the device-host copies are asynchronous copies on
the task streams: a task reading the data copies it into a pinned buffer (the rank
waits for that task alone before posting the send), and a task writing the data copies
the received buffer into it. A device-host copy from pageable memory goes through a
bounce buffer of the driver at a fraction of the bus's speed; from pinned memory it is
one DMA. A pinned buffer is kept until the event recorded after its copy completes
(the pool would otherwise hand it out again while the copy still reads it).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

__all__ = ["HostStaging", "PinnedStaging", "staging_for"]


class HostStaging:
    """Messages in ordinary NumPy arrays (see the module docstring)."""

    def read(self, local: Any, data: Any) -> np.ndarray:
        """``data``'s value, ready to send (a new array)."""
        return np.asarray(local.wait(data), order="C")          # keeps 0-d

    def buffer(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A buffer to receive a value into."""
        return np.empty(shape, dtype)

    def land(self, local: Any, data: Any, buffer: np.ndarray) -> None:
        """Write a received ``buffer`` into ``data`` (a local task)."""
        with local.task(data.write()) as t:
            t.run(lambda xp, target: target.__setitem__(Ellipsis, xp.asarray(buffer)))

    def progress(self) -> None:
        """Nothing is held."""


class PinnedStaging:
    """Messages in pinned host memory, copied on the task streams (see the module
    docstring)."""

    def __init__(self) -> None:
        import cupy
        import cupyx
        self.cupy = cupy
        self.empty_pinned = cupyx.empty_pinned
        self.held: deque[tuple[Any, Any]] = deque()     # (event, buffer), oldest first

    def _event(self) -> Any:
        event = self.cupy.cuda.Event(block=False, disable_timing=True)
        event.record()                       # on the current stream: the task's
        return event

    def read(self, local: Any, data: Any) -> np.ndarray:
        shape, dtype = data.shape, data.dtype
        buffer = self.empty_pinned(shape, dtype)
        done: list[Any] = []

        def copy_out(xp: Any, value: Any) -> None:
            value.get(stream=xp.cuda.get_current_stream(), out=buffer, blocking=False)
            done.append(self._event())
        with local.task(data.read()) as t:
            t.run(copy_out)
        done[0].synchronize()                # this task only, not the whole context
        return buffer

    def buffer(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return self.empty_pinned(shape, dtype)

    def land(self, local: Any, data: Any, buffer: np.ndarray) -> None:
        def copy_in(xp: Any, target: Any) -> None:
            target.set(buffer, stream=xp.cuda.get_current_stream())
            self.held.append((self._event(), buffer))
        with local.task(data.write()) as t:
            t.run(copy_in)

    def progress(self) -> None:
        """Let go of the buffers whose copies completed."""
        held = self.held
        while held and held[0][0].done:
            held.popleft()


def staging_for(local: Any, use_graph: bool) -> HostStaging | PinnedStaging:
    """Pinned staging for a context on GPU memory in stream mode with CuPy, else host
    arrays (a graph records its copies once: its host buffers would have to live as
    long as the graph)."""
    if local._live().backend.gpu_memory and not use_graph:
        try:
            return PinnedStaging()
        except ImportError:
            pass
    return HostStaging()
