"""The copies of a runtime: instances given memory within the budget, and the copies
between them.

:func:`enact_moves` carries out the moves of a plan (``Plan.moves``: the instances a
task's accesses need allocated, or filled from a valid instance) on the hot path of
every acquisition that needs them: allocations first, then the copies, in stream
order (on a device's transfer stream in stream mode, so they run ahead of the task's
other prerequisites). :func:`allocate` keeps a device within its memory budget,
evicting first (``_engine/eviction.py``) when an allocation would exceed it, and again
when the device itself runs out; :func:`copy_instance` is one copy, plain or pitched
(strided user buffers). :func:`copy_into` is an internal copy outside any task (a
write-back, a scope's refresh, a copy for ``wait()``), ordered after its
prerequisites on a stream of the target's place; :func:`writeback` brings a user's
buffer up to date.

Every function takes the runtime (what it uses of it: :class:`Owner`); the lock is
held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._core.access import READ
from .._core.errors import OutOfMemoryError, work_ids
from .._places.gridwork import allocate_composite
from .._places.numbering import LAYOUT_IDS
from ..backends._base import HOST
from . import eviction as eviction
from . import reductions as reductions

if TYPE_CHECKING:
    from .._core.coherence import DataState, Instance
    from .._core.plan import Plan
    from .._core.streams import StreamPools
    from .._instruments.seam import Instruments, WorkRecord
    from ..backends._base import Event, Stream

__all__ = [
    "Owner",
    "allocate",
    "copy_instance",
    "copy_into",
    "enact_moves",
    "writeback",
]

_BYTES = np.dtype(np.uint8)


class Owner(eviction.Owner, Protocol):
    """What the copies use of the runtime (``_engine.runtime.Runtime``), besides what
    eviction does."""

    instruments: Instruments
    root_pools: StreamPools
    caller_stream: Stream | None

    def current_pools(self) -> StreamPools:
        """The streams of the calling thread's recording level."""

    def stream_on(self, pools: StreamPools, device: int, events: list[Event]) -> Stream:
        """A stream for internal work at place ``device``, ordered after ``events``."""

    def order_after(self, stream: Stream, events: list[Event]) -> None:
        """Make ``stream`` wait for the ``events`` it does not already imply."""


def enact_moves(
    rt: Owner,
    plan: Plan,
    stream: Stream,
    ident: int,
    record: WorkRecord | None,
    what: Any,
) -> None:
    """Allocate, then copy, what ``plan.moves`` names, in stream order.

    In stream mode a copy into a device's instance is made on that device's
    transfer stream (``StreamPools.transfer``), ordered after its own data only
    (the data's last writer, the source's readiness), and the task's stream waits
    for it: copies run ahead, in submission order, rather than queued behind the
    task's other prerequisites on a compute stream. Other copies (into host or
    managed memory, and every copy graph mode records) are made on the task's
    stream, after its waits.

    Room under the memory budget was made before the plan was decided
    (``_eviction.room_for``); should the device itself run out, an eviction may
    still take a source of these copies, which are then made from another valid
    instance (the one it wrote back, at worst).
    """
    moves = plan.moves
    assert moves is not None
    # A copy's target is allocated on the stream of its copy; an instance only
    # allocated (a write) on the task's stream, which uses it next.
    lanes = [
        stream if source is None else _lane(rt, access.device, stream)
        for access, source in moves
    ]
    # Every allocation before any copy: an allocation failure (out of memory)
    # then leaves no copy in flight that no later work would know about.
    sources = tuple(source for _, source in moves if source is not None)
    for (access, _), lane in zip(moves, lanes):
        instance = access.instance
        assert instance is not None
        if instance.allocation is None:
            allocate(rt, access.state, instance, lane, record, plan, what, sources)
    copied: list[tuple[DataState, Instance, Instance, Stream]] = []
    backend = rt.backend
    try:
        for (access, source), lane in zip(moves, lanes):
            if source is not None:
                target = access.instance
                assert target is not None
                state = access.state
                if source.allocation is None:  # evicted: valid elsewhere
                    source = state.valid_source(access.device)
                    assert source is not None and source.allocation is not None
                    rt.order_after(lane, list(source.ready.values()))
                ready = False
                if lane is not stream:  # the copy's own prerequisites
                    waits = [*state.tracker.prerequisites(READ), *source.ready.values()]
                    rt.order_after(lane, waits)
                    # A host source nothing writes any more may be read now, ahead
                    # of the stream (the CUDA backend's staging of pageable memory).
                    ready = source.device < 0 and all(map(backend.query, waits))
                copy_instance(rt, state, target, source, lane, record, ready)
                copied.append((state, target, source, lane))
    except BaseException:
        if copied:  # the copies in flight read their sources: order writers
            for lane in {lane for _, _, _, lane in copied}:
                failed = backend.record(lane)
                for state, _, _, other in copied:
                    if other is lane:
                        state.tracker.release(READ, failed)
        raise
    if copied:
        _copies_made(rt, copied, stream, ident, record)


def _copies_made(
    rt: Owner,
    copied: list[tuple[DataState, Instance, Instance, Stream]],
    stream: Stream,
    ident: int,
    record: WorkRecord | None,
) -> None:
    """After the copies of :func:`enact_moves`: an event on each stream that copied,
    the targets valid from it, and the task's ``stream`` ordered after the copies
    made on other streams."""
    backend = rt.backend
    events: dict[Stream, Event] = {}
    for _, _, _, lane in copied:
        if lane not in events:
            event = events[lane] = backend.record(lane)
            if record is not None:
                event.producer = ident
    mode = rt.mode
    recording = mode.recording()
    for state, target, source, lane in copied:
        state.copied(target, source, events[lane])
        if recording:
            mode.wrote(state, target)
    if len(events) > 1 or stream not in events:
        rt.order_after(
            stream,
            [event for lane, event in events.items() if lane is not stream],
        )


def _lane(rt: Owner, device: int, stream: Stream) -> Stream:
    """The stream a copy into an instance at ``device`` is made on (see
    :func:`enact_moves`)."""
    if device < 0 or rt.mode.graph or rt.caller_stream is not None:
        return stream
    return rt.root_pools.transfer(device)


def allocate(
    rt: Owner,
    state: DataState,
    instance: Instance,
    stream: Stream,
    record: WorkRecord | None,
    plan: Plan | None,
    what: Any,
    keep: tuple[Instance, ...] = (),
    private: bool = False,
) -> None:
    """Give ``instance`` memory, within its device's budget: evict first if it
    would exceed it, and again if the device itself runs out (``plan``, the
    acquisition being made, and ``keep`` stay). A ``private`` instance (a
    reduction's) counts against the budget but is never evicted."""
    device = instance.device
    nbytes = state.nbytes
    dtype = state.dtype or _BYTES
    if device <= LAYOUT_IDS:
        instance.allocation = allocate_composite(
            rt.backend, device, nbytes, dtype, state.shape, what
        )
    elif device < 0 or not nbytes:
        instance.allocation = rt.backend.allocate(device, nbytes, stream, dtype)
    else:
        memory = rt.memory
        if memory.over(device, nbytes) > 0:
            eviction.make_room(rt, device, nbytes, plan, keep, what)
        try:
            instance.allocation = rt.backend.allocate(device, nbytes, stream, dtype)
        except OutOfMemoryError as exc:
            eviction.make_room(rt, device, nbytes, plan, keep, what, exhausted=exc)
            instance.allocation = rt.backend.allocate(device, nbytes, stream, dtype)
        memory.charge(state, instance, evictable=not private)
    rt.instruments.allocated(record, device, nbytes)


def copy_instance(
    rt: Owner,
    state: DataState,
    target: Instance,
    source: Instance,
    stream: Stream,
    record: WorkRecord | None,
    source_ready: bool = False,
) -> None:
    """Copy the value of ``source`` into ``target`` on ``stream`` (a pitched copy
    when either is a strided user buffer). ``source_ready``: every write to the
    source has completed (``Backend.copy``)."""
    dst, src = target.allocation, source.allocation
    assert dst is not None and src is not None
    if dst.strides is None and src.strides is None:
        rt.backend.copy(dst.ptr, src.ptr, state.nbytes, stream, source_ready)
    elif state.nbytes:
        dtype = state.dtype
        assert dtype is not None
        rt.backend.copy_strided(
            dst.ptr,
            dst.strides,
            src.ptr,
            src.strides,
            state.shape,
            dtype.itemsize,
            stream,
            source_ready,
        )
    rt.instruments.copied(record, state.label, source.device, target.device, state.nbytes)


def copy_into(
    rt: Owner,
    state: DataState,
    target: Instance,
    source: Instance,
    prerequisites: list[Event],
    label: str,
    keep: bool = True,
    copy_title: str | None = None,
) -> Event:
    """Copy ``source`` into ``target`` on a stream of the target's place, ordered
    after ``prerequisites``; released as a read of the data.

    ``keep=False`` copies into a temporary buffer that is not an instance. In a
    loop body the copy runs on the loop's device (CUDA bodies are single-device).
    ``copy_title``: the copy moves data for a scope (a loop body, a launchable
    graph) rather than writing back; instruments see a ``"copy"`` so titled.
    """
    device = target.device if target.device >= 0 else HOST
    mode = rt.mode
    loop_device = mode.copy_device()
    if loop_device is not None:
        device = loop_device
    stream = rt.stream_on(rt.current_pools(), device, prerequisites)
    backend = rt.backend
    ident = next(work_ids)
    record = None
    if rt.instruments.attached:
        kind, title = (
            ("copy", copy_title)
            if copy_title is not None
            else ("writeback", "write-back")
            if keep
            else ("wait", "wait")
        )
        record = rt.instruments.open(
            ident, kind, f"{title} {label}", target.device, stream, [], prerequisites
        )
    if target.allocation is None:
        allocate(
            rt, state, target, stream, record, None, f"copying {label}", (target, source)
        )
    copy_instance(rt, state, target, source, stream, record)
    if record is not None:
        rt.instruments.body(record)
        rt.instruments.ending(ident)
    event = backend.record(stream)
    if record is not None:
        rt.instruments.ended(record, event)
    if keep:
        state.copied(target, source, event)
        if mode.recording():
            mode.wrote(state, target)
    state.tracker.release(READ, event)
    return event


def writeback(rt: Owner, state: DataState) -> None:
    """Bring the user's buffer of ``state`` up to date (stream-ordered); pending
    reductions are combined first."""
    if state.pending is not None:
        reductions.flush(rt, state, None, "writing back")
    plan = state.writeback_plan()
    if plan is not None:
        reference, source, prerequisites = plan
        copy_into(rt, state, reference, source, prerequisites, state.label)
