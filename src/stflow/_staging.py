"""How the distributed layer moves a value between a local data and MPI messages.

A value travels as one message, or, above the *piece size* (``STFLOW_MPI_PIECE``
bytes, 4 MiB by default), as consecutive pieces of it, each its own message with the
same tag (MPI's non-overtaking rule keeps them in order): the copies between device and
host memory of one piece then overlap the messages of the others.

A sender does not wait for its receivers, so it could run ahead and stage one buffer
per message it sent: above ``STFLOW_MPI_SEND_LIMIT`` bytes staged (512 MiB by default)
it first waits for its oldest sends to be received. Without that bound a rank running
ahead of its receivers grows its pinned memory without end, and fresh page-locked
memory costs about as much to allocate as to send (measured on an H200 machine: 37 ms
per 256 MiB buffer).

:class:`HostStaging` (the emulated backend, graph mode): the value is read with
``context.wait`` into a new NumPy array, sent from it, and a received array, once
every piece arrived, is copied into the local data by a task (in graph mode through
local logical data made of it, which the runtime moves).

:class:`PinnedStaging` (CUDA, stream mode): the messages live in page-locked host
memory from CuPy's pinned pool, and the device-host copies are asynchronous copies on
the task streams, one per piece, each followed by an event: a task reading the data
copies it out piece by piece, and the rank posts a piece's send once its event
completed (the rank waits for that task's copies alone, not for the whole context);
a task writing the data waits for each piece's message in turn and queues its copy
in, which runs while the next pieces arrive. A device-host copy from pageable memory
goes through a bounce buffer of the driver at a fraction of the bus's speed; from
pinned memory it is one DMA. A pinned buffer is kept until the event recorded after
its last copy completed (the pool would otherwise hand it out again while the copy
still reads it).
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any, Callable

import numpy as np

__all__ = ["HostStaging", "PinnedStaging", "piece_bounds", "piece_size",
           "send_limit", "staging_for"]

_DEFAULT_PIECE = 4 << 20
_DEFAULT_SEND_LIMIT = 512 << 20


def _bytes_setting(name: str, default: int) -> int:
    """A positive number of bytes from environment variable ``name``."""
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size <= 0:
        raise ValueError(f"{name} must be a positive number of bytes, got {text!r}")
    return size


def piece_size() -> int:
    """The largest message a value is sent in (``STFLOW_MPI_PIECE``, bytes)."""
    return _bytes_setting("STFLOW_MPI_PIECE", _DEFAULT_PIECE)


def send_limit() -> int:
    """How many bytes of sent values a rank keeps staged until their messages are
    received (``STFLOW_MPI_SEND_LIMIT``, bytes)."""
    return _bytes_setting("STFLOW_MPI_SEND_LIMIT", _DEFAULT_SEND_LIMIT)


def piece_bounds(nbytes: int, piece: int) -> list[tuple[int, int]]:
    """The byte ranges of the messages carrying ``nbytes`` bytes (one, possibly
    empty, when they fit in one piece)."""
    if nbytes <= piece:
        return [(0, nbytes)]
    return [(start, min(start + piece, nbytes)) for start in range(0, nbytes, piece)]


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array, as a flat ``uint8`` view."""
    return array.reshape(-1).view(np.uint8)


WaitPiece = Callable[[int], None]
"""Completes the receive of piece ``k`` of a value."""


class HostStaging:
    """Messages in ordinary NumPy arrays (see the module docstring); ``graph``: the
    local context records graphs."""

    def __init__(self, graph: bool = False) -> None:
        self.graph = graph

    def read(self, local: Any, data: Any, bounds: list[tuple[int, int]]
             ) -> tuple[np.ndarray, list[Any] | None]:
        """``data``'s value, ready to send (a new array), and no events: every piece
        is ready at once."""
        return np.asarray(local.wait(data), order="C"), None        # keeps 0-d

    def buffer(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A buffer to receive a value into."""
        return np.empty(shape, dtype)

    def land(self, local: Any, data: Any, buffer: np.ndarray,
             bounds: list[tuple[int, int]], wait_piece: WaitPiece) -> None:
        """Write a received ``buffer`` into ``data`` once all its pieces arrived, with
        a local task. In graph mode the buffer first becomes local logical data, which
        the task reads: the runtime moves it to where ``data`` lives (a copy from an
        unregistered host array cannot be captured on CUDA) and keeps it until the
        graph ran. In stream mode the task copies the buffer itself, which costs a
        third of the registration (measured on the emulated backend: 140 against
        220-430 µs per exchange of a few bytes)."""
        for k in range(len(bounds)):
            wait_piece(k)
        if self.graph:
            arrived = local.logical_data(buffer,
                                         name=f"{data.symbol or 'data'}.received")
            with local.task(arrived.read(), data.write()) as t:
                t.run(lambda xp, value, target: target.__setitem__(Ellipsis, value))
        else:
            with local.task(data.write()) as t:
                t.run(lambda xp, target:
                      target.__setitem__(Ellipsis, xp.asarray(buffer)))

    def progress(self) -> None:
        """Nothing is held."""


class PinnedStaging:
    """Messages in pinned host memory, copied on the task streams piece by piece
    (see the module docstring)."""

    def __init__(self) -> None:
        import cupy
        import cupyx
        self.cupy = cupy
        self.memcpy_async = cupy.cuda.runtime.memcpyAsync
        self.empty_pinned = cupyx.empty_pinned
        self.held: deque[tuple[Any, Any]] = deque()     # (event, buffer), oldest first

    def _event(self, stream: Any) -> Any:
        event = self.cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        return event

    def read(self, local: Any, data: Any, bounds: list[tuple[int, int]]
             ) -> tuple[np.ndarray, list[Any] | None]:
        """A pinned buffer receiving ``data``'s value, and one event per piece, set
        when the piece is in the buffer."""
        buffer = self.empty_pinned(data.shape, data.dtype)
        host = buffer.ctypes.data
        events: list[Any] = []
        memcpy_async, to_host = self.memcpy_async, 2        # cudaMemcpyDeviceToHost

        def copy_out(xp: Any, value: Any) -> None:
            stream = xp.cuda.get_current_stream()
            if not value.flags.c_contiguous:
                value = xp.ascontiguousarray(value)
            device = value.data.ptr
            for start, stop in bounds:
                memcpy_async(host + start, device + start, stop - start, to_host,
                             stream.ptr)
                events.append(self._event(stream))
        with local.task(data.read()) as t:
            t.run(copy_out)
        return buffer, events

    def buffer(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return self.empty_pinned(shape, dtype)

    def land(self, local: Any, data: Any, buffer: np.ndarray,
             bounds: list[tuple[int, int]], wait_piece: WaitPiece) -> None:
        """A task writing ``data``: each piece's copy in is queued as soon as the
        piece arrived."""
        host = buffer.ctypes.data
        memcpy_async, to_device = self.memcpy_async, 1      # cudaMemcpyHostToDevice

        def copy_in(xp: Any, target: Any) -> None:
            stream = xp.cuda.get_current_stream()
            if not target.flags.c_contiguous:            # not a local data's layout
                for k in range(len(bounds)):
                    wait_piece(k)
                target.set(buffer, stream=stream)
            else:
                device = target.data.ptr
                for k, (start, stop) in enumerate(bounds):
                    wait_piece(k)
                    memcpy_async(device + start, host + start, stop - start,
                                 to_device, stream.ptr)
            self.held.append((self._event(stream), buffer))
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
    return HostStaging(use_graph)
