"""Copies between pageable host memory and devices, staged by host threads.

A user array too large to page-lock at once (``STFLOW_PIN_LIMIT``; locking 8 GiB takes
about 0.23 s, during which the driver holds its other calls) stays pageable, and its
copies to and from devices go through a ring of pinned *chunks* (:data:`CHUNK` bytes
each, :data:`SLOTS` of them, allocated once per process). Host threads fill and drain
the chunks (NumPy copies, which release the GIL); the device side stays in stream
order through *flags*, 32-bit counters in pinned memory that a stream waits on
(``cuStreamWaitValue32``) and a host thread sets when its part is done.

A copy is cut into chunks along its first axis (a tile of a matrix: a band of its
rows). Each chunk takes a *ticket*: the next slot of the ring, round robin, and the
slot's next flag value.

To a device, per chunk::

    host thread                         the copy's stream
    gather the source into the chunk    wait for the flag to reach the ticket's value
    set the flag                        copy the chunk into the device, 2-D pitched
                                        record the slot's event (the chunk is free)

From a device, per chunk (the waits for the flags after every chunk's copy, so the
chunks of one copy drain side by side)::

    the copy's stream                   host thread
    wait for the slot's last event
    copy the device region into the chunk
    host callback: start the drain ---> scatter the chunk into the destination
    wait for the flag                   set the flag
    record the slot's event

:data:`THREADS` host threads take the jobs in ticket order, each once it may run: a
job that needs the stream to reach its point (a drain, or a gather whose source may
still be written) waits at the head of the queue for the host callback that
*triggers* it, and a chunk whose previous use is still in flight waits for that use's
event on the thread that took it (the others take the next jobs meanwhile). A gather whose source the
runtime declared ready (``source_ready``: every write to it has completed) is
triggered at once: the chunks of a matrix's tiles are filled ahead of the streams,
while earlier copies and tasks run. Because tickets are taken and the jobs started in
one order, and every wait is for an earlier ticket, nothing waits in a circle.

A job that fails still sets its flag (the stream must not wait forever) and reports
the error to the stream's owner, as a host callback does.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _cuda_driver as _cu
from ._base import Stream, pointer_array
from ._host_memory import element_array

__all__ = ["CHUNK", "SLOTS", "Stager", "bands"]

CHUNK = 16 << 20
"""Bytes of one pinned chunk: what one host job moves and one device copy carries
(large, so that few jobs share the interpreter with the submitting thread: each one
waits for the GIL twice, up to the interpreter's switch interval each time)."""
SLOTS = 16
"""Chunks in the ring (256 MiB pinned, allocated at the first staged copy)."""
THREADS = min(8, os.cpu_count() or 1)
"""Host threads filling and draining chunks (host memory bandwidth saturates at about
eight on the GPU hosts measured)."""


def bands(rows: int, row_bytes: int, chunk: int = CHUNK) -> list[tuple[int, int]]:
    """``(first row, rows)`` of the bands of at most ``chunk`` bytes a copy of
    ``rows`` rows of ``row_bytes`` bytes is cut into (``[]`` when one row is larger
    than a chunk)."""
    if row_bytes > chunk or rows <= 0:
        return []
    step = max(1, chunk // max(row_bytes, 1))
    return [(first, min(step, rows - first)) for first in range(0, rows, step)]


class _Job:
    """One chunk's host work: ``run`` once ``triggered`` and the chunk is free."""

    __slots__ = ("work", "slot", "value", "before", "triggered", "stream")

    def __init__(
        self,
        work: Callable[[], None],
        slot: int,
        value: int,
        before: Any,
        triggered: bool,
        stream: Stream,
    ) -> None:
        self.work = work
        self.slot = slot
        self.value = value
        self.before = before  # the event of the slot's previous use, or None
        self.triggered = triggered
        self.stream = stream


class Stager:
    """The ring of pinned chunks and the threads that fill and drain them (see the
    module docstring). ``memory`` is the CUDA backend (its copies and host callbacks);
    ``chunk`` bytes per chunk, ``slots`` chunks, ``threads`` host threads."""

    def __init__(
        self,
        memory: Any,
        chunk: int = CHUNK,
        slots: int = SLOTS,
        threads: int = THREADS,
    ) -> None:
        self._memory = memory
        self._chunk, self._slots, self._threads = chunk, slots, threads
        self._lock = threading.Lock()  # tickets, slot events: one copy at a time
        self._ready = threading.Condition()  # the queue of jobs
        self._queue: deque[_Job] = deque()
        self._ring = 0
        self._flags: np.ndarray | None = None
        self._flags_device = 0
        self._tickets = 0
        self._values = [0] * slots  # the flag value of each slot's last use
        self._events: list[Any] = [None] * slots  # (handle, device) of the last use
        self._spare: dict[int, list[Any]] = {}  # device -> free event handles
        self._started = False

    # -- submission (the runtime's thread) ---------------------------------------------
    def to_device(
        self,
        dst: int,
        dst_strides: tuple[int, ...] | None,
        src: int,
        src_strides: tuple[int, ...] | None,
        shape: tuple[int, ...],
        itemsize: int,
        stream: Stream,
        source_ready: bool,
    ) -> bool:
        """Enqueue a copy from pageable ``src`` into device memory; ``False`` (nothing
        done) when a row of it is larger than a chunk."""
        cut = self._bands(dst, dst_strides, src, src_strides, shape, itemsize)
        if cut is None:
            return False
        memory = self._memory
        with self._lock:
            self._start()
            for target, source, part in cut:
                slot, value, before = self._ticket()
                chunk = self._ring + slot * self._chunk
                gather = _gather(chunk, source, src_strides, part, itemsize)
                job = _Job(gather, slot, value, before, source_ready, stream)
                self._post(job)
                if not source_ready:
                    memory.launch_host_func(stream, self._trigger(job))
                self._wait_flag(stream, slot, value)
                memory._pitched_copies(
                    target, dst_strides, chunk, None, part, itemsize, stream
                )
                self._mark(slot, stream)
        return True

    def to_host(
        self,
        dst: int,
        dst_strides: tuple[int, ...] | None,
        src: int,
        src_strides: tuple[int, ...] | None,
        shape: tuple[int, ...],
        itemsize: int,
        stream: Stream,
    ) -> bool:
        """Enqueue a copy from device memory into pageable ``dst``; ``False`` as for
        :meth:`to_device`. The bands of up to one ring are all copied into their
        chunks before the stream waits for the first drain, so they drain side by
        side."""
        cut = self._bands(dst, dst_strides, src, src_strides, shape, itemsize)
        if cut is None:
            return False
        memory = self._memory
        with self._lock:
            self._start()
            for group in range(0, len(cut), self._slots):
                drains = []
                for target, source, part in cut[group : group + self._slots]:
                    slot, value, before = self._ticket()
                    chunk = self._ring + slot * self._chunk
                    if before is not None:  # the chunk's previous use is done
                        self._stream_wait(stream, before)
                    memory._pitched_copies(
                        chunk, None, source, src_strides, part, itemsize, stream
                    )
                    scatter = _scatter(target, dst_strides, chunk, part, itemsize)
                    job = _Job(scatter, slot, value, None, False, stream)
                    self._post(job)
                    memory.launch_host_func(stream, self._trigger(job))
                    drains.append((slot, value))
                for slot, value in drains:
                    self._wait_flag(stream, slot, value)
                for slot, _ in drains:
                    self._mark(slot, stream)
        return True

    def _bands(
        self,
        dst: int,
        dst_strides: tuple[int, ...] | None,
        src: int,
        src_strides: tuple[int, ...] | None,
        shape: tuple[int, ...],
        itemsize: int,
    ) -> list[tuple[int, int, tuple[int, ...]]] | None:
        """``(dst, src, shape)`` of each band of a copy (:func:`bands` along the
        first axis), or ``None`` when a row is larger than a chunk."""
        if not shape:
            shape = (1,)
        band_shape = tuple(shape[1:])
        row_bytes = math.prod(band_shape) * itemsize
        dst_step = dst_strides[0] if dst_strides else row_bytes
        src_step = src_strides[0] if src_strides else row_bytes
        parts = bands(shape[0], row_bytes, self._chunk)
        if not parts:
            return None
        return [
            (dst + first * dst_step, src + first * src_step, (rows, *band_shape))
            for first, rows in parts
        ]

    def _ticket(self) -> tuple[int, int, Any]:
        """The next chunk: its slot, its flag's value for this use, and the event of
        its previous use (now this use's to consume). The lock is held."""
        slot = self._tickets % self._slots
        self._tickets += 1
        value = self._values[slot] = (self._values[slot] + 1) & 0xFFFFFFFF
        before = self._events[slot]
        self._events[slot] = None
        return slot, value, before

    def _post(self, job: _Job) -> None:
        with self._ready:
            self._queue.append(job)
            if job.triggered:
                self._ready.notify()

    def _trigger(self, job: _Job) -> Callable[[], None]:
        ready = self._ready

        def trigger() -> None:  # a host callback: the stream reached the job
            with ready:
                job.triggered = True
                ready.notify()

        return trigger

    def _wait_flag(self, stream: Stream, slot: int, value: int) -> None:
        d = _cu.driver
        (err,) = d.cuStreamWaitValue32(
            stream.native,  # type: ignore[attr-defined]
            self._flags_device + 4 * slot,
            value,
            int(d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_EQ),
        )
        if err:
            raise _cu.error(err, f"{stream!r} waiting for a staged chunk") from None

    def _stream_wait(self, stream: Stream, before: Any) -> None:
        handle, device = before
        (err,) = _cu.driver.cuStreamWaitEvent(stream.native, handle, 0)  # type: ignore
        self._release_event(handle, device)
        if err:
            raise _cu.error(err, f"{stream!r} waiting for a staging chunk") from None

    def _mark(self, slot: int, stream: Stream) -> None:
        """Record the event after which the chunk of ``slot`` is free again."""
        device = stream.ordinal
        with self._ready:
            spare = self._spare.get(device)
            handle = spare.pop() if spare else None
        if handle is None:
            handle = self._memory._new_event(device)
        (err,) = _cu.driver.cuEventRecord(handle, stream.native)  # type: ignore
        if err:
            raise _cu.error(err, f"cuEventRecord on {stream!r}") from None
        self._events[slot] = (handle, device)

    def _release_event(self, handle: Any, device: int) -> None:
        with self._ready:
            self._spare.setdefault(device, []).append(handle)

    # -- the ring and the threads ------------------------------------------------------
    def _start(self) -> None:
        """Allocate the ring and the flags, start the threads (first use; the lock
        is held)."""
        if self._started:
            return
        d = _cu.driver
        memory = self._memory
        memory._ensure_context()
        portable = d.CU_MEMHOSTALLOC_PORTABLE
        size, slots = self._chunk * self._slots, self._slots
        self._ring = int(
            _cu.check(
                d.cuMemHostAlloc(size, portable),
                f"allocating {size} bytes of pinned staging chunks",
            )
        )
        flags = int(
            _cu.check(
                d.cuMemHostAlloc(4 * slots, portable | d.CU_MEMHOSTALLOC_DEVICEMAP),
                "allocating the staging flags",
            )
        )
        self._flags = pointer_array(flags, (slots,), np.dtype(np.uint32), False, None)
        self._flags[:] = 0
        self._flags_device = int(
            _cu.check(d.cuMemHostGetDevicePointer(flags, 0), "mapping the staging flags")
        )
        for number in range(self._threads):
            threading.Thread(
                target=self._work, name=f"stflow-stage-{number}", daemon=True
            ).start()
        self._started = True

    def _work(self) -> None:
        """A host thread: take the jobs in ticket order, each once it may run, and
        run it. A job waits here for its chunk's previous use, on the device (no
        lock held: the next thread takes the next job meanwhile)."""
        self._memory._ensure_context()
        ready, queue = self._ready, self._queue
        flags = self._flags
        assert flags is not None
        while True:
            with ready:
                while not (queue and queue[0].triggered):
                    ready.wait()
                job = queue.popleft()
                if queue and queue[0].triggered:
                    ready.notify()  # the next one, to another thread
            try:
                if job.before is not None:
                    handle, device = job.before
                    err = _cu.driver.cuEventSynchronize(handle)[0]
                    self._release_event(handle, device)
                    if err:
                        raise _cu.error(err, "waiting for a staging chunk")
                job.work()
            except BaseException as exc:  # noqa: BLE001 - reported, never lost
                self._report(job, exc)
            finally:
                flags[job.slot] = job.value  # the stream goes on, even after a failure

    @staticmethod
    def _report(job: _Job, exc: BaseException) -> None:
        sink = job.stream.error_sink
        if sink is not None:
            sink(exc)
        else:
            warnings.warn(
                f"stflow: a staged copy with no owner failed: {exc!r}",
                RuntimeWarning,
                stacklevel=1,
            )


def _gather(
    chunk: int,
    src: int,
    src_strides: tuple[int, ...] | None,
    shape: tuple[int, ...],
    itemsize: int,
) -> Callable[[], None]:
    """The host job filling ``chunk`` (its arrays made now, on the submitting
    thread: the job itself is one NumPy copy, which releases the GIL)."""
    return functools.partial(
        np.copyto,
        element_array(chunk, shape, None, itemsize),
        element_array(src, shape, src_strides, itemsize, readonly=True),
    )


def _scatter(
    dst: int,
    dst_strides: tuple[int, ...] | None,
    chunk: int,
    shape: tuple[int, ...],
    itemsize: int,
) -> Callable[[], None]:
    """The host job draining ``chunk`` into ``dst`` (as :func:`_gather`)."""
    return functools.partial(
        np.copyto,
        element_array(dst, shape, dst_strides, itemsize),
        element_array(chunk, shape, None, itemsize, readonly=True),
    )
