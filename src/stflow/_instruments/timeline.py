"""Timelines of the work: Chrome / Perfetto traces and NVTX ranges.

:class:`TraceRecorder` (a Chrome / Perfetto timeline, spans timed on the device) and
:class:`NvtxRanges` (NVTX ranges named after tasks, for Nsight Systems). Each listens
at the seam of ``_instruments/seam.py``; ``STFLOW_TRACE_FILE`` and ``STFLOW_NVTX``
attach them to every new context.
"""

from __future__ import annotations

import json
from typing import Any

from .seam import Instrument, WorkRecord, place_name

__all__ = ["NvtxRanges", "TraceRecorder"]

_MODES = {1: "read", 2: "write", 3: "rw"}


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
        events: list[dict] = []
        tracks = _Tracks()
        ends: dict[int, tuple[int, int, float]] = {}
        for t_start, t_body, t_end, record in self._timed_spans():
            pid = record.device + 2  # host -> 1, device n -> n + 2
            tid, lane = tracks.place(pid, record.stream, t_start, t_end)
            events.extend(tracks.names(pid, tid, record, lane))
            events.extend(_span_events(record, pid, tid, t_start, t_body, t_end))
            events.extend(_flow_events(record, pid, tid, t_body, ends))
            ends[record.ident] = (pid, tid, t_end)
        return {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {"producer": "stflow"},
        }

    def _timed_spans(self) -> list[tuple[float, float, float, WorkRecord]]:
        """The recorded spans as ``(start, body, end, record)``, in microseconds since
        the recorder was attached, ordered by start."""
        seconds = self.backend.timestamp_seconds
        origin = seconds(self.origin)

        def us(stamp: Any) -> float:
            return (seconds(stamp) - origin) * 1e6

        return sorted(
            (
                (us(start), us(body), us(end), record)
                for record, start, body, end in self.spans
            ),
            key=lambda item: item[0],
        )

    def write(self, path: str | None = None) -> None:
        with open(path or self.path or "stflow-trace.json", "w") as out:
            json.dump(self.to_json(), out)

    def finalized(self) -> None:
        if self.path:
            self.write()


class _Tracks:
    """The tracks (trace threads) of a timeline: one per stream of a process, and an
    extra lane where work on that stream overlaps work already on it."""

    def __init__(self) -> None:
        self.lanes: dict[tuple[int, int], list[float]] = {}
        self.lane_ids: dict[tuple[int, int, int], int] = {}
        self.named: set[tuple[int, int]] = set()

    def place(
        self, pid: int, stream: int, t_start: float, t_end: float
    ) -> tuple[int, int]:
        """The track of a span on ``stream`` of process ``pid``: ``(tid, lane)``.

        Spans on one track must nest or be disjoint: work whose windows overlap on
        one stream (bodies running on the host) goes to an extra lane, the first one
        free at ``t_start``."""
        busy = self.lanes.setdefault((pid, stream), [])
        lane = next((k for k, last in enumerate(busy) if last <= t_start), len(busy))
        if lane == len(busy):
            busy.append(t_end)
        else:
            busy[lane] = t_end
        tid = (
            stream
            if lane == 0
            else self.lane_ids.setdefault(
                (pid, stream, lane), (1 << 48) + len(self.lane_ids)
            )
        )
        return tid, lane

    def names(self, pid: int, tid: int, record: WorkRecord, lane: int) -> list[dict]:
        """The metadata events naming the process and the track, the first time the
        track is used (none after that)."""
        if (pid, tid) in self.named:
            return []
        self.named.add((pid, tid))
        name = f"stream 0x{record.stream:x}" + (f" ({lane + 1})" if lane else "")
        return [
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "args": {"name": "host" if pid == 1 else f"device {record.device}"},
            },
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": tid,
                "args": {"name": name},
            },
        ]


def _span_events(
    record: WorkRecord, pid: int, tid: int, t_start: float, t_body: float, t_end: float
) -> list[dict]:
    """The spans of one piece of work: its copies (when it moved data before its
    body), then the work itself."""
    events: list[dict] = []
    if record.transfers and t_body > t_start:
        moved = sum(t[3] for t in record.transfers)
        events.append(
            {
                "ph": "X",
                "cat": "transfer",
                "pid": pid,
                "tid": tid,
                "name": "copy "
                + ", ".join(
                    f"{d} {place_name(s)}→{place_name(t)}"
                    for d, s, t, _ in record.transfers
                ),
                "ts": t_start,
                "dur": max(t_body - t_start, 0.001),
                "args": {"bytes": moved, "for": record.label},
            }
        )
    events.append(
        {
            "ph": "X",
            "cat": record.kind,
            "pid": pid,
            "tid": tid,
            "name": record.label,
            "ts": t_body,
            "dur": max(t_end - t_body, 0.001),
            "args": {
                "accesses": [
                    f"{d}.{_MODES.get(m, m)}@{place_name(p)}"
                    for _, d, m, p in record.accesses
                ]
            },
        }
    )
    return events


def _flow_events(
    record: WorkRecord,
    pid: int,
    tid: int,
    t_body: float,
    ends: dict[int, tuple[int, int, float]],
) -> list[dict]:
    """The dependency arrows into ``record``: from the end of each predecessor
    already on the timeline (``ends``: its track and end) to the start of the body."""
    events: list[dict] = []
    for predecessor in record.predecessors:
        if predecessor in ends:
            p_pid, p_tid, p_end = ends[predecessor]
            flow = {
                "cat": "dependency",
                "name": "dependency",
                "id": f"{predecessor}-{record.ident}",
            }
            events.append(
                {**flow, "ph": "s", "pid": p_pid, "tid": p_tid, "ts": p_end - 0.001}
            )
            events.append(
                {**flow, "ph": "f", "bp": "e", "pid": pid, "tid": tid, "ts": t_body}
            )
    return events


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
            from .._core.errors import BackendUnavailableError

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
