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

When no instrument is attached the runtime skips all of this (one truth test per
call site). Counters for :meth:`context.statistics` are kept by the runtime itself.

Three instruments ship with stflow: :class:`DotRecorder` (the inferred task graph in
Graphviz DOT), :class:`TraceRecorder` (a Chrome / Perfetto timeline, spans timed on the
device) and :class:`NvtxRanges` (NVTX ranges named after tasks, for Nsight Systems).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Counters", "DotRecorder", "Instrument", "Instruments", "NvtxRanges",
           "Statistics", "TraceRecorder", "WorkRecord"]

_MODES = {1: "read", 2: "write", 3: "rw"}


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
        ``"task"``, ``"host_launch"``, ``"wait"`` or ``"writeback"``.
    label : str
        The symbol, or a generated name.
    device : int
        Execution place (``-1`` for the host).
    stream : int
        Raw handle of the stream it runs on.
    accesses : list of (data key, data label, mode, place)
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


class Instrument:
    """Base class of instruments: every method is optional and does nothing."""

    def attach(self, runtime: Any) -> None:
        """Called once when attached to a context's runtime."""

    def work_submitted(self, record: WorkRecord) -> None:
        pass

    def transfer(self, record: WorkRecord, data: str, source: int, target: int,
                 nbytes: int) -> None:
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

    def __str__(self) -> str:
        return (f"{self.tasks} tasks, {self.host_callbacks} host callbacks; copies "
                f"H2D {self.copies_h2d} ({_size(self.bytes_h2d)}), D2H {self.copies_d2h} "
                f"({_size(self.bytes_d2h)}), D2D {self.copies_d2d} "
                f"({_size(self.bytes_d2d)}), H2H {self.copies_h2h} "
                f"({_size(self.bytes_h2h)}); {self.allocations} allocations "
                f"({_size(self.allocated_bytes)}); waits issued {self.waits_issued}, "
                f"skipped {self.waits_skipped}; {self.evictions} evictions")


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    return f"{nbytes} B"  # pragma: no cover


def direction(source: int, target: int) -> str:
    """``"h2d"``, ``"d2h"``, ``"d2d"`` or ``"h2h"`` (managed memory counts as host)."""
    return ("d" if source >= 0 else "h") + "2" + ("d" if target >= 0 else "h")


class Counters:
    """Plain counters behind ``ctx.statistics()`` (cheap enough for the hot path)."""

    __slots__ = ("tasks", "host_callbacks", "copies", "bytes", "allocations",
                 "allocated_bytes", "waits_issued", "waits_skipped", "fences")

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

    def open(self, ident: int, kind: str, label: str, device: int, stream: Any,
             accesses: list[tuple[int, str, int, int]], prerequisites: list[Any]
             ) -> WorkRecord | None:
        """A record of new work, told to the instruments (``None`` when none listens)."""
        if not self.attached:
            return None
        predecessors: list[int] = []
        for event in prerequisites:
            producer = event.producer
            if producer is not None and producer not in predecessors:
                predecessors.append(producer)
        record = WorkRecord(ident, kind, label, device, stream.handle, accesses,
                            predecessors, native_stream=stream)
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

    def copied(self, record: WorkRecord | None, data: str, source: int, target: int,
               nbytes: int) -> None:
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

    def finalized(self) -> list[Exception]:
        """Tell the instruments the work is complete; returns their failures."""
        failures: list[Exception] = []
        for instrument in self.attached:
            try:
                instrument.finalized()
            except Exception as exc:  # noqa: BLE001 - reported like async errors
                failures.append(exc)
        return failures

    def statistics(self, backend: Any, graph_instantiations: int, graph_updates: int
                   ) -> Statistics:
        counters = self.counters
        return Statistics(
            backend=backend.name, tasks=counters.tasks,
            host_callbacks=counters.host_callbacks,
            copies_h2d=counters.copies["h2d"], copies_d2h=counters.copies["d2h"],
            copies_d2d=counters.copies["d2d"], copies_h2h=counters.copies["h2h"],
            bytes_h2d=counters.bytes["h2d"], bytes_d2h=counters.bytes["d2h"],
            bytes_d2d=counters.bytes["d2d"], bytes_h2h=counters.bytes["h2h"],
            allocations=counters.allocations, allocated_bytes=counters.allocated_bytes,
            evictions=0, waits_issued=counters.waits_issued,
            waits_skipped=counters.waits_skipped, fences=counters.fences,
            seed=backend.seed, graph_instantiations=graph_instantiations,
            graph_updates=graph_updates)


# -- DOT ------------------------------------------------------------------------

class DotRecorder(Instrument):
    """Record the inferred task graph; write it in Graphviz DOT.

    Tasks and host callbacks are nodes named by their symbol; an edge ``a -> b`` means
    ``b`` must follow ``a`` because of their accesses (read after write, write after
    read or write after write on some logical data), derived from the accesses in
    submission order by the rules of ``_deps.py``. Copies are separate, dashed nodes
    feeding the work that needed them.
    """

    def __init__(self, path: str | None = None, reduce: bool = True) -> None:
        self.path = path
        self.reduce = reduce
        self.records: list[WorkRecord] = []

    def work_submitted(self, record: WorkRecord) -> None:
        if record.kind in ("task", "host_launch"):
            self.records.append(record)

    def edges(self, reduce: bool | None = None) -> set[tuple[int, int]]:
        """The dependency edges between recorded work, optionally reduced."""
        writers: dict[int, int] = {}
        readers: dict[int, set[int]] = {}
        edges: set[tuple[int, int]] = set()
        for record in self.records:
            for key, _, mode, _ in record.accesses:
                before = set(readers.get(key, ())) if mode & 2 else set()
                if key in writers:
                    before.add(writers[key])
                edges.update((p, record.ident) for p in before if p != record.ident)
            for key, _, mode, _ in record.accesses:
                if mode & 2:
                    writers[key] = record.ident
                    readers[key] = set()
                else:
                    readers.setdefault(key, set()).add(record.ident)
        if self.reduce if reduce is None else reduce:
            edges = transitive_reduction(edges)
        return edges

    def to_dot(self) -> str:
        lines = ["digraph stflow {", "  rankdir=TB;",
                 '  node [shape=box, style="rounded,filled", fillcolor="#e8f0fe"];']
        for record in self.records:
            shape = ', shape=ellipse, fillcolor="#fff4d6"' \
                if record.kind == "host_launch" else ""
            where = place_name(record.device)
            lines.append(f'  w{record.ident} [label="{_escape(record.label)}\\n{where}"'
                         f'{shape}];')
            for number, (data, source, target, nbytes) in enumerate(record.transfers):
                node = f"c{record.ident}_{number}"
                lines.append(
                    f'  {node} [label="{_escape(data)}\\n{place_name(source)}→'
                    f'{place_name(target)}\\n{_size(nbytes)}", shape=note, '
                    'style="dashed,filled", fillcolor="#eeeeee", fontsize=10];')
                lines.append(f"  {node} -> w{record.ident} [style=dashed];")
        for source, target in sorted(self.edges()):
            lines.append(f"  w{source} -> w{target};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def write(self, path: str | None = None) -> None:
        with open(path or self.path or "stflow.dot", "w") as out:
            out.write(self.to_dot())

    def finalized(self) -> None:
        if self.path:
            self.write()


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def transitive_reduction(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Drop every edge ``a -> c`` implied by a longer path ``a -> ... -> c``."""
    successors: dict[int, set[int]] = {}
    for a, b in edges:
        successors.setdefault(a, set()).add(b)
    reduced = set()
    for a, b in edges:
        # b is implied if reachable from another successor of a
        stack = [s for s in successors.get(a, ()) if s != b]
        seen = set(stack)
        implied = False
        while stack:
            node = stack.pop()
            if node == b:
                implied = True
                break
            for following in successors.get(node, ()):
                if following not in seen:
                    seen.add(following)
                    stack.append(following)
        if not implied:
            reduced.add((a, b))
    return reduced


# -- Chrome / Perfetto trace -----------------------------------------------------

class TraceRecorder(Instrument):
    """Record a timeline in the Chrome / Perfetto trace-event format.

    One process per device (and one for the host), one thread (track) per stream.
    Each piece of work becomes a span from the moment its stream reached it to its
    end; copies get their own spans, with the bytes moved; dependencies are flow
    arrows. Times come from the backend's stream timestamps: CUDA events on CUDA,
    the host clock when the emulated device runs the operation.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.backend: Any = None
        self.spans: list[tuple[WorkRecord, Any, Any, Any]] = []
        self._pending: dict[int, list[Any]] = {}

    def attach(self, runtime: Any) -> None:
        self.backend = runtime.backend
        self.origin = self.backend.timestamp(None)

    def work_submitted(self, record: WorkRecord) -> None:
        self._pending[record.ident] = [self._stamp(record), None]

    def work_body(self, record: WorkRecord) -> None:
        stamps = self._pending.get(record.ident)
        if stamps is not None:
            stamps[1] = self._stamp(record) if record.transfers else stamps[0]

    def work_ending(self, record: WorkRecord) -> None:
        # Before the end event: a successor waiting on it starts after this stamp.
        stamps = self._pending.pop(record.ident, None)
        if stamps is not None:
            self.spans.append((record, stamps[0], stamps[1], self._stamp(record)))

    def _stamp(self, record: WorkRecord) -> Any:
        return self.backend.timestamp(record.native_stream)

    def to_json(self) -> dict:
        """The trace as a dict (call after the work completed)."""
        seconds = self.backend.timestamp_seconds
        origin = seconds(self.origin)
        events: list[dict] = []
        named: set[tuple[int, int]] = set()
        ends: dict[int, tuple[int, int, float]] = {}

        def us(stamp: Any) -> float:
            return (seconds(stamp) - origin) * 1e6

        lanes: dict[tuple[int, int], list[float]] = {}
        lane_ids: dict[tuple[int, int, int], int] = {}
        timed = sorted(((us(start), us(body), us(end), record)
                        for record, start, body, end in self.spans),
                       key=lambda item: item[0])
        for t_start, t_body, t_end, record in timed:
            pid = record.device + 2            # host -> 1, device n -> n + 2
            # Spans on one track must nest or be disjoint: work whose windows overlap
            # on one stream (bodies running on the host) goes to an extra lane.
            busy = lanes.setdefault((pid, record.stream), [])
            lane = next((k for k, last in enumerate(busy) if last <= t_start), len(busy))
            if lane == len(busy):
                busy.append(t_end)
            else:
                busy[lane] = t_end
            tid = record.stream if lane == 0 else lane_ids.setdefault(
                (pid, record.stream, lane), (1 << 48) + len(lane_ids))
            if (pid, tid) not in named:
                named.add((pid, tid))
                events.append({"ph": "M", "name": "process_name", "pid": pid,
                               "args": {"name": "host" if pid == 1 else
                                        f"device {record.device}"}})
                name = f"stream 0x{record.stream:x}" + (f" ({lane + 1})" if lane else "")
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": name}})
            if record.transfers and t_body > t_start:
                moved = sum(t[3] for t in record.transfers)
                events.append({
                    "ph": "X", "cat": "transfer", "pid": pid, "tid": tid,
                    "name": "copy " + ", ".join(
                        f"{d} {place_name(s)}→{place_name(t)}"
                        for d, s, t, _ in record.transfers),
                    "ts": t_start, "dur": max(t_body - t_start, 0.001),
                    "args": {"bytes": moved, "for": record.label}})
            events.append({
                "ph": "X", "cat": record.kind, "pid": pid, "tid": tid,
                "name": record.label, "ts": t_body, "dur": max(t_end - t_body, 0.001),
                "args": {"accesses": [f"{d}.{_MODES.get(m, m)}@{place_name(p)}"
                                      for _, d, m, p in record.accesses]}})
            for predecessor in record.predecessors:
                if predecessor in ends:
                    p_pid, p_tid, p_end = ends[predecessor]
                    flow = {"cat": "dependency", "name": "dependency",
                            "id": f"{predecessor}-{record.ident}"}
                    events.append({**flow, "ph": "s", "pid": p_pid, "tid": p_tid,
                                   "ts": p_end - 0.001})
                    events.append({**flow, "ph": "f", "bp": "e", "pid": pid, "tid": tid,
                                   "ts": t_body})
            ends[record.ident] = (pid, tid, t_end)
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"producer": "stflow"}}

    def write(self, path: str | None = None) -> None:
        with open(path or self.path or "stflow-trace.json", "w") as out:
            json.dump(self.to_json(), out)

    def finalized(self) -> None:
        if self.path:
            self.write()


# -- NVTX ------------------------------------------------------------------------

class NvtxRanges(Instrument):
    """NVTX ranges named by task symbol (needs the ``nvtx`` package).

    A range opens when the work is submitted (``start()``) and closes when it ends;
    ranges are start/end pairs, not a stack, so tasks may end in any order.
    """

    def __init__(self) -> None:
        try:
            import nvtx
        except ImportError:
            from ._errors import BackendUnavailableError
            raise BackendUnavailableError(
                "NVTX ranges need the nvtx package: pip install 'stflow[nvtx]'"
            ) from None
        self._start = nvtx.start_range
        self._end = nvtx.end_range
        self._open: dict[int, Any] = {}

    def work_submitted(self, record: WorkRecord) -> None:
        self._open[record.ident] = self._start(record.label, domain="stflow")

    def work_ended(self, record: WorkRecord) -> None:
        handle = self._open.pop(record.ident, None)
        if handle is not None:
            self._end(handle)


def host_clock() -> float:
    return time.perf_counter()
