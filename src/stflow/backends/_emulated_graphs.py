"""Graphs on the emulated backend: capture, loops and launches, as on CUDA.

A graph is a list of nodes, each a Python callable with the nodes it depends on. While
an emulated stream captures (:meth:`EmulatedGraphs.begin_capture`), every operation
enqueued on it (copies, fills, host functions, ``stflow.emulated.launch`` work) becomes
a node after the previous one instead of running. A loop node holds a body graph and a
condition *handle*; ``stflow.emulated.set_conditional(handle, value)`` sets it from
launched work, as ``cudaGraphSetConditional`` does on a GPU.

Launching an executable enqueues one operation on the stream; when the scheduler runs
it, the nodes run one after the other in a random order that respects the edges (seeded
from the launch), so an edge the recorder forgot changes results for some seeds. A
while loop runs its body once and again while its handle is non-zero; its handle is
set to 1 each time the loop node is reached. A repeat loop runs its body ``count``
times.

Validation
    Building a graph checks what the CUDA driver checks, so that a recorder bug that
    would fail on a GPU (``CUDA_ERROR_INVALID_VALUE``) fails here too, with
    :class:`EmulatedGraphError`: every node named as a dependency (of a capture, a
    loop node or an edge) must be a live node of the graph being built, never one of
    an enclosing, nested or sibling graph (a conditional body graph is a graph of
    its own); an edge must join two distinct nodes; a removed node or a destroyed
    graph cannot be used again.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._base import Stream
from ._graphs import ConditionTerm, GraphSupport

__all__ = ["EmulatedGraphError", "EmulatedGraphs", "set_conditional"]

_handles = itertools.count(0x7C0001)
_conditions: dict[int, list[int]] = {}
_conditions_lock = threading.Lock()

_COMPARE: dict[str, Callable[[Any, float], bool]] = {
    ">": lambda value, threshold: value > threshold,
    "<": lambda value, threshold: value < threshold,
    ">=": lambda value, threshold: value >= threshold,
    "<=": lambda value, threshold: value <= threshold,
}


def set_conditional(handle: int, value: int) -> None:
    """Set the condition of a loop from emulated device work (``loop.cond_handle``)."""
    cell = _conditions.get(int(handle))
    if cell is None:
        raise ValueError(f"{handle!r} is not a live loop condition handle")
    cell[0] = 1 if value else 0


class EmulatedGraphError(RuntimeError):
    """A graph was built in a way the CUDA driver refuses (``CUDA_ERROR_INVALID_VALUE``
    on a GPU): a dependency on a node of another graph, a removed node, a self edge."""


class Node:
    """A node of an emulated graph: a callable, or a loop. ``graph`` is the graph it
    belongs to (``None`` once removed)."""

    __slots__ = ("run", "deps", "loop", "graph")

    def __init__(
        self,
        run: Callable[[], None] | None,
        deps: list[Node],
        loop: Loop | None = None,
        graph: Graph | None = None,
    ) -> None:
        self.run = run
        self.deps = deps
        self.loop = loop
        self.graph = graph


class Loop:
    __slots__ = ("body", "count", "handle")

    def __init__(self, body: Graph, count: int | None, handle: int) -> None:
        self.body = body
        self.count = count
        self.handle = handle


class Graph:
    __slots__ = ("nodes", "handles", "parent", "destroyed", "captures")

    def __init__(self, parent: Node | None = None) -> None:
        self.nodes: list[Node] = []
        self.handles: list[int] = []  # condition handles it owns
        self.parent = parent  # the loop node of a body graph
        self.destroyed = False
        self.captures = 0  # streams capturing into it now

    def describe(self) -> str:
        depth, node = 0, self.parent
        while node is not None and node.graph is not None:
            depth, node = depth + 1, node.graph.parent
        return "a top-level graph" if depth == 0 else f"a loop body {depth} deep"


def _check_not_capturing(graph: Graph, step: str) -> None:
    """Refuse to change a loop body that a stream captures into (on CUDA such a
    capture goes straight into the body graph, ``cuStreamBeginCaptureToGraph``; a
    top-level graph's captures go into graphs of their own)."""
    if graph.captures and graph.parent is not None:
        raise EmulatedGraphError(
            f"{step}: {graph.describe()} is the target of "
            f"{graph.captures} open stream capture(s)"
        )


def _check_nodes(graph: Graph, nodes: Sequence[Any], step: str) -> None:
    """Refuse, as the CUDA driver does, dependencies that are not nodes of ``graph``."""
    if graph.destroyed:
        raise EmulatedGraphError(f"{step}: the graph was destroyed")
    for node in nodes:
        if not isinstance(node, Node):
            raise EmulatedGraphError(f"{step}: {node!r} is not a graph node")
        if node.graph is not graph:
            where = (
                "a removed node"
                if node.graph is None
                else f"a node of {node.graph.describe()}"
            )
            raise EmulatedGraphError(
                f"{step}: a dependency is {where}, not of {graph.describe()} (a CUDA "
                "graph's edges join nodes of one graph; the driver answers "
                "CUDA_ERROR_INVALID_VALUE)"
            )


class Capture:
    """The state of a capturing emulated stream."""

    __slots__ = ("graph", "deps")

    def __init__(self, graph: Graph, deps: list[Node]) -> None:
        self.graph = graph
        self.deps = deps

    def add(self, fn: Callable[[], None]) -> None:
        node = Node(fn, self.deps, graph=self.graph)
        self.graph.nodes.append(node)
        self.deps = [node]


class Executable:
    __slots__ = ("graph", "launches")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.launches = 0


class EmulatedGraphs(GraphSupport):
    """:class:`GraphSupport` of the emulated backend."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def create_graph(self) -> Graph:
        return Graph()

    def destroy_graph(self, graph: Graph) -> None:
        """Destroy ``graph`` and let go of what its nodes run (their arguments): its
        executables run copies (:func:`_copy`), and events of its work may outlive it
        in data states, holding its nodes."""
        with _conditions_lock:
            for handle in graph.handles:
                _conditions.pop(handle, None)
        graph.handles = []
        graph.destroyed = True
        graphs = [graph]
        while graphs:
            for node in graphs.pop().nodes:
                node.run = None
                node.deps = []
                if node.loop is not None:
                    graphs.append(node.loop.body)

    def begin_capture(self, stream: Stream, graph: Graph, deps: Sequence[Any]) -> None:
        if stream.capture is not None:  # type: ignore[attr-defined]
            raise RuntimeError(f"{stream!r} is already capturing")
        _check_nodes(graph, deps, "beginning a capture")
        stream.capture = Capture(graph, list(deps))  # type: ignore[attr-defined]
        graph.captures += 1

    def end_capture(self, stream: Stream) -> list[Any]:
        capture = stream.capture  # type: ignore[attr-defined]
        if capture is None:
            raise RuntimeError(f"{stream!r} is not capturing")
        stream.capture = None  # type: ignore[attr-defined]
        capture.graph.captures -= 1
        return capture.deps

    def add_dependencies(self, graph: Graph, before: Sequence[Any], after: Any) -> None:
        step = "adding dependencies to a graph node"
        _check_nodes(graph, [*before, after], step)
        _check_not_capturing(graph, step)
        if after in before:
            raise EmulatedGraphError(f"{step}: a node cannot depend on itself")
        for node in before:
            if node not in after.deps:
                after.deps.append(node)

    def remove_node(self, graph: Graph, node: Any) -> None:
        _check_nodes(graph, [node], "removing a graph node")
        node.graph = None
        graph.nodes.remove(node)
        for other in graph.nodes:
            if node in other.deps:
                other.deps.remove(node)
        if node.loop is not None:
            self.destroy_graph(node.loop.body)

    def mark(self, graph: Graph) -> int:
        return len(graph.nodes)

    def truncate(self, graph: Graph, mark: int) -> None:
        for node in reversed(graph.nodes[mark:]):
            self.remove_node(graph, node)

    def add_loop(
        self, graph: Graph, deps: Sequence[Any], device: int, count: int | None
    ) -> tuple[Node, Graph, int]:
        handle = next(_handles)
        with _conditions_lock:
            _conditions[handle] = [1]
        _check_nodes(graph, deps, "adding a loop node")
        _check_not_capturing(graph, "adding a loop node")
        graph.handles.append(handle)
        node = Node(None, list(deps), graph=graph)
        body = Graph(node)
        node.loop = Loop(body, count, handle)
        graph.nodes.append(node)
        return node, body, handle

    def set_condition(
        self, stream: Stream, handle: int, terms: Sequence[ConditionTerm], combiner: str
    ) -> None:
        readers = [
            (_reader(ptr, dtype), _COMPARE[op], threshold, negate)
            for ptr, dtype, op, threshold, negate in terms
        ]
        combine = all if combiner == "all" else any

        def evaluate() -> None:
            value = combine(
                compare(read(), threshold) != negate
                for read, compare, threshold, negate in readers
            )
            set_conditional(handle, int(value))

        self.backend.enqueue_call(stream, evaluate)

    def end_loop_body(self, body: Graph, handle: int, sinks: Sequence[Any]) -> None:
        """Nothing to add: the emulated loop node counts its own iterations."""

    def instantiate(self, graph: Graph) -> Executable:
        return Executable(_copy(graph))

    def update(self, executable: Executable, graph: Graph) -> bool:
        executable.graph = _copy(graph)
        return True

    def topology(self, graph: Graph) -> Any:
        """``(nodes, edges)`` of the top level, the key of the recorder's executable
        cache, as on CUDA (an update here replaces the executable's graph, so it
        never fails)."""
        return len(graph.nodes), sum(len(node.deps) for node in graph.nodes)

    def launch(self, executable: Executable, stream: Stream) -> None:
        executable.launches += 1
        rng = random.Random(
            hash((self.backend.seed, id(executable), executable.launches))
        )
        graph = executable.graph

        def run() -> None:
            _run_graph(graph, rng)

        self.backend.enqueue_call(stream, run)

    def destroy_exec(self, executable: Executable) -> None:
        executable.graph = Graph()


def _copy(graph: Graph) -> Graph:
    """What an executable runs: the nodes of ``graph`` and of its loop bodies, copied
    (as CUDA's instantiation copies a graph, so that destroying or changing the graph
    leaves its executables as they were). Iterative: loops may nest thousands deep."""
    top = Graph()
    pending = [(graph, top)]
    while pending:
        source, copy = pending.pop()
        copies = {node: Node(node.run, [], graph=copy) for node in source.nodes}
        for node, twin in copies.items():
            twin.deps = [copies[dep] for dep in node.deps]
            loop = node.loop
            if loop is not None:
                body = Graph(twin)
                twin.loop = Loop(body, loop.count, loop.handle)
                pending.append((loop.body, body))
        copy.nodes = list(copies.values())
    return top


def _reader(ptr: int, dtype: np.dtype) -> Callable[[], Any]:
    ctype = np.ctypeslib.as_ctypes_type(dtype)
    cell = ctype.from_address(ptr)
    return lambda: cell.value


def _run_graph(graph: Graph, rng: random.Random) -> None:
    """Run every node once, in a random order compatible with the edges; a loop node runs
    its body graph as many times as it says.

    Iterative, with an explicit stack of frames: scopes nested thousands deep must not
    exhaust the interpreter's recursion limit on the device thread."""
    stack: list[_GraphRun | _LoopRun] = [_GraphRun(graph)]
    while stack:
        frame = stack[-1]
        if isinstance(frame, _LoopRun):
            if frame.again():
                stack.append(_GraphRun(frame.loop.body))
            else:
                stack.pop()
            continue
        if frame.running is not None:  # its loop node has just finished
            frame.complete(frame.running)
            frame.running = None
        if not frame.ready:
            frame.check()
            stack.pop()
            continue
        node = frame.ready.pop(rng.randrange(len(frame.ready)))
        if node.loop is not None:
            frame.running = node
            stack.append(_LoopRun(node.loop))
            continue
        if node.run is not None:
            node.run()
        frame.complete(node)


class _GraphRun:
    """One execution of one graph: which nodes wait on how many others, which are ready."""

    __slots__ = ("nodes", "waiting", "users", "ready", "ran", "running")

    def __init__(self, graph: Graph) -> None:
        self.nodes = graph.nodes
        self.waiting = {node: len(set(node.deps)) for node in self.nodes}
        self.users: dict[Node, list[Node]] = {}
        for node in self.nodes:
            for dep in set(node.deps):
                self.users.setdefault(dep, []).append(node)
        self.ready = [node for node, count in self.waiting.items() if count == 0]
        self.ran = 0
        self.running: Node | None = None

    def complete(self, node: Node) -> None:
        self.ran += 1
        for user in self.users.get(node, ()):
            self.waiting[user] -= 1
            if self.waiting[user] == 0:
                self.ready.append(user)

    def check(self) -> None:
        if self.ran != len(self.nodes):
            raise RuntimeError(
                f"an emulated graph has a dependency cycle: "
                f"{len(self.nodes) - self.ran} of its nodes never became ready"
            )


class _LoopRun:
    """One execution of a loop node: a count of iterations, or a condition cell."""

    __slots__ = ("loop", "done")

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.done = 0

    def again(self) -> bool:
        loop = self.loop
        self.done += 1
        if loop.count is not None:
            return self.done <= loop.count
        cell = _conditions[loop.handle]
        if self.done == 1:
            cell[0] = 1  # the body runs at least once
        return bool(cell[0])
