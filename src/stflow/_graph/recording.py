"""Graph mode as a backend: the stream operations of a scope become a graph.

``context(use_graph=True)`` and the scopes of ``stackable_context`` run the same
runtime over a :class:`GraphRecorder`. It implements the backend contract over a real
backend that has graph support (``backend.graphs``, see ``_graphs.py``):

- outside any scope (the root of a stackable context) it passes everything through to
  the real backend: streams and events are real ones;
- inside a scope, streams are :class:`RecordingStream` objects, each wrapping a real
  stream used only for capture. Their operations (copies, fills, host functions, and
  whatever a task body enqueues on ``t.stream_ptr()``) are *captured* for the scope's
  graph: a capture begins at the stream's first operation, depending on its
  *frontier* (the graph nodes that came before on that stream, plus those of the
  events it waited for), and stays open across events until other work depends on it,
  the stream waits for other work, or the recording level changes (in loop bodies it
  ends at every event);
- an event of a recording stream (:class:`GraphEvent`) is a snapshot of the frontier,
  the open capture included (as a node whose handles are filled when it ends).

Graphs nest: a loop scope adds a loop node to the enclosing graph and records its body
into the node's body graph. A nested graph scope that no loop encloses is *inline*: it
records into the top-level graph itself (so it may hold host work), and discarding it
removes the nodes added since it opened (``GraphSupport.mark`` / ``truncate``). A node used as a dependency in another graph is *lifted*:
from inside a loop body, a node of an enclosing graph becomes a dependency of the loop
node; from outside, a node of a loop body stands for its loop node. A node of another
top-level graph stands for that graph's launch, whose completion event the launch of
this graph waits for (as it waits for every real event the scope's work depends on).

When the outermost scope closes, its graph is launched, and destroyed once it has run:
the functions of ``launches.py`` (executables cached by topology, the retirement of
launched graphs, the end of a context).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core import config
from .._core.errors import ScopeError
from .._core.layout import extent
from ..backends._base import (
    HOST,
    Allocation,
    Backend,
    CompositeAllocation,
    Event,
    KernelLaunch,
    Stream,
)
from . import launches as launches
from .recorded import Graph, GraphEvent, InlineScope, Node, RecordingStream

__all__ = [
    "Graph",
    "GraphEvent",
    "GraphRecorder",
    "InlineScope",
    "Node",
    "RecordingStream",
]

CAPTURED = (
    "a view of a task recorded into a graph was touched from the host: the body "
    "runs once, when the graph is recorded, not when it runs; enqueue the work on "
    "the task stream instead (on the emulated backend: "
    "stflow.emulated.launch(t.stream_ptr(), fn, *views))"
)


class _Level:
    """Where one host thread records: the innermost graph, or ``None`` at the root."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: Graph | None = None


class GraphRecorder(Backend):
    """The backend contract over a real backend, recording scopes as graphs.

    One recorder serves one context (its runtime's ``ScopeTracker`` drives the scopes
    and sets :attr:`error_sink`, where failures of the graphs' work are reported).

    Threads
        With :attr:`per_thread` (a stackable context), every host thread records at a
        level of its own (:attr:`current`): its scopes are its own graphs, with streams
        of their own. Otherwise (graph mode's epochs) all threads record into one
        graph. A stream with task bodies in progress (``RecordingStream.bodies``) keeps
        capturing until they end: a capture it must end for work that depends on it
        restarts at once, which only the bodies' own thread may do (the runtime keeps
        other threads off such streams and away from their open captures; with
        :attr:`split_bodies` a body starts a capture of its own when events already
        name the open one).
    """

    def __init__(self, real: Backend, launch_stream: Stream | None = None) -> None:
        graphs = real.graphs
        if graphs is None:
            from .._core.errors import BackendUnavailableError

            raise BackendUnavailableError(f"the {real.name} backend has no graph support")
        self.real = real
        self.graphs = graphs
        self.name = real.name
        self.pinned_host_required = real.pinned_host_required
        self.gpu_memory = real.gpu_memory
        self.cuda_contexts = real.cuda_contexts
        self.nvtx_ranges = real.nvtx_ranges
        self.seed = real.seed
        self.error_sink: Callable[..., None] | None = None
        # The registry's DataRegistry.pin_pageable: copies recorded into loop bodies
        # page-lock the pageable user memory they touch (_loop_body_copy).
        self.pin_pageable: Callable[[int, int], None] | None = None
        self.per_thread = False
        self.split_bodies = False
        self._shared = _Level()
        self._local = threading.local()
        self.spare: dict[tuple, list[Stream]] = {}  # (device, partition) -> streams
        self.lent: dict[Graph, list[Stream]] = {}  # capture streams of each top graph
        self.launch_streams: dict[int, Stream] = {}
        # A caller's stream (context(use_graph=True, stream=s)): graphs launch on it,
        # and the end of the context does not block the host (see context_finalized).
        self.caller_stream = launch_stream
        if launch_stream is not None:
            self.launch_streams[0] = launch_stream
        self.retiring: list[tuple[Event, Graph]] = []
        # topology -> executable, least recently used first (insertion order: a hit
        # is taken out while its graph runs and put back at the end when it retires).
        self.cache: dict[Any, Any] = {}
        self.cache_entries = config.graph_cache_entries()
        self.cache_lock = threading.Lock()
        self.cache_shared = False  # an async_resources owns the cache
        self.graph_instantiations = 0
        self.graph_updates = 0

    # -- the recording level of the calling thread --------------------------------------
    def _level(self) -> _Level:
        if not self.per_thread:
            return self._shared
        try:
            level: _Level = self._local.level
        except AttributeError:
            level = self._local.level = _Level()
        return level

    @property
    def current(self) -> Graph | None:
        """The innermost graph the calling thread records into (``None``: the root)."""
        return self._level().current

    @current.setter
    def current(self, graph: Graph | None) -> None:
        self._level().current = graph

    # -- devices -------------------------------------------------------------------
    @property
    def device_count(self) -> int:
        return self.real.device_count

    @property
    def native(self) -> Backend:
        """The backend recorded over (its streams and memory are the real ones)."""
        return self.real

    @property
    def bodies_wait_on_host(self) -> bool:  # type: ignore[override]
        return self.current is None and self.real.bodies_wait_on_host

    def current_device(self) -> int:
        return self.real.current_device()

    def set_current_device(self, device: int) -> None:
        self.real.set_current_device(device)

    def describe(self) -> str:
        return f"graph mode on the {self.real.describe()}"

    def device_memory(self, device: int) -> int | None:
        return self.real.device_memory(device)

    def machine_init(self) -> None:
        self.real.machine_init()

    # -- scopes ----------------------------------------------------------------------
    def open_graph(self) -> Graph:
        """Start recording a top-level graph (outside any scope)."""
        if self.current is not None:
            raise ScopeError("a top-level graph is opened inside a scope")
        graph = self.current = Graph(self.graphs.create_graph(), None)
        return graph

    def open_loop(self, count: int | None) -> Graph:
        """Add a loop to the current graph; record into its body from now on.

        The loop node itself is added when the body's first work is captured, on the
        device of that work (on CUDA a conditional node's body is on one device).
        """
        parent = self.current
        if parent is None:
            raise ScopeError("a loop is opened outside any graph")
        self._end_captures()
        node = Node(parent, [])
        body = self.current = Graph(None, node)
        body.loop_count = count
        if count == 0:
            # A body that never runs (its scope is discarded when it closes): its
            # work is captured into a scratch graph, never into the enclosing one.
            body.handle = self.graphs.create_graph()
            return body
        parent.sinks[node] = None
        parent.used = True
        return body

    def open_inline(self) -> InlineScope:
        """Open a nested graph scope recorded straight into the current top-level
        graph (no loop encloses it): no conditional node, so host work is allowed.

        Its work is captured apart from the work before it (open captures end), so
        that :meth:`discard_inline` can remove exactly what it recorded.
        """
        graph = self.current
        if graph is None or graph.parent is not None:
            raise ScopeError("an inline graph scope is opened outside a top-level graph")
        self._end_captures()
        return InlineScope(
            graph, self.graphs.mark(graph.handle), dict(graph.sinks), graph.used
        )

    def close_inline(self, scope: InlineScope) -> None:
        """The inline scope is recorded: later work is captured apart from it."""
        self._end_captures()

    def discard_inline(self, scope: InlineScope) -> None:
        """Remove what an inline scope recorded from its graph (its block raised)."""
        self._end_captures(keep=False)
        graph = scope.graph
        self.graphs.truncate(graph.handle, scope.mark)
        graph.sinks = scope.sinks
        graph.used = scope.used

    def _materialize(self, body: Graph, device: int) -> None:
        """Add the loop node of ``body`` (and of the bodies enclosing it) on ``device``."""
        pending: list[Graph] = []  # innermost first; a loop, not recursion
        while body.handle is None:
            pending.append(body)
            assert body.parent is not None
            body = body.parent.graph
        for body in reversed(pending):
            assert body.parent is not None
            body.device = max(device, 0)
            handle, body.handle, body.condition = self.graphs.add_loop(
                body.parent.graph.handle, [], body.device, body.loop_count
            )
            body.parent.handles = [handle]

    def loop_device(self) -> int | None:
        """The device of the loop body being recorded, once known (else ``None``)."""
        graph = self.current
        return None if graph is None or graph.parent is None else graph.device

    def loop_condition(self, body: Graph) -> int:
        """The condition handle of a loop (its node is added on the current device if
        nothing was captured into its body yet)."""
        self._materialize(body, self.real.current_device())
        return body.condition

    def close_loop(self, body: Graph) -> None:
        """The body is recorded: back to the enclosing graph."""
        self._end_captures()
        self._materialize(body, self.real.current_device())
        sinks = [h for node in body.sinks for h in node.handles or ()]
        self.graphs.end_loop_body(body.handle, body.condition, sinks)
        assert body.parent is not None
        self.current = body.parent.graph

    def discard_loop(self, body: Graph) -> None:
        """Drop a loop whose body raised (or never runs): its node leaves the
        enclosing graph. Captures into the enclosing graphs (imports hoisted out of
        the body) stay: that work runs."""
        self._end_captures(keep=False, dropped=body)
        assert body.parent is not None
        node = body.parent
        parent = self.current = node.graph
        parent.sinks.pop(node, None)
        if body.loop_count == 0:
            self.graphs.destroy_graph(body.handle)
        elif body.handle is not None:
            self.graphs.remove_node(parent.handle, node.handles[0])  # type: ignore[index]

    def enter_level(self, graph: Graph | None) -> Graph | None:
        """Record into ``graph`` (``None``: run at the root) until called again with
        what this returns (the level it replaces)."""
        previous, self.current = self.current, graph
        return previous

    def close_graph(self, graph: Graph) -> None:
        """Stop recording the top-level ``graph`` (it can be launched)."""
        self._end_captures()
        self.current = None
        graph.recording = False
        self._return_streams(graph)

    def discard_graph(self, graph: Graph) -> None:
        """Drop a top-level graph whose recording failed; its frees still run."""
        self._end_captures(keep=False)
        self.current = None
        graph.recording = False
        self._return_streams(graph)
        stream = self._launch_stream()
        for event in graph.prereqs:
            self.real.wait(stream, event)
        for allocation in graph.frees:
            self.real.free(allocation, stream)
        self.graphs.destroy_graph(graph.handle)

    # -- launches (the functions of launches.py) ---------------------------------
    def launch(self, graph: Graph, release: bool = True) -> Event:
        """Launch a closed top-level graph; returns its completion event
        (:func:`stflow._graph.launches.launch`)."""
        return launches.launch(self, graph, release)

    def executable(self, graph: Graph) -> Any:
        """The executable of a closed top-level graph
        (:func:`stflow._graph.launches.executable`)."""
        return launches.executable(self, graph)

    def release(self, graph: Graph) -> None:
        """After the last launch: frees, then the graph once its work completed
        (:func:`stflow._graph.launches.release`)."""
        launches.release(self, graph)

    def drop_cached(self) -> None:
        """Destroy the cached executables (:func:`stflow._graph.launches.drop_cached`)."""
        launches.drop_cached(self)

    @staticmethod
    def recorded_in(event: Event, graph: Graph) -> bool:
        """True when ``event`` is a point of the recording of top-level ``graph``."""
        return isinstance(event, GraphEvent) and event.stream.top is graph  # type: ignore[attr-defined]

    def pending_events(self) -> list[Event]:
        return launches.pending_events(self)

    # -- streams ---------------------------------------------------------------------
    def create_stream(
        self,
        device: int,
        error_sink: Callable[..., None] | None = None,
        partition: Any = None,
    ) -> Stream:
        graph = self.current
        if graph is None:
            return self.real.create_stream(device, error_sink, partition)
        spare = self.spare.get((device, partition))  # captures stay in the partition
        real = (
            spare.pop()
            if spare
            else self.real.create_stream(device, error_sink, partition)
        )
        real.error_sink = error_sink
        self.lent.setdefault(graph.top, []).append(real)
        return RecordingStream(real, graph.top)

    def _return_streams(self, top: Graph) -> None:
        for real in self.lent.pop(top, ()):
            self.spare.setdefault((real.device, real.partition), []).append(real)

    def destroy_stream(self, stream: Stream) -> None:
        if not isinstance(stream, RecordingStream):
            self.real.destroy_stream(stream)

    def stream_from_handle(self, handle: int) -> Stream:
        return self.real.stream_from_handle(handle)

    def launch_stream(self) -> Stream:
        """The stream graphs are launched on."""
        return self._launch_stream()

    def _launch_stream(self) -> Stream:
        stream = self.launch_streams.get(0)
        if stream is None:
            stream = self.launch_streams[0] = self.real.create_stream(0, self.error_sink)
        return stream

    # -- capture ---------------------------------------------------------------------
    def _capture(self, stream: RecordingStream) -> None:
        """Make ``stream`` capture into the current graph.

        A capture stays open across events, so that a run of tasks on one stream is
        one capture: it ends when another stream's work depends on it, when the
        stream waits for other work, or when the level of recording changes. Into a
        loop body (captured straight into the body, where CUDA allows one capture at
        a time) captures end at every event.
        """
        graph = self.current
        if graph is None or graph.top is not stream.top:
            raise ScopeError(
                "work was enqueued on a stream of a graph scope that is "
                "closed; a task must start and end in the same scope"
            )
        if stream.capturing is graph:
            return
        if stream.capturing is not None:
            self._end_capture(stream)
        if graph.handle is None:
            self._materialize(graph, stream.real.ordinal)
        if graph.parent is not None:
            for other in list(graph.top.capturing):
                if other.capturing is graph:
                    if other.bodies:
                        raise ScopeError(
                            "a task started inside the body of another task of a "
                            "loop body: a loop body holds one capture at a time; end "
                            "the outer task first"
                        )
                    self._end_capture(other)
        self._begin(stream, graph)

    def _begin(self, stream: RecordingStream, graph: Graph) -> None:
        if graph.loop_count == 0 and graph.parent is not None:
            deps: list[Any] = []  # a scratch body orders nothing
        else:
            deps = self._dependencies(stream.frontier, graph)
        self.graphs.begin_capture(stream.real, graph.handle, deps)
        stream.capturing = graph
        stream.open_node = Node(graph, None, stream)
        stream.referenced = False
        graph.used = True
        graph.top.capturing.append(stream)

    def _end_capture(self, stream: RecordingStream, keep: bool = True) -> None:
        """End the capture of ``stream``. A stream with task bodies in progress
        captures again at once, after what it captured (only from the bodies' own
        thread: another thread's work could slip between the two)."""
        graph = stream.capturing
        node = stream.open_node
        assert graph is not None and node is not None
        restart = keep and stream.bodies > 0
        if restart and stream.body_thread != threading.get_ident():
            raise RuntimeError(
                f"internal error: the capture of {stream!r} was ended by "
                "another thread while a task body is in progress on it"
            )
        stream.capturing = None
        stream.open_node = None
        graph.top.capturing.remove(stream)
        leaves = self.graphs.end_capture(stream.real)
        node.handles = list(leaves) if keep else []
        if keep:
            graph.sinks[node] = None
            stream.frontier = [node]
        if restart:
            self._begin(stream, graph)

    def _end_captures(self, keep: bool = True, dropped: Graph | None = None) -> None:
        """End the open captures of the calling thread's top graph; with ``dropped``
        (and not ``keep``), only the captures into ``dropped`` and the bodies in it
        are dropped, the others are kept."""
        graph = self.current
        if graph is not None:
            for stream in list(graph.top.capturing):
                capturing = stream.capturing
                assert capturing is not None
                self._end_capture(
                    stream,
                    keep or (dropped is not None and not dropped.encloses(capturing)),
                )

    def _dependencies(self, frontier: list[Node], graph: Graph) -> list[Any]:
        """The node handles in ``graph`` that work after ``frontier`` depends on."""
        handles: list[Any] = []
        for node in frontier:
            if node.handles is None:  # a capture still open
                assert node.stream is not None
                self._end_capture(node.stream)
            if node.graph.top is not graph.top:  # another top-level graph
                done = node.graph.top.done
                if done is not None and done not in graph.top.prereqs:
                    graph.top.prereqs.append(done)
                continue
            while not node.graph.encloses(graph):  # from inside a closed body
                assert node.graph.parent is not None
                node = node.graph.parent
            if node.graph is graph:
                graph.sinks.pop(node, None)
                handles.extend(h for h in node.handles or () if h not in handles)
            else:  # from an enclosing graph
                container = graph.parent
                assert container is not None
                never_runs = False
                while container.graph is not node.graph:
                    never_runs |= container.graph.loop_count == 0
                    assert container.graph.parent is not None
                    container = container.graph.parent
                if never_runs:
                    continue  # inside the scratch body of a repeat(0): no edge
                node.graph.sinks.pop(node, None)
                self.graphs.add_dependencies(
                    node.graph.handle,
                    node.handles or [],
                    container.handles[0],  # type: ignore[index]
                )
        return handles

    def begin_body(self, stream: Stream) -> None:
        """A task body is about to enqueue work on ``stream``: capture it until
        :meth:`end_body`."""
        if not isinstance(stream, RecordingStream):
            return
        capturing = stream.capturing
        if self.split_bodies and capturing is not None and stream.referenced:
            self._end_capture(stream)  # nothing may name the body's capture
            capturing = None
        # Usually the stream already captures into the current graph: _capture's
        # own first test, made here without the call (0.17 us per recorded task).
        if capturing is None or capturing is not self._level().current:
            self._capture(stream)
        stream.bodies += 1
        stream.body_thread = threading.get_ident()

    def end_body(self, stream: Stream) -> None:
        """The task body of a :meth:`begin_body` ended (before its end event)."""
        if isinstance(stream, RecordingStream) and stream.bodies:
            stream.bodies -= 1

    # -- events ----------------------------------------------------------------------
    def record(self, stream: Stream) -> Event:
        if not isinstance(stream, RecordingStream):
            return self.real.record(stream)
        capturing = stream.capturing
        if capturing is not None and capturing.parent is None:
            # The open capture is the frontier: a run of tasks on one stream
            # records events naming the same node.
            node = stream.open_node
            assert node is not None
            nodes: tuple[Node, ...] = (node,)
            stream.frontier = [node]
            stream.referenced = True
        else:
            if capturing is not None:
                self._end_capture(stream)
            nodes = tuple(stream.frontier)
        seq = stream.recorded = stream.recorded + 1
        event = GraphEvent(stream, seq, nodes)
        stream.last_event = event
        return event

    def wait(self, stream: Stream, event: Event) -> None:
        if isinstance(stream, RecordingStream):
            if isinstance(event, GraphEvent):
                if stream.capturing is not None:
                    self._end_capture(stream)
                frontier = stream.frontier
                for node in event.nodes:
                    if node not in frontier:
                        frontier.append(node)
            elif event not in stream.top.prereqs:
                stream.top.prereqs.append(event)
            return
        if isinstance(event, GraphEvent):
            for done in self._completions(event):
                self.real.wait(stream, done)
        else:
            self.real.wait(stream, event)

    def _completions(self, event: GraphEvent) -> list[Event]:
        """The real events a graph event stands for (its graphs' launches)."""
        found: list[Event] = []
        for node in event.nodes:
            top = node.graph.top
            if top.done is None:
                if top.recording:
                    raise ScopeError(
                        "work outside a graph scope depends on work "
                        "recorded in a scope that is still open"
                    )
                continue  # never launched: nothing to wait for
            if top.done not in found:
                found.append(top.done)
        return found

    def query(self, event: Event) -> bool:
        if isinstance(event, GraphEvent):
            for node in event.nodes:
                top = node.graph.top
                if top.done is None:
                    if top.recording:
                        return False
                elif not self.real.query(top.done):
                    return False
            return True
        return self.real.query(event)

    def synchronize(self, event: Event) -> None:
        if isinstance(event, GraphEvent):
            for done in self._completions(event):
                self.real.synchronize(done)
        else:
            self.real.synchronize(event)

    # -- memory (outside the graph) ----------------------------------------------------
    def allocate(
        self, device: int, nbytes: int, stream: Stream | None, dtype: np.dtype
    ) -> Allocation:
        if isinstance(stream, RecordingStream):
            stream = None
        return self.real.allocate(device, nbytes, stream, dtype)

    def composite_granularity(self, devices: Sequence[int]) -> int:
        return self.real.composite_granularity(devices)

    def allocate_composite(
        self,
        device: int,
        chunk_devices: Sequence[int],
        chunk: int,
        nbytes: int,
        dtype: np.dtype,
    ) -> CompositeAllocation:
        return self.real.allocate_composite(device, chunk_devices, chunk, nbytes, dtype)

    def free(self, allocation: Allocation, stream: Stream | None) -> None:
        if isinstance(stream, RecordingStream):
            stream.top.frees.append(allocation)
        else:
            self.real.free(allocation, stream)

    def locate(self, ptr: int) -> int:
        return self.real.locate(ptr)

    def register_host(self, array: np.ndarray) -> Any:
        return self.real.register_host(array)

    def unregister_host(self, token: Any) -> None:
        self.real.unregister_host(token)

    def is_pinned(self, ptr: int, nbytes: int) -> bool:
        return self.real.is_pinned(ptr, nbytes)

    # -- operations ------------------------------------------------------------------
    def copy(
        self,
        dst: int,
        src: int,
        nbytes: int,
        stream: Stream,
        source_ready: bool = False,
    ) -> None:
        if isinstance(stream, RecordingStream):
            if not nbytes:
                return
            self._capture(stream)
            if self.pinned_host_required and self._in_loop_body():
                self._loop_body_copy(((dst, nbytes), (src, nbytes)))
            stream, source_ready = stream.real, False  # runs at every launch
        self.real.copy(dst, src, nbytes, stream, source_ready)

    def copy_strided(
        self,
        dst: int,
        dst_strides: tuple[int, ...] | None,
        src: int,
        src_strides: tuple[int, ...] | None,
        shape: tuple[int, ...],
        itemsize: int,
        stream: Stream,
        source_ready: bool = False,
    ) -> None:
        if isinstance(stream, RecordingStream):
            if 0 in shape:
                return
            self._capture(stream)
            if self.pinned_host_required and self._in_loop_body():
                self._loop_body_copy(
                    (
                        (dst, extent(shape, dst_strides, itemsize)),
                        (src, extent(shape, src_strides, itemsize)),
                    )
                )
            stream, source_ready = stream.real, False  # runs at every launch
        self.real.copy_strided(
            dst, dst_strides, src, src_strides, shape, itemsize, stream, source_ready
        )

    def _in_loop_body(self) -> bool:
        graph = self.current
        return graph is not None and graph.parent is not None

    def _loop_body_copy(self, spans: tuple[tuple[int, int], ...]) -> None:
        """A copy recorded into a loop body, where no host work can run (a
        conditional graph node holds kernels, copies and fills): the pageable user
        memory among ``spans`` (address, bytes) is page-locked first
        (``pin_pageable``), so that the copy is a plain copy node rather than a copy
        staged by host callbacks; memory that stays pageable is refused."""
        real = self.real
        for ptr, nbytes in spans:
            if real.locate(ptr) != HOST or real.is_pinned(ptr, nbytes):
                continue
            if self.pin_pageable is not None:
                self.pin_pageable(ptr, nbytes)
                if real.is_pinned(ptr, nbytes):
                    continue
            raise ScopeError(
                f"copying {nbytes} bytes at 0x{ptr:x} of pageable host memory in the "
                "body of a loop: a conditional graph node runs kernels, copies and "
                "fills only, so the copy cannot be staged by host work, and this "
                "buffer could not be page-locked (only NumPy arrays can be); "
                "register a page-locked array, or copy the data in before the loop"
            )

    def fill(self, ptr: int, nbytes: int, pattern: bytes, stream: Stream) -> None:
        if isinstance(stream, RecordingStream):
            if not nbytes:
                return
            self._capture(stream)
            stream = stream.real
        self.real.fill(ptr, nbytes, pattern, stream)

    def combine(
        self, dst: int, src: int, count: int, dtype: np.dtype, op: str, stream: Stream
    ) -> None:
        if isinstance(stream, RecordingStream):
            if not count:
                return
            self._capture(stream)
            stream = stream.real
        self.real.combine(dst, src, count, dtype, op, stream)

    def launch_host_func(self, stream: Stream, fn: Callable[[], None]) -> None:
        if isinstance(stream, RecordingStream):
            self._capture(stream)
            stream = stream.real
        self.real.launch_host_func(stream, fn)

    def launch_kernel(self, stream: Stream, launch: KernelLaunch) -> None:
        if isinstance(stream, RecordingStream):
            self._capture(stream)
            stream = stream.real
        self.real.launch_kernel(stream, launch)

    def synchronize_producer(self, handle: int) -> None:
        self.real.synchronize_producer(handle)

    def set_condition(
        self, stream: Stream, handle: int, terms: list, combiner: str
    ) -> None:
        """Enqueue a loop condition's evaluation on ``stream`` (in a loop body)."""
        assert isinstance(stream, RecordingStream)
        self._capture(stream)
        self.graphs.set_condition(stream.real, handle, terms, combiner)

    def task_view(
        self,
        allocation: Allocation,
        offset: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        readonly: bool,
    ) -> Any:
        view = self.real.task_view(allocation, offset, shape, dtype, readonly)
        if self.current is not None:
            view._refuse_host_access(CAPTURED)  # host memory views: their work runs later
        return view

    def host_array(
        self,
        allocation: Allocation,
        shape: tuple[int, ...],
        dtype: np.dtype,
        readonly: bool,
    ) -> np.ndarray:
        return self.real.host_array(allocation, shape, dtype, readonly)

    # -- timestamps ------------------------------------------------------------------
    def timestamp(self, stream: Stream | None) -> Any:
        """Inside a scope, the host clock at recording (the graph runs later)."""
        if isinstance(stream, RecordingStream) or stream is None:
            return [time.perf_counter(), None]
        return ["real", self.real.timestamp(stream)]

    def timestamp_seconds(self, stamp: list[Any]) -> float:
        if stamp[0] == "real":
            return self.real.timestamp_seconds(stamp[1])
        return float(stamp[0])

    # -- the end of the context -----------------------------------------------------------
    def context_finalized(self) -> None:
        """Release everything kept for the context (its work has completed;
        :func:`stflow._graph.launches.context_finalized`)."""
        launches.context_finalized(self)
