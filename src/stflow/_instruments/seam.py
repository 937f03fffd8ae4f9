"""Seeing what the runtime did: one instrumentation seam and what listens to it.

The runtime calls the methods of its *instruments* at fixed points of the life of
every piece of work (a task, a host callback, an internal copy):

``work_submitted``  the work's stream is chosen and its waits are enqueued, before any
                    copy (stream order: what an instrument enqueues now precedes them)
``transfer``        a copy was enqueued for the work (before its completion event)
``allocation``      an instance buffer was allocated
``work_body``       copies are enqueued; the body (or callback) comes next
``work_ending``     the body is over; the work's end event comes next
``work_ended``      the work's end event was recorded
``fence``           ``fence()`` was called
``scope_opened``    a scope of a ``stackable_context`` opened (``while_loop()``,
                    ``repeat(n)``, ``graph_scope()``, ...); the work submitted until
                    the matching ``scope_closed`` is recorded in it
``scope_closed``    that scope closed (or was discarded: nothing it recorded runs)

When no instrument is attached the runtime skips all of this (one truth test per
call site). Counters for :meth:`context.statistics` are kept by the runtime itself.

The :class:`Instruments` part of a runtime keeps the attached instruments and the
:class:`Counters` behind ``ctx.statistics()``; it is part of the compiled build (see
``_compile.py``). The instruments that ship with stflow are in ``_instruments/dot.py``
(task graphs) and ``_instruments/timeline.py`` (traces, NVTX ranges).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._compile import mypyc_attr

__all__ = [
    "Counters",
    "Instrument",
    "Instruments",
    "Statistics",
    "WorkRecord",
    "byte_size_text",
    "direction",
    "place_name",
]


def place_name(device: int) -> str:
    if device >= 0:
        return f"dev{device}"
    return {-1: "host", -2: "managed", -6: "user"}.get(device, str(device))


@dataclass
class WorkRecord:
    """What an instrument learns about one piece of work.

    Attributes
    ----------
    ident : int
        Unique within the process.
    kind : str
        ``"task"``, ``"host_launch"``, ``"wait"`` (the copy of ``ctx.wait()``),
        ``"writeback"`` (into the user's buffer, at finalize or eviction) or
        ``"copy"`` (data a scope of a ``stackable_context`` reads: copied once
        before a loop body or a launchable graph, or refreshed when it closes).
    label : str
        The symbol, or a generated name.
    device : int
        Execution place (``-1`` for the host).
    stream : int
        Raw handle of the stream it runs on.
    accesses : list of tuple
        ``(data key, data label, mode, place)`` for each access.
    predecessors : list of int
        Idents of the work whose events it was ordered after (after stream-order
        pruning: an access implied by stream order may be missing here).
    """

    ident: int
    kind: str
    label: str
    device: int
    stream: int
    accesses: list[tuple[int, str, int, int]]
    predecessors: list[int]
    transfers: list[tuple[str, int, int, int]] = field(default_factory=list)
    native_stream: Any = None
    """The backend's stream object (for instruments that enqueue on it)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Instrument:
    """Base class of instruments: every method is optional and does nothing."""

    def attach(self, runtime: Any) -> None:
        """Called once when attached to a context's runtime."""

    def work_submitted(self, record: WorkRecord) -> None:
        pass

    def transfer(
        self, record: WorkRecord, data: str, source: int, target: int, nbytes: int
    ) -> None:
        pass

    def allocation(self, record: WorkRecord | None, device: int, nbytes: int) -> None:
        pass

    def work_body(self, record: WorkRecord) -> None:
        pass

    def work_ending(self, record: WorkRecord) -> None:
        pass

    def work_ended(self, record: WorkRecord) -> None:
        pass

    def fence(self) -> None:
        pass

    def scope_opened(self, kind: str, count: int | None) -> None:
        """A scope opened: ``kind`` is ``"while"``, ``"repeat"`` (``count``
        iterations), ``"graph"`` or ``"launchable"``; scopes nest per thread."""

    def scope_closed(self, discarded: bool) -> None:
        """The innermost scope of the calling thread closed (``discarded``: it
        raised, or never runs, and nothing it recorded runs)."""

    def finalized(self) -> None:
        """Called after the context completed all work (timestamps are ready)."""


@dataclass(frozen=True)
class Statistics:
    """Counters of a context so far (``ctx.statistics()``)."""

    backend: str
    tasks: int
    host_callbacks: int
    copies_h2d: int
    copies_d2h: int
    copies_d2d: int
    copies_h2h: int
    bytes_h2d: int
    bytes_d2h: int
    bytes_d2d: int
    bytes_h2h: int
    allocations: int
    allocated_bytes: int
    evictions: int
    waits_issued: int
    waits_skipped: int
    fences: int
    graph_instantiations: int = 0
    graph_updates: int = 0
    graph_cache_hits: int = 0
    seed: int | None = None
    evicted_bytes: int = 0
    written_back_bytes: int = 0

    def __str__(self) -> str:
        size = byte_size_text
        return (
            f"{self.tasks} tasks, {self.host_callbacks} host callbacks; copies "
            f"H2D {self.copies_h2d} ({size(self.bytes_h2d)}), D2H {self.copies_d2h} "
            f"({size(self.bytes_d2h)}), D2D {self.copies_d2d} "
            f"({size(self.bytes_d2d)}), H2H {self.copies_h2h} "
            f"({size(self.bytes_h2h)}); {self.allocations} allocations "
            f"({size(self.allocated_bytes)}); waits issued {self.waits_issued}, "
            f"skipped {self.waits_skipped}; {self.evictions} evictions "
            f"({size(self.evicted_bytes)}, {size(self.written_back_bytes)} written "
            "back)"
        )


def byte_size_text(nbytes: int) -> str:
    """``"12 B"``, ``"1.5 KiB"``, ..., ``"3.0 GiB"``."""
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{nbytes} B"  # pragma: no cover


def direction(source: int, target: int) -> str:
    """``"h2d"``, ``"d2h"``, ``"d2d"`` or ``"h2h"`` (managed memory counts as host)."""
    return ("d" if source >= 0 else "h") + "2" + ("d" if target >= 0 else "h")


class Counters:
    """Plain counters behind ``ctx.statistics()`` (cheap enough for the hot path)."""

    __slots__ = (
        "tasks",
        "host_callbacks",
        "copies",
        "bytes",
        "allocations",
        "allocated_bytes",
        "waits_issued",
        "waits_skipped",
        "fences",
    )

    def __init__(self) -> None:
        self.tasks = 0
        self.host_callbacks = 0
        self.copies = {"h2d": 0, "d2h": 0, "d2d": 0, "h2h": 0}
        self.bytes = {"h2d": 0, "d2h": 0, "d2d": 0, "h2h": 0}
        self.allocations = 0
        self.allocated_bytes = 0
        self.waits_issued = 0
        self.waits_skipped = 0
        self.fences = 0


class Instruments:
    """The instrumentation part of a runtime: its counters and attached instruments.

    The runtime calls it at the fixed points of every piece of work (see the module
    docstring). :meth:`open` returns ``None`` when no instrument listens, and every
    other notification takes that record, so the hot path pays one test.
    """

    __slots__ = ("attached", "counters", "records")

    def __init__(self) -> None:
        self.attached: list[Instrument] = []
        self.counters = Counters()
        self.records: dict[int, WorkRecord] = {}

    def attach(self, instrument: Instrument, runtime: Any) -> None:
        instrument.attach(runtime)
        self.attached.append(instrument)

    def open(
        self,
        ident: int,
        kind: str,
        label: str,
        device: int,
        stream: Any,
        accesses: list[tuple[int, str, int, int]],
        prerequisites: list[Any],
    ) -> WorkRecord | None:
        """A record of new work, told to the instruments (``None`` when none listens)."""
        if not self.attached:
            return None
        predecessors: list[int] = []
        for event in prerequisites:
            producer = event.producer
            if producer is not None and producer not in predecessors:
                predecessors.append(producer)
        record = WorkRecord(
            ident,
            kind,
            label,
            device,
            stream.handle,
            accesses,
            predecessors,
            native_stream=stream,
        )
        self.records[ident] = record
        for instrument in self.attached:
            instrument.work_submitted(record)
        return record

    def allocated(self, record: WorkRecord | None, device: int, nbytes: int) -> None:
        counters = self.counters
        counters.allocations += 1
        counters.allocated_bytes += nbytes
        if record is not None:
            for instrument in self.attached:
                instrument.allocation(record, device, nbytes)

    def copied(
        self, record: WorkRecord | None, data: str, source: int, target: int, nbytes: int
    ) -> None:
        way = direction(source, target)
        counters = self.counters
        counters.copies[way] += 1
        counters.bytes[way] += nbytes
        if record is not None:
            record.transfers.append((data, source, target, nbytes))
            for instrument in self.attached:
                instrument.transfer(record, data, source, target, nbytes)

    def body(self, record: WorkRecord) -> None:
        for instrument in self.attached:
            instrument.work_body(record)

    def ending(self, ident: int) -> WorkRecord | None:
        """The record of work ``ident`` about to record its end event, if any."""
        record = self.records.pop(ident, None)
        if record is not None:
            for instrument in self.attached:
                instrument.work_ending(record)
        return record

    def ended(self, record: WorkRecord, event: Any) -> None:
        event.producer = record.ident
        for instrument in self.attached:
            instrument.work_ended(record)

    def fence(self) -> None:
        self.counters.fences += 1
        for instrument in self.attached:
            instrument.fence()

    def scope_opened(self, kind: str, count: int | None) -> None:
        for instrument in self.attached:
            instrument.scope_opened(kind, count)

    def scope_closed(self, discarded: bool) -> None:
        for instrument in self.attached:
            instrument.scope_closed(discarded)

    def finalized(self) -> list[Exception]:
        """Tell the instruments the work is complete; returns their failures."""
        failures: list[Exception] = []
        for instrument in self.attached:
            try:
                instrument.finalized()
            except Exception as exc:  # noqa: BLE001 - reported like async errors
                failures.append(exc)
        return failures

    def statistics(
        self,
        backend: Any,
        graph_instantiations: int,
        graph_updates: int,
        memory: Any = None,
    ) -> Statistics:
        counters = self.counters
        return Statistics(
            backend=backend.name,
            tasks=counters.tasks,
            host_callbacks=counters.host_callbacks,
            copies_h2d=counters.copies["h2d"],
            copies_d2h=counters.copies["d2h"],
            copies_d2d=counters.copies["d2d"],
            copies_h2h=counters.copies["h2h"],
            bytes_h2d=counters.bytes["h2d"],
            bytes_d2h=counters.bytes["d2h"],
            bytes_d2d=counters.bytes["d2d"],
            bytes_h2h=counters.bytes["h2h"],
            allocations=counters.allocations,
            allocated_bytes=counters.allocated_bytes,
            evictions=0 if memory is None else memory.evictions,
            evicted_bytes=0 if memory is None else memory.evicted_bytes,
            written_back_bytes=0 if memory is None else memory.written_back_bytes,
            waits_issued=counters.waits_issued,
            waits_skipped=counters.waits_skipped,
            fences=counters.fences,
            seed=backend.seed,
            graph_instantiations=graph_instantiations,
            graph_updates=graph_updates,
        )
