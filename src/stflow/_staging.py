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

:class:`DirectStaging` (stream mode, where MPI moves device memory itself: it says
so through ``MPIX_Query_cuda_support``, or ``STFLOW_MPI_CUDA_AWARE=1``): the messages
are device buffers handed to MPI, one message per value; the emulated backend uses it
only when asked (its device memory is host memory, so any MPI moves it: that is how
the tests run this path without a CUDA-aware MPI).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import deque
from typing import Any, Callable, Union

import numpy as np

__all__ = ["DirectStaging", "HostStaging", "PinnedStaging", "Staging", "device_direct",
           "mpi_cuda_aware", "piece_bounds", "piece_size", "send_limit", "staging_for"]

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


WaitPiece = Callable[[int], None]
"""Completes the receive of piece ``k`` of a value."""


class HostStaging:
    """Messages in ordinary NumPy arrays (see the module docstring); ``graph``: the
    local context records graphs."""

    pieces = True                       # values above the piece size are cut

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
        graph ran. In stream mode the task copies the buffer itself, which is
        cheaper (an exchange of a few bytes on the emulated backend: 140 µs, against
        220-430 µs with the registration)."""
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

    pieces = True
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


class _Copied:
    """Set once a copy queued by a task body completed: a CUDA event recorded after
    it where the body is CuPy's (it runs when submitted, queueing the copy), the end
    of the body where it is NumPy's (the emulated stream runs it later)."""

    __slots__ = ("flag", "event")

    def __init__(self) -> None:
        self.flag = threading.Event()
        self.event: Any = None

    def mark(self, xp: Any) -> None:
        """Called by the body, after its copy."""
        if xp is not np:
            self.event = xp.cuda.Event(block=False, disable_timing=True)
            self.event.record()                  # on the current stream: the task's
        self.flag.set()

    @property
    def done(self) -> bool:
        return self.flag.is_set() and (self.event is None or self.event.done)

    def wait(self) -> None:
        self.flag.wait()
        if self.event is not None:
            self.event.synchronize()


class DirectStaging:
    """Messages straight from and into device memory: MPI reads and writes the
    device buffers itself (a CUDA-aware MPI; on the emulated backend, whose device
    memory is host memory, any MPI).

    A value is first copied, on its device, into a buffer of its own (the data may be
    written again while the message is in flight), and the rank waits for that copy
    before posting the send; a received buffer is copied into the data by a task once
    every piece arrived, and kept until that copy completed.
    """

    pieces = False                      # MPI moves a device buffer in one message

    def __init__(self, device: int, gpu: bool) -> None:
        self.device = device
        self.cupy: Any = None
        if gpu:
            import cupy
            self.cupy = cupy
        self.held: deque[tuple[_Copied, Any]] = deque()   # oldest first

    def read(self, local: Any, data: Any, bounds: list[tuple[int, int]]
             ) -> tuple[Any, list[Any] | None]:
        """A device copy of ``data``'s value, complete (no events to wait for)."""
        copies: list[Any] = []
        copied = _Copied()

        def copy_out(xp: Any, value: Any) -> None:
            try:
                copy = xp.empty(value.shape, value.dtype)    # on the task's stream
                copy[...] = value
                copies.append(copy)
            finally:                          # never leave the rank waiting
                copied.mark(xp)
        with local.task(data.read()) as t:
            t.run(copy_out)
        copied.wait()
        if not copies:
            raise RuntimeError(f"stflow: copying {data.symbol or 'a value'} out of "
                               "device memory for MPI failed on this rank (the task's "
                               "error is reported by the next synchronisation)")
        return copies[0], None

    def buffer(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A device buffer to receive a value into."""
        if self.cupy is None:
            return np.empty(shape, dtype)
        with self.cupy.cuda.Device(self.device):
            return self.cupy.empty(shape, dtype)

    def land(self, local: Any, data: Any, buffer: Any,
             bounds: list[tuple[int, int]], wait_piece: WaitPiece) -> None:
        """Once the buffer arrived, a task copying it into ``data``."""
        for k in range(len(bounds)):
            wait_piece(k)
        copied = _Copied()

        def copy_in(xp: Any, target: Any) -> None:
            try:
                if xp is np or not target.flags.c_contiguous:
                    target[...] = buffer
                else:                  # the buffer may be on another device: a copy
                    target.data.copy_from_device_async(buffer.data, buffer.nbytes)
            finally:                          # the buffer is let go either way
                copied.mark(xp)
        with local.task(data.write()) as t:
            t.run(copy_in)
        self.held.append((copied, buffer))

    def progress(self) -> None:
        """Let go of the buffers whose copies completed."""
        held = self.held
        while held and held[0][0].done:
            held.popleft()


Staging = Union[HostStaging, PinnedStaging, DirectStaging]


def mpi_cuda_aware() -> bool:
    """Whether the MPI library says it moves CUDA device memory itself: mpi4py's
    ``MPI.Query_cuda_support()`` where it has one, else Open MPI's
    ``MPIX_Query_cuda_support()`` extension; False when neither answers."""
    try:
        from mpi4py import MPI
    except ImportError:
        return False
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        return bool(query())
    try:
        function = getattr(ctypes.CDLL(MPI.__file__), "MPIX_Query_cuda_support")
    except (AttributeError, OSError):
        return False
    function.restype, function.argtypes = ctypes.c_int, []
    return bool(function())


def device_direct(gpu_memory: bool) -> bool:
    """Whether device buffers go straight to MPI: ``STFLOW_MPI_CUDA_AWARE=1`` or
    ``0`` decides; unset, MPI is asked (:func:`mpi_cuda_aware`) for GPU memory, and
    the emulated backend stages through host arrays."""
    text = os.environ.get("STFLOW_MPI_CUDA_AWARE", "")
    if text:
        if text not in ("0", "1"):
            raise ValueError(f"STFLOW_MPI_CUDA_AWARE must be 1 (MPI moves device "
                             f"memory) or 0 (stage through host memory), got {text!r}")
        return text == "1"
    return gpu_memory and mpi_cuda_aware()


def staging_for(local: Any, use_graph: bool, device: int = 0) -> Staging:
    """How this rank's messages travel (see the module docstring): host arrays in
    graph mode (a graph records its copies once: its buffers would have to live as
    long as the graph); device buffers handed to MPI where it moves device memory
    (:func:`device_direct`); pinned host buffers on GPU memory with CuPy; else host
    arrays."""
    if use_graph:
        return HostStaging(True)
    gpu = bool(local._live().backend.gpu_memory)
    if device_direct(gpu):
        return DirectStaging(device, gpu)
    if gpu:
        try:
            return PinnedStaging()
        except ImportError:
            pass
    return HostStaging(False)
