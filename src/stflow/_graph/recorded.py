"""What a recording is made of (:mod:`stflow._graph.recording`): graphs being
recorded and their nodes, inline scopes, the streams of a scope and their events.

A :class:`Graph` is a top-level graph or the body of a loop node; its :class:`Node`
objects are the leaves of one capture (or a loop node), kept as the *frontier* of the
:class:`RecordingStream` that captured them; a :class:`GraphEvent` is a snapshot of a
stream's frontier. The recorder (:class:`~stflow._graph.recording.GraphRecorder`)
holds the algorithm; these classes hold its state. Compiled with it (their attributes
are read and written for every recorded task).
"""

from __future__ import annotations

from typing import Any

from ..backends._base import Allocation, Event, Stream

__all__ = ["Graph", "GraphEvent", "InlineScope", "Node", "RecordingStream"]


class Graph:
    """A graph being recorded: a top-level graph, or the body of a loop node."""

    __slots__ = (
        "handle",
        "parent",
        "top",
        "prereqs",
        "done",
        "frees",
        "sinks",
        "executable",
        "launches",
        "used",
        "loop_count",
        "condition",
        "device",
        "recording",
        "capturing",
    )

    def __init__(self, handle: Any, parent: Node | None) -> None:
        self.handle = handle
        self.parent = parent  # the loop node of a body
        self.top: Graph = self if parent is None else parent.graph.top
        self.prereqs: list[Event] = []  # real events the launch waits for
        self.done: Event | None = None  # completion of the latest launch
        self.frees: list[Allocation] = []
        self.sinks: dict[Node, None] = {}  # nodes nothing depends on yet
        self.executable: Any = None
        self.launches = 0
        self.used = False
        self.loop_count: int | None = None  # of a loop body
        self.condition = 0  # a loop body's condition handle
        self.device: int | None = None  # a loop body's device, once known
        self.recording = True  # a top graph: not closed yet
        self.capturing: list[RecordingStream] = []  # a top graph: its open captures

    def encloses(self, other: Graph) -> bool:
        """True when ``other`` is this graph or nested in it."""
        graph: Graph | None = other
        while graph is not None:
            if graph is self:
                return True
            graph = graph.parent.graph if graph.parent is not None else None
        return False


class Node:
    """Nodes of a graph: the leaves of one capture, or a loop node.

    ``handles`` is ``None`` while the capture is still open on ``stream``: it ends when
    work of another stream (or level) has to depend on it.
    """

    __slots__ = ("graph", "handles", "stream")

    def __init__(
        self,
        graph: Graph,
        handles: list[Any] | None,
        stream: RecordingStream | None = None,
    ) -> None:
        self.graph = graph
        self.handles = handles
        self.stream = stream


class InlineScope:
    """A nested graph scope recorded into its enclosing top-level graph: the graph,
    the backend's mark of its nodes when the scope opened, and the recorder's
    state then (restored when the scope is discarded)."""

    __slots__ = ("graph", "mark", "sinks", "used")

    def __init__(
        self, graph: Graph, mark: Any, sinks: dict[Node, None], used: bool
    ) -> None:
        self.graph = graph
        self.mark = mark
        self.sinks = sinks
        self.used = used


class RecordingStream(Stream):
    """A stream of a scope: a frontier of nodes, captured on a real stream.

    ``referenced``: an event recorded since its capture began names the open capture.
    ``bodies``: task bodies in progress on it, whose work it captures (graph mode
    gives such a stream to no other work until they end); ``body_thread``: their
    thread.
    """

    captures = True

    __slots__ = (
        "real",
        "frontier",
        "capturing",
        "open_node",
        "top",
        "referenced",
        "bodies",
        "body_thread",
    )

    def __init__(self, real: Stream, top: Graph) -> None:
        super().__init__(real.handle, real.device, real.ordinal, real.error_sink)
        self.partition = real.partition
        self.real = real
        self.top = top
        self.frontier: list[Node] = []
        self.capturing: Graph | None = None
        self.open_node: Node | None = None  # the open capture, as a node
        self.referenced = False
        self.bodies = 0
        self.body_thread = 0


class GraphEvent(Event):
    """A point of a recording stream: the nodes recorded before it."""

    __slots__ = ("nodes",)

    def __init__(self, stream: Stream, seq: int, nodes: tuple[Node, ...]) -> None:
        # Event.__init__ inlined: one is made per recorded task.
        self.stream = stream
        self.seq = seq
        self.producer = None
        self.nodes = nodes
