"""The instruments that ship with stflow: task graphs, timelines, NVTX ranges.

:class:`DotRecorder` (the inferred task graph in Graphviz DOT), :class:`TraceRecorder`
(a Chrome / Perfetto timeline, spans timed on the device) and :class:`NvtxRanges`
(NVTX ranges named after tasks, for Nsight Systems). Each listens at the seam of
``_instrument.py``; ``STFLOW_DOT_FILE``, ``STFLOW_TRACE_FILE`` and ``STFLOW_NVTX``
attach them to every new context.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from ._instrument import Instrument, WorkRecord, byte_size_text, place_name

__all__ = ["DotRecorder", "NvtxRanges", "TraceRecorder", "transitive_reduction"]

_MODES = {1: "read", 2: "write", 3: "rw"}


# -- DOT ------------------------------------------------------------------------

class DotRecorder(Instrument):
    """Record the inferred task graph; write it in Graphviz DOT.

    Tasks and host callbacks are nodes named by their symbol; an edge ``a -> b`` means
    ``b`` must follow ``a`` because of their accesses (read after write, write after
    read or write after write on some logical data), derived from the accesses in
    submission order by the rules of ``_deps.py``. Copies are separate, dashed nodes
    feeding the work that needed them. ``ctx.wait(ld)`` and ``ctx.fence()`` are
    octagons after the work they wait for, and the scopes of a ``stackable_context``
    (loop bodies, graph scopes, launchable graphs) are clusters around their work.
    """

    def __init__(self, path: str | None = None, reduce: bool = True) -> None:
        self.path = path
        self.reduce = reduce
        self.records: list[WorkRecord] = []
        # Synchronisation nodes: (ident, label, predecessors); fences have negative
        # idents. Scopes: id -> (parent id, kind, count, discarded).
        self.syncs: list[tuple[int, str, list[int]]] = []
        self.scopes: dict[int, list[Any]] = {}
        self._scope_of: dict[int, int] = {}
        self._open: dict[int, list[int]] = {}          # thread -> stack of scope ids
        self._since_fence: list[int] = []

    def work_submitted(self, record: WorkRecord) -> None:
        if record.kind in ("task", "host_launch"):
            self.records.append(record)
            self._since_fence.append(record.ident)
            stack = self._open.get(threading.get_ident())
            if stack:
                self._scope_of[record.ident] = stack[-1]
        elif record.kind == "wait":
            self.syncs.append((record.ident, record.label, list(record.predecessors)))

    def fence(self) -> None:
        ident = -(sum(1 for s in self.syncs if s[0] < 0) + 1)
        self.syncs.append((ident, "fence", self._since_fence))
        self._since_fence = []

    def scope_opened(self, kind: str, count: int | None) -> None:
        stack = self._open.setdefault(threading.get_ident(), [])
        number = len(self.scopes) + 1
        self.scopes[number] = [stack[-1] if stack else None, kind, count, False]
        stack.append(number)

    def scope_closed(self, discarded: bool) -> None:
        stack = self._open.get(threading.get_ident())
        if stack:
            self.scopes[stack.pop()][3] = discarded

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
        nodes: dict[int | None, list[str]] = {}
        for record in self.records:
            shape = ', shape=ellipse, fillcolor="#fff4d6"' \
                if record.kind == "host_launch" else ""
            where = place_name(record.device)
            lines = nodes.setdefault(self._scope_of.get(record.ident), [])
            lines.append(f'w{record.ident} [label="{_escape(record.label)}\\n{where}"'
                         f'{shape}];')
            for number, (data, source, target, nbytes) in enumerate(record.transfers):
                node = f"c{record.ident}_{number}"
                lines.append(
                    f'{node} [label="{_escape(data)}\\n{place_name(source)}→'
                    f'{place_name(target)}\\n{byte_size_text(nbytes)}", shape=note, '
                    'style="dashed,filled", fillcolor="#eeeeee", fontsize=10];')
                lines.append(f"{node} -> w{record.ident} [style=dashed];")
        drawn = {record.ident for record in self.records}
        edges = self.edges(reduce=False)
        for ident, label, predecessors in self.syncs:
            fill = "#fde2e2" if ident >= 0 else "#e2f5e2"
            nodes.setdefault(None, []).append(
                f'{_node(ident)} [label="{_escape(label)}", '
                f'shape=octagon, fillcolor="{fill}"];')
            edges.update((p, ident) for p in predecessors if p in drawn)
            drawn.add(ident)
        if self.reduce:
            edges = transitive_reduction(edges)
        lines = ["digraph stflow {", "  rankdir=TB;",
                 '  node [shape=box, style="rounded,filled", fillcolor="#e8f0fe"];']
        children: dict[int | None, list[int]] = {}
        for number, (parent, _, _, _) in self.scopes.items():
            children.setdefault(parent, []).append(number)

        def emit(scope: int | None, indent: str) -> None:
            lines.extend(indent + line for line in nodes.get(scope, ()))
            for child in children.get(scope, ()):
                _, kind, count, discarded = self.scopes[child]
                title = _SCOPE_TITLES.get(kind, kind)
                if kind == "repeat":
                    title = f"repeat({count})"
                style = "dashed" if discarded else "rounded"
                lines.append(f"{indent}subgraph cluster_{child} {{")
                lines.append(f'{indent}  label="{title}'
                             f'{" (discarded)" if discarded else ""}"; style={style};')
                emit(child, indent + "  ")
                lines.append(f"{indent}}}")

        emit(None, "  ")
        for source, target in sorted(edges):
            lines.append(f"  {_node(source)} -> {_node(target)};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def write(self, path: str | None = None) -> None:
        with open(path or self.path or "stflow.dot", "w") as out:
            out.write(self.to_dot())

    def finalized(self) -> None:
        if self.path:
            self.write()


_SCOPE_TITLES = {"while": "while_loop", "graph": "graph_scope",
                 "launchable": "launchable graph"}


def _node(ident: int) -> str:
    return f"w{ident}" if ident >= 0 else f"wf{-ident}"


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
