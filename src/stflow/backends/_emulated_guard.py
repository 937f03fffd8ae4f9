"""The emulated backend's read guard: ``read()`` data must not change.

:class:`ReadGuard` fingerprints the instances a started task only reads and compares
them when the task ends (``EmulatedBackend.guard_reads`` makes one per task; see the
class for when it is armed and what a fingerprint is).
"""

from __future__ import annotations

import ctypes
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from .._core.errors import AccessModeError
from ._base import Allocation, Stream
from ._host_memory import element_array


class _Streams(Protocol):
    """What a guard needs of the emulated backend."""

    def pending_calls(self, stream: Stream) -> bool: ...

    def enqueue_call(self, stream: Stream, fn: Callable[[], None]) -> None: ...


__all__ = ["SNAPSHOT_LIMIT", "ReadGuard"]


SNAPSHOT_LIMIT = 64 << 10
"""Read-only instances up to this size are fingerprinted by a copy, larger ones by a
CRC-32 (measured: a copy compares faster for small data; for large data the copies
hold the GIL long enough to stall the device thread, while zlib releases it)."""


_MEMORY = -3  # the key of an allocation's bytes in Allocation.arrays


def _contents(state: Any, allocation: Allocation) -> memoryview | bytes:
    """The bytes of the value in ``allocation`` (the elements of a strided user
    buffer gathered into a copy, never the bytes between them)."""
    if allocation.strides is None:
        kept = allocation.arrays  # the memoryview is made once per allocation
        if kept is None:
            kept = allocation.arrays = {}
        memory: memoryview | None = kept.get(_MEMORY)
        if memory is None or memory.nbytes != state.nbytes:
            memory = kept[_MEMORY] = _memory_at(allocation.ptr, state.nbytes)
        return memory
    elements = element_array(
        allocation.ptr,
        state.shape,
        allocation.strides,
        allocation.dtype.itemsize,
        readonly=True,
    )
    return elements.tobytes()


def _fingerprint(memory: memoryview | bytes) -> bytes | int:
    """What :class:`ReadGuard` compares: a copy of the bytes (about 1 microsecond
    for 8 KB), or their CRC-32 beyond :data:`SNAPSHOT_LIMIT` (about 0.3 ms per MB)."""
    return bytes(memory) if len(memory) <= SNAPSHOT_LIMIT else zlib.crc32(memory)


def _unchanged(memory: memoryview | bytes, fingerprint: bytes | int) -> bool:
    """True when the bytes still match ``fingerprint``."""
    if isinstance(fingerprint, int):
        return zlib.crc32(memory) == fingerprint
    return bytes(memory) == fingerprint


_PyMemoryView_FromMemory = ctypes.pythonapi.PyMemoryView_FromMemory
_PyMemoryView_FromMemory.restype = ctypes.py_object
_PyMemoryView_FromMemory.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)
_PyBUF_READ = 0x100


def _memory_at(ptr: int, nbytes: int) -> memoryview:
    """A read-only memoryview of ``nbytes`` bytes at ``ptr``, without a copy (a
    Python C-API call: unlike a ctypes foreign call, it keeps the GIL, so it does not
    hand the interpreter to the device thread in the middle of a task's end)."""
    view: memoryview = _PyMemoryView_FromMemory(ptr, nbytes, _PyBUF_READ)
    return view


class ReadGuard:
    """Detects writes through the views of a task's ``read()`` dependencies.

    Task views on CUDA advertise writable memory for every mode (PyTorch refuses
    read-only CUDA Array Interface objects), so a body can write data it declared
    ``read()``; no later task would know the data changed. The emulated backend
    catches it: a fingerprint of each read-only instance is taken when the body may
    start (``EmulatedBackend.guard_reads``) and compared when the task ends.

    The guard is armed when the body first reaches the data, so a task whose body
    never does costs nothing: a view or an address of it (:meth:`arm` on the host,
    once the prerequisites ran), the task stream (:meth:`arm` with the stream: the
    fingerprints are taken in stream order, before what the body enqueues); a
    ``t.run`` body reaches the data in one stream operation, which takes and compares
    the fingerprints around the body itself (:meth:`around`).

    The fingerprint is the cheapest one measured: a copy of the bytes up to
    :data:`SNAPSHOT_LIMIT` (a few microseconds per task for small data), beyond it a
    CRC-32 (about 0.3 ms per MB at each end; a change that keeps the CRC goes
    unnoticed with probability 2**-32). Graph-mode and stackable contexts record
    their bodies, which run later, and are not checked.
    """

    __slots__ = ("backend", "entries", "fingerprints")

    def __init__(self, backend: _Streams, entries: list[tuple[Any, Allocation]]) -> None:
        self.backend = backend
        self.entries = entries  # (data state, instance memory)
        self.fingerprints: list[bytes | int] | None = None  # None: not armed

    def arm(self, stream: Stream | None = None) -> None:
        """Take the fingerprints: now, or when ``stream`` gets here if work is still
        queued on it."""
        if self.fingerprints is not None:
            return
        self.fingerprints = []  # armed; filled now or in stream order
        if stream is not None and self.backend.pending_calls(stream):
            self.backend.enqueue_call(stream, self._take)
        else:
            self._take()

    def _take(self) -> None:
        self.fingerprints = _fingerprints(self.entries)

    def around(self, fn: Callable[..., Any], task: Any) -> Callable[..., Any]:
        """``fn`` itself once armed (the check at the end covers it), else ``fn``
        between a fingerprint and a comparison, in the same stream operation."""
        return fn if self.fingerprints is not None else _Guarded(self, fn, task)

    def check(self, stream: Stream, task: Any) -> AccessModeError | None:
        """Compare the fingerprints at the end of ``task``, before its end event.

        ``None`` when the guard was never armed. Returns the error for the first
        changed instance when the task stream holds no more work (the check ran
        now); otherwise the check is enqueued on ``stream`` after that work, and a
        change is captured as an asynchronous error of the context (raised at its
        next ``wait``/``finalize``/``check_errors``), and ``None`` is returned.
        """
        if self.fingerprints is None:
            return None
        if self.backend.pending_calls(stream):
            self.backend.enqueue_call(stream, _DeferredCheck(self, task))
            return None
        return self.compare(self.fingerprints, task)

    def compare(
        self, fingerprints: list[bytes | int], task: Any
    ) -> AccessModeError | None:
        for (state, allocation), fingerprint in zip(self.entries, fingerprints):
            if not _unchanged(_contents(state, allocation), fingerprint):
                return AccessModeError(
                    f"{task._label()} declared read() on logical data {state.label} "
                    "but changed it (a write through its view, its pointer or launched "
                    "work): later tasks would not see the change; declare rw() or "
                    "write() to modify it, or work on a copy"
                )
        return None


def _fingerprints(entries: list[tuple[Any, Allocation]]) -> list[bytes | int]:
    return [_fingerprint(_contents(state, allocation)) for state, allocation in entries]


class _DeferredCheck:
    """A guard's comparison enqueued behind the work of the task's body."""

    __slots__ = ("guard", "task")

    def __init__(self, guard: ReadGuard, task: Any) -> None:
        self.guard = guard
        self.task = task

    def __call__(self) -> None:
        fingerprints = self.guard.fingerprints
        assert fingerprints is not None  # taken before, in stream order
        error = self.guard.compare(fingerprints, self.task)
        if error is not None:
            raise error


class _Guarded:
    """A body enqueued in stream order with the fingerprints of the task's reads
    taken just before it and compared just after it."""

    __slots__ = ("guard", "fn", "task")

    def __init__(self, guard: ReadGuard, fn: Callable[..., Any], task: Any) -> None:
        self.guard = guard
        self.fn = fn
        self.task = task

    def __call__(self, *arguments: Any) -> None:
        before = _fingerprints(self.guard.entries)
        self.fn(*arguments)
        error = self.guard.compare(before, self.task)
        if error is not None:
            raise error
