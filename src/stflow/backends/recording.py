"""Graph mode as a backend: record the work of an epoch, then replay it.

``context(use_graph=True)`` runs the same runtime over a :class:`GraphRecorder`, which
implements the backend contract by building a graph instead of running anything:

- a *recording stream* holds a frontier, the graph nodes its next operation depends on;
- ``record`` returns an event whose payload is that frontier (and the epoch);
- ``wait`` adds an event's nodes to the waiting stream's frontier;
- copies, fills, host callbacks, frees and work launched on a recording stream
  (``stflow.emulated.launch``) become nodes depending on the frontier;
- allocations are made at once, outside the graph.

``fence()``, ``wait()`` and ``finalize()`` close the epoch: its nodes are replayed onto
real streams of the wrapped backend (one per recording stream, waits on real events for
edges between streams), after everything of the previous epoch, as if the graph were
launched on one stream. Events of a closed epoch are implied by that order.

Task bodies run at recording time: direct host access to a view would run once, not
when the graph runs, so views of a graph-mode task raise ``ScopeError``; work must be
enqueued on the task stream. Only the emulated backend is wrapped for now; CUDA graph
mode (stream capture into a CUDA graph) is planned in docs/plan-graph-mode.md.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Callable

import numpy as np

from .._errors import ScopeError
from ._base import Allocation, Backend, Event, Stream

__all__ = ["GraphRecorder", "recording_stream"]

_handles = itertools.count(0x6A0010, 0x10)
_recording: dict[int, tuple[GraphRecorder, RecordingStream]] = {}
_recording_lock = threading.Lock()

CAPTURED = ("a view of a graph-mode task was touched from the host: the body runs once, "
            "when the graph is recorded, not when it runs; enqueue the work on the task "
            "stream instead (stflow.emulated.launch(t.stream_ptr(), fn, *views))")


class Node:
    """One operation of a recorded graph."""

    __slots__ = ("kind", "payload", "deps", "stream", "done")

    def __init__(self, kind: str, payload: Any, deps: list[Node],
                 stream: RecordingStream) -> None:
        self.kind = kind
        self.payload = payload
        self.deps = deps
        self.stream = stream
        self.done: Event | None = None          # real event after its replay


class RecordingStream(Stream):
    """A stream of a graph under construction: a frontier of nodes."""

    __slots__ = ("frontier", "real")

    def __init__(self, handle: int, device: int) -> None:
        super().__init__(handle, device)
        self.frontier: list[Node] = []
        self.real: Stream | None = None


class GraphEvent(Event):
    """A point of a recording stream: the nodes before it, in one epoch."""

    __slots__ = ("nodes", "epoch")

    def __init__(self, stream: Stream, seq: int, nodes: tuple[Node, ...],
                 epoch: int) -> None:
        super().__init__(stream, seq)
        self.nodes = nodes
        self.epoch = epoch


def recording_stream(handle: int) -> tuple[GraphRecorder, RecordingStream] | None:
    """The recorder and stream of a recording stream handle, if it is one."""
    return _recording.get(handle)


class GraphRecorder(Backend):
    """The backend contract over a real backend, recording epochs as graphs."""

    bodies_wait_on_host = False

    def __init__(self, real: Backend) -> None:
        self.real = real
        self.name = real.name
        self.pinned_host_required = real.pinned_host_required
        self.epoch = 0
        self.nodes: list[Node] = []
        self.streams: list[RecordingStream] = []
        self.previous: list[Event] = []           # real ends of the last epoch
        self.graph_instantiations = 0
        self.fence: Stream | None = None

    # -- devices -------------------------------------------------------------------
    @property
    def device_count(self) -> int:
        return self.real.device_count

    def current_device(self) -> int:
        return self.real.current_device()

    def set_current_device(self, device: int) -> None:
        self.real.set_current_device(device)

    def describe(self) -> str:
        return f"graph mode on the {self.real.describe()}"

    # -- streams and events -----------------------------------------------------------
    def create_stream(self, device: int) -> RecordingStream:
        stream = RecordingStream(next(_handles), device)
        self.streams.append(stream)
        with _recording_lock:
            _recording[stream.handle] = (self, stream)
        return stream

    def destroy_stream(self, stream: Stream) -> None:
        with _recording_lock:
            _recording.pop(stream.handle, None)
        real = getattr(stream, "real", None)
        if real is not None:
            self.real.destroy_stream(real)

    def stream_from_handle(self, handle: int) -> Stream:
        found = _recording.get(handle)
        if found is None or found[0] is not self:
            raise ValueError(f"0x{handle:x} is not a stream of this graph-mode context")
        return found[1]

    def record(self, stream: Stream) -> GraphEvent:
        stream.recorded += 1
        event = GraphEvent(stream, stream.recorded,
                           tuple(stream.frontier), self.epoch)  # type: ignore[attr-defined]
        stream.last_event = event
        return event

    def wait(self, stream: Stream, event: Event) -> None:
        if event.epoch != self.epoch:             # type: ignore[attr-defined]
            return                                # ordered by the epoch's launch
        frontier = stream.frontier                # type: ignore[attr-defined]
        for node in event.nodes:                  # type: ignore[attr-defined]
            if node not in frontier:
                frontier.append(node)

    def query(self, event: Event) -> bool:
        """True for events of closed epochs (implied by launch order)."""
        return event.epoch < self.epoch  # type: ignore[attr-defined]

    def synchronize(self, event: Event) -> None:
        if event.epoch == self.epoch:             # type: ignore[attr-defined]
            self.complete_epoch()
        for node in event.nodes:                  # type: ignore[attr-defined]
            if node.done is not None:
                self.real.synchronize(node.done)

    # -- memory (outside the graph) ------------------------------------------------------
    def allocate(self, device: int, nbytes: int, stream: Stream | None,
                 dtype: np.dtype) -> Allocation:
        return self.real.allocate(device, nbytes, None, dtype)

    def free(self, allocation: Allocation, stream: Stream | None) -> None:
        if stream is None:
            self.real.free(allocation, None)
        else:
            self._node("free", allocation, stream)

    def locate(self, ptr: int) -> int:
        return self.real.locate(ptr)

    def register_host(self, array: np.ndarray) -> Any:
        return self.real.register_host(array)

    def unregister_host(self, token: Any) -> None:
        self.real.unregister_host(token)

    def is_pinned(self, ptr: int, nbytes: int) -> bool:
        return self.real.is_pinned(ptr, nbytes)

    # -- operations become nodes ---------------------------------------------------------
    def _node(self, kind: str, payload: Any, stream: Stream) -> Node:
        frontier = stream.frontier                # type: ignore[attr-defined]
        node = Node(kind, payload, list(frontier), stream)  # type: ignore[arg-type]
        self.nodes.append(node)
        frontier[:] = [node]
        return node

    def copy(self, dst: int, src: int, nbytes: int, stream: Stream) -> None:
        if nbytes:
            self._node("copy", (dst, src, nbytes), stream)

    def fill(self, ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
        if nbytes:
            self._node("fill", (ptr, nbytes, pattern), stream)

    def launch_host_func(self, stream: Stream, fn: Callable[[], None]) -> None:
        self._node("host", fn, stream)

    def add_call(self, stream: Stream, fn: Callable[[], None]) -> None:
        """Work launched on a recording stream (``stflow.emulated.launch``)."""
        self._node("call", fn, stream)

    def task_view(self, allocation: Allocation, offset: int, shape: tuple[int, ...],
                  dtype: np.dtype, readonly: bool) -> Any:
        view = self.real.task_view(allocation, offset, shape, dtype, readonly)
        invalidate = getattr(view, "_invalidate", None)
        if invalidate is not None:
            invalidate(CAPTURED)
        return view

    # -- timestamps ------------------------------------------------------------------
    def timestamp(self, stream: Stream | None) -> Any:
        """``[seconds, node]``: the host clock read when the replay gets here."""
        if stream is None:
            return [time.perf_counter(), None]
        stamp: list[Any] = [float("nan"), None]

        def take() -> None:
            stamp[0] = time.perf_counter()

        stamp[1] = self._node("call", take, stream)
        return stamp

    def timestamp_seconds(self, stamp: list[Any]) -> float:
        node = stamp[1]
        if node is not None:
            if node.done is None:
                self.complete_epoch()
            self.real.synchronize(node.done)
        return float(stamp[0])

    def fence_stream(self, stream: Stream) -> Stream:
        """Replay the epoch; a real stream that completes once the replay has."""
        ends = self.complete_epoch()
        if self.fence is None:
            self.fence = self.real.create_stream(max(self.real.current_device(), 0))
        for event in ends:
            self.real.wait(self.fence, event)
        return self.fence

    def context_finalized(self) -> None:
        if self.fence is not None:
            self.real.destroy_stream(self.fence)
            self.fence = None

    # -- replay ----------------------------------------------------------------------
    def complete_epoch(self) -> list[Event]:
        """Replay the current epoch onto real streams; returns their end events."""
        real = self.real
        nodes, self.nodes = self.nodes, []
        used: dict[RecordingStream, Stream] = {}
        for node in nodes:
            stream = node.stream
            target = stream.real
            if target is None:
                target = stream.real = real.create_stream(stream.device)
                target.error_sink = stream.error_sink
            if stream not in used:
                used[stream] = target
                for event in self.previous:       # after all of the last epoch
                    real.wait(target, event)
            for dep in node.deps:
                if dep.stream is not stream and dep.done is not None:
                    real.wait(target, dep.done)
            self._replay(node, target)
            node.done = real.record(target)
        if nodes:
            self.graph_instantiations += 1
            self.previous = [stream.real.last_event for stream in used  # type: ignore
                             if stream.real.last_event is not None]  # type: ignore
        self.epoch += 1
        for stream in self.streams:
            stream.frontier = []
        return list(self.previous)

    def _replay(self, node: Node, target: Stream) -> None:
        real = self.real
        kind, payload = node.kind, node.payload
        if kind == "copy":
            real.copy(payload[0], payload[1], payload[2], target)
        elif kind == "fill":
            real.fill(payload[0], payload[1], payload[2], target)
        elif kind == "host":
            real.launch_host_func(target, payload)
        elif kind == "free":
            real.free(payload, target)
        else:
            enqueue = getattr(real, "enqueue_call", None)
            if enqueue is None:  # pragma: no cover - only the emulated backend records
                raise ScopeError("launched work cannot be replayed on this backend")
            enqueue(target, payload)
