"""How the distributed layer moves a value between a local data and MPI messages.

A value travels as one message, or, above the *piece size* (``STFLOW_MPI_PIECE``
bytes, 4 MiB by default), as consecutive pieces of it, each its own message with the
same tag (MPI's non-overtaking rule keeps them in order): the copies between device and
host memory of one piece then overlap the messages of the others.

A sender does not wait for its receivers, so it could run ahead and stage one buffer
per message it sent: above ``STFLOW_MPI_SEND_LIMIT`` bytes staged (512 MiB by default)
it first waits for its oldest sends to be received. Without that bound a rank running
ahead of its receivers grows its pinned memory without end, and fresh page-locked
memory costs about as much to allocate as to send (benchmarks/RESULTS.md,
"Distributed").

Everything here goes through the backend contract (``allocate``, ``copy``,
``record``, ``query``), so the emulated backend runs the same code as CUDA:

:class:`PinnedStaging` (stream mode): the messages live in page-locked host memory
(the backend's host allocations, kept in a :class:`BufferPool` for reuse), and the
device-host copies are the backend's asynchronous copies on the task streams, one per
piece, each followed by an event: a task reading the data copies it out piece by
piece, and the rank posts a piece's send once its event completed (the rank waits
for that task's copies alone, not for the whole context); a task writing the data
waits for each piece's message in turn and queues its copy in, which runs while the
next pieces arrive. A device-host copy from pageable memory goes through a bounce
buffer of the driver at a fraction of the bus's speed; from pinned memory it is one
DMA. A buffer goes back to the pool once its message was sent, or once the event
recorded after its last copy in completed.

:class:`DirectStaging` (stream mode, where MPI moves device memory itself: it says
so through ``MPIX_Query_cuda_support``, or ``STFLOW_MPI_CUDA_AWARE=1``): the same,
with the buffers in the rank's device memory, handed to MPI as CUDA Array Interface
objects, one message per value. The emulated backend uses it only when asked (its
device memory is host memory, so any MPI moves it: that is how the tests run this
path without a CUDA-aware MPI).

:class:`HostStaging` (graph mode): a graph records its copies once, so their buffers
would have to live as long as the graph. The value is read with ``context.wait`` into
a new NumPy array and sent from it; a received array becomes local logical data,
which a task copies into the data once every piece arrived (the runtime moves it
where the data lives: a copy from unregistered host memory cannot be captured on
CUDA).
"""

from __future__ import annotations

import ctypes
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core import config as _config
from .._interchange.views import stf_cai
from ..backends._base import HOST, Allocation, Backend, Event, pointer_array

__all__ = [
    "BUFFERS_PER_SIZE",
    "BufferPool",
    "DirectStaging",
    "HostStaging",
    "Message",
    "PinnedStaging",
    "Staging",
    "device_direct",
    "mpi_cuda_aware",
    "piece_bounds",
    "piece_size",
    "send_buffers",
    "send_limit",
    "staging_for",
]

BUFFERS_PER_SIZE = _config.MPI_SEND_BUFFERS_DEFAULT
"""How many messages of one size a sender keeps in flight before it waits for the
oldest to be received rather than allocate another buffer, unless
``STFLOW_MPI_SEND_BUFFERS`` says (:func:`send_buffers`). Two (double buffering:
copy the next value out while the last one travels) measured slower on an H200
shared by two ranks, twice: 0.62-0.66x against 0.77-0.81x the hand-staged transfer
at 1 MiB, 0.76-0.86x against 0.97-1.00x at 16 MiB: the two processes' copies then
overlap on one GPU, which time-slices between them. Not measured on two GPUs."""

_BYTES = np.dtype(np.uint8)


def piece_size() -> int:
    """The largest message a value is sent in (``STFLOW_MPI_PIECE``, bytes)."""
    return _config.mpi_piece()


def send_limit() -> int:
    """How many bytes of sent values a rank keeps staged until their messages are
    received (``STFLOW_MPI_SEND_LIMIT``, bytes)."""
    return _config.mpi_send_limit()


def send_buffers() -> int:
    """How many messages of one size a sender keeps in flight before it waits for
    the oldest (``STFLOW_MPI_SEND_BUFFERS``, default :data:`BUFFERS_PER_SIZE`)."""
    return _config.mpi_send_buffers()


def piece_bounds(nbytes: int, piece: int) -> list[tuple[int, int]]:
    """The byte ranges of the messages carrying ``nbytes`` bytes (one, possibly
    empty, when they fit in one piece)."""
    if nbytes <= piece:
        return [(0, nbytes)]
    return [(start, min(start + piece, nbytes)) for start in range(0, nbytes, piece)]


WaitPiece = Callable[[int], None]
"""Completes the receive of piece ``k`` of a value."""


class Message:
    """A value's buffer for MPI: ``pieces`` one buffer per message (NumPy arrays of
    bytes in host memory, :class:`stf_cai` objects in device memory), ``allocation``
    the pooled memory under them (``None`` for a NumPy array of its own), ``array``
    the value itself where a staging hands it on (:class:`HostStaging`: its shape and
    dtype; ``None`` for the pooled buffers, whose bytes only MPI and copies see)."""

    __slots__ = ("array", "pieces", "allocation")

    def __init__(
        self,
        array: np.ndarray | None,
        pieces: list[Any],
        allocation: Allocation | None = None,
    ) -> None:
        self.array = array
        self.pieces = pieces
        self.allocation = allocation


class BufferPool:
    """Message buffers in one memory (pinned host memory, ``HOST``, or a device's),
    reused by size: allocating page-locked memory costs about as much as sending it.

    :meth:`give` takes a buffer back once an event (the last work reading or writing
    it) completed; at most ``keep`` bytes stay cached, the rest is freed. Sizes are
    rounded up to whole pages, so the tiles of one matrix share their buffers. Where
    no spare buffer fits, :meth:`take` waits for a pending one of the same size rather
    than allocate (its last copy is already queued).
    """

    PAGE = 4096

    def __init__(self, backend: Backend, place: int, keep: int) -> None:
        self.backend = backend
        self.place = place
        self.keep = keep
        self.spare: dict[int, list[Allocation]] = {}
        self.cached = 0  # bytes in ``spare``
        self.made = 0  # buffers allocated so far
        self.pending: deque[tuple[Event, Allocation]] = deque()  # oldest first

    def rounded(self, nbytes: int) -> int:
        """The size of the buffer :meth:`take` gives for ``nbytes`` bytes."""
        return -(-nbytes // self.PAGE) * self.PAGE

    def has_spare(self, nbytes: int) -> bool:
        """Whether :meth:`take` would reuse a buffer (no allocation) for ``nbytes``."""
        if not nbytes:
            return True
        self.progress()
        return bool(self.spare.get(self.rounded(nbytes)))

    def take(self, nbytes: int) -> Allocation:
        """A buffer of at least ``nbytes`` bytes, usable at once by any stream."""
        if not nbytes:
            return Allocation(0, 0, self.place, _BYTES, None)
        self.progress()
        size = self.rounded(nbytes)
        spare = self.spare.get(size)
        if spare:
            self.cached -= size
            return spare.pop()
        pending = self.pending
        for index in range(len(pending)):
            event, allocation = pending[index]
            if allocation.nbytes == size:
                # Its last copy is queued (local work only): waiting for it costs
                # less than fresh page-locked memory (a fraction of a millisecond
                # per MiB).
                del pending[index]
                self.backend.synchronize(event)
                return allocation
        self.made += 1
        return self.backend.allocate(self.place, size, None, _BYTES)

    def give(self, allocation: Allocation, after: Event | None = None) -> None:
        """Take ``allocation`` back once ``after`` completed (at once without it)."""
        if not allocation.nbytes:
            return
        if after is not None and not self.backend.query(after):
            self.pending.append((after, allocation))
        else:
            self._keep(allocation)

    def progress(self) -> None:
        """Take back the buffers whose last work completed."""
        pending, query = self.pending, self.backend.query
        while pending and query(pending[0][0]):
            self._keep(pending.popleft()[1])

    def _keep(self, allocation: Allocation) -> None:
        size = allocation.nbytes
        if self.cached + size > self.keep:
            self.backend.free(allocation, None)
            return
        self.spare.setdefault(size, []).append(allocation)
        self.cached += size

    def close(self) -> None:
        """Free every buffer (waiting for the work still using them)."""
        backend = self.backend
        for event, allocation in self.pending:
            backend.synchronize(event)
            backend.free(allocation, None)
        self.pending.clear()
        for allocations in self.spare.values():
            for allocation in allocations:
                backend.free(allocation, None)
        self.spare.clear()
        self.cached = 0


def _task_pointer(t: Any) -> tuple[Any, int]:
    """The stream and the address of the one dependency of task ``t`` (a local data
    of the distributed layer; ``get_arg`` builds no view)."""
    return t._stream, t.get_arg(0)


def _strides(t: Any, data: Any) -> tuple[int, ...] | None:
    """The strides of the instance task ``t`` accesses when ``data`` was registered
    from a strided buffer and that instance is the buffer itself, else ``None``
    (instances the runtime allocates are dense)."""
    reference = data._state.reference
    if (
        reference is None
        or reference.allocation is None
        or reference.allocation.strides is None
    ):
        return None
    strides: tuple[int, ...] | None = t.get_arg_cai(0).strides
    return strides


class _CopyStaging:
    """Messages in pooled buffers at ``place`` (``HOST``: pinned host memory; a
    device ordinal: device memory), filled and emptied by the backend's copies on the
    task streams (see the module docstring)."""

    pieces = True

    def __init__(self, backend: Backend, place: int, keep: int) -> None:
        self.backend = backend
        self.pool = BufferPool(backend, place, keep)
        self.buffers = send_buffers()  # per size, sends in flight
        # What MPI is handed: NumPy arrays for host memory (the emulated backend's
        # device memory is host memory), CUDA Array Interface objects for a GPU's.
        self.cuda_buffers = place != HOST and backend.gpu_memory
        # A NumPy array of bytes over each pooled host buffer, made once (2.5 µs a
        # view): it holds no reference to the buffer, which lives while a message
        # uses it (the message holds its allocation) and is freed by the pool; the
        # entry goes when the allocation does.
        self._bytes: weakref.WeakKeyDictionary[Allocation, np.ndarray] = (
            weakref.WeakKeyDictionary()
        )

    def _message(self, allocation: Allocation, bounds: list[tuple[int, int]]) -> Message:
        if not allocation.nbytes:  # an empty value
            return Message(None, [np.empty(0, np.uint8)])
        if self.cuda_buffers:
            ptr = allocation.ptr
            return Message(
                None,
                [stf_cai(ptr + start, (stop - start,), _BYTES) for start, stop in bounds],
                allocation,
            )
        flat = self._bytes.get(allocation)
        if flat is None:
            flat = pointer_array(
                allocation.ptr, (allocation.nbytes,), _BYTES, False, None
            )
            self._bytes[allocation] = flat
        return Message(None, [flat[start:stop] for start, stop in bounds], allocation)

    def read(
        self, local: Any, data: Any, bounds: list[tuple[int, int]]
    ) -> tuple[Message, list[Any] | None]:
        """A buffer receiving ``data``'s value, and one event per piece, set when the
        piece is in the buffer."""
        allocation = self.pool.take(bounds[-1][1])
        message = self._message(allocation, bounds)
        copy, record = self.backend.copy, self.backend.record
        events: list[Any] = []
        with local.task(data.read()) as t:
            stream, source = _task_pointer(t)
            target = allocation.ptr
            strides = _strides(t, data)
            if strides is not None:  # a strided user buffer: one gathering copy
                self.backend.copy_strided(
                    target, None, source, strides, data.shape, data.dtype.itemsize, stream
                )
                event = record(stream)
                return message, [event for _ in bounds]
            for start, stop in bounds:
                if stop > start:
                    copy(target + start, source + start, stop - start, stream)
                events.append(record(stream))
        return message, events

    def buffer(
        self, shape: tuple[int, ...], dtype: Any, bounds: list[tuple[int, int]]
    ) -> Message:
        """A buffer to receive a value into (``bounds`` its pieces; the shape and
        dtype only count for :class:`HostStaging`)."""
        return self._message(self.pool.take(bounds[-1][1]), bounds)

    def land(
        self,
        local: Any,
        data: Any,
        message: Message,
        bounds: list[tuple[int, int]],
        wait_piece: WaitPiece,
    ) -> None:
        """A task writing ``data``: each piece's copy in is queued as soon as the
        piece arrived; the buffer goes back to the pool after the last copy."""
        allocation = message.allocation
        with local.task(data.write()) as t:
            stream, target = _task_pointer(t)
            source = 0 if allocation is None else allocation.ptr
            strides = _strides(t, data)
            if strides is not None:  # a strided user buffer: one scattering copy
                for k in range(len(bounds)):
                    wait_piece(k)
                self.backend.copy_strided(
                    target, strides, source, None, data.shape, data.dtype.itemsize, stream
                )
                self.release(message, t)
                return
            copy = self.backend.copy
            for k, (start, stop) in enumerate(bounds):
                wait_piece(k)
                if stop > start:
                    copy(target + start, source + start, stop - start, stream)
            self.release(message, t)

    def awaits_buffer(self, nbytes: int, sent: list[Message]) -> bool:
        """Whether the pool has no buffer for a value of ``nbytes`` bytes while
        ``buffers`` (:func:`send_buffers`) of the messages ``sent`` (in flight) hold one
        each: waiting for the oldest costs less than fresh page-locked memory
        (milliseconds per 16 MiB)."""
        pool = self.pool
        if pool.has_spare(nbytes):
            return False
        size = pool.rounded(nbytes)
        holding = 0
        for message in sent:
            allocation = message.allocation
            if allocation is not None and allocation.nbytes == size:
                holding += 1
                if holding >= self.buffers:
                    return True
        return False

    def release(self, message: Message, t: Any = None) -> None:
        """``message``'s buffer is no longer needed (after the work task ``t``
        queued so far, when given)."""
        if message.allocation is not None:
            after = None if t is None else self.backend.record(t._stream)
            self.pool.give(message.allocation, after)

    def progress(self) -> None:
        """Take back the buffers whose copies completed."""
        if self.pool.pending:
            self.pool.progress()

    def close(self) -> None:
        """Free the buffers (the context's work is done)."""
        self.pool.close()


class PinnedStaging(_CopyStaging):
    """Messages in pinned host memory, copied on the task streams piece by piece
    (see the module docstring)."""

    def __init__(self, backend: Backend, keep: int) -> None:
        super().__init__(backend, HOST, keep)


class DirectStaging(_CopyStaging):
    """Messages straight from and into device memory: MPI reads and writes the
    device buffers itself (a CUDA-aware MPI; on the emulated backend, whose device
    memory is host memory, any MPI). A value is copied, on its device, into a buffer
    of its own (the data may be written again while the message is in flight)."""

    pieces = False  # MPI moves a device buffer in one message

    def __init__(self, backend: Backend, device: int, keep: int) -> None:
        super().__init__(backend, device, keep)


class HostStaging:
    """Messages in ordinary NumPy arrays, for graph mode (see the module
    docstring)."""

    pieces = True  # values above the piece size are cut

    def read(
        self, local: Any, data: Any, bounds: list[tuple[int, int]]
    ) -> tuple[Message, list[Any] | None]:
        """``data``'s value, ready to send (a new array), and no events: every piece
        is ready at once."""
        array = np.asarray(local.wait(data), order="C")  # keeps 0-d
        return self._message(array, bounds), None

    @staticmethod
    def _message(array: np.ndarray, bounds: list[tuple[int, int]]) -> Message:
        flat = array.reshape(-1).view(np.uint8)
        return Message(array, [flat[start:stop] for start, stop in bounds])

    def buffer(
        self, shape: tuple[int, ...], dtype: Any, bounds: list[tuple[int, int]]
    ) -> Message:
        """A buffer to receive a value into."""
        return self._message(np.empty(shape, dtype), bounds)

    def land(
        self,
        local: Any,
        data: Any,
        message: Message,
        bounds: list[tuple[int, int]],
        wait_piece: WaitPiece,
    ) -> None:
        """Once every piece arrived, the buffer becomes local logical data, which a
        task copies into ``data``: the runtime moves it to where ``data`` lives and
        keeps it until the graph ran."""
        for k in range(len(bounds)):
            wait_piece(k)
        arrived = local.logical_data(
            message.array, name=f"{data.symbol or 'data'}.received"
        )
        with local.task(arrived.read(), data.write()) as t:
            t.run(lambda xp, value, target: target.__setitem__(Ellipsis, value))

    def awaits_buffer(self, nbytes: int, sent: list[Message]) -> bool:
        """Nothing is pooled."""
        return False

    def release(self, message: Message, t: Any = None) -> None:
        """Nothing is pooled (the arrays are collected)."""

    def progress(self) -> None:
        """Nothing is held."""

    def close(self) -> None:
        """Nothing is held."""


Staging = HostStaging | PinnedStaging | DirectStaging


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
        function = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
    except (AttributeError, OSError):
        return False
    function.restype, function.argtypes = ctypes.c_int, []
    return bool(function())


def device_direct(gpu_memory: bool) -> bool:
    """Whether device buffers go straight to MPI: ``STFLOW_MPI_CUDA_AWARE=1`` or
    ``0`` decides; unset, MPI is asked (:func:`mpi_cuda_aware`) for GPU memory, and
    the emulated backend stages through host memory."""
    setting = _config.mpi_cuda_aware()
    if setting is not None:
        return setting
    return gpu_memory and mpi_cuda_aware()


def staging_for(local: Any, use_graph: bool, device: int = 0) -> Staging:
    """How this rank's messages travel (see the module docstring): host arrays in
    graph mode; device buffers handed to MPI where it moves device memory
    (:func:`device_direct`); else pinned host buffers. Each keeps at most the send
    limit's worth of spare buffers."""
    if use_graph:
        return HostStaging()
    backend = local._live().backend
    if device_direct(bool(backend.gpu_memory)):
        return DirectStaging(backend, device, send_limit())
    return PinnedStaging(backend, send_limit())
