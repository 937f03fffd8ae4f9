"""The instruments that ship with stflow: task graphs, timelines, NVTX ranges.

:class:`DotRecorder` (the inferred task graph in Graphviz DOT), :class:`TraceRecorder`
(a Chrome / Perfetto timeline, spans timed on the device) and :class:`NvtxRanges`
(NVTX ranges named after tasks, for Nsight Systems). Each listens at the seam of
``_instruments/seam.py``; ``STFLOW_DOT_FILE``, ``STFLOW_TRACE_FILE`` and ``STFLOW_NVTX``
attach them to every new context. A task graph of more than ``max_nodes`` nodes
(``STFLOW_DOT_MAX_NODES``, default 500) is written as a summary, one node per symbol;
:func:`transitive_reduction` explains how the graph is reduced in near-linear time.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .seam import Instrument, WorkRecord, byte_size_text, place_name

__all__ = ["DotRecorder", "NvtxRanges", "TraceRecorder", "transitive_reduction"]

_MODES = {1: "read", 2: "write", 3: "rw"}


# -- DOT ------------------------------------------------------------------------


class DotRecorder(Instrument):
    """Record the inferred task graph; write it in Graphviz DOT.

    Tasks and host callbacks are nodes named by their symbol; an edge ``a -> b`` means
    ``b`` must follow ``a`` because of their accesses (read after write, write after
    read or write after write on some logical data), derived from the accesses in
    submission order by the rules of ``_core/deps.py``. Copies are separate, dashed nodes
    feeding the work that needed them. ``ctx.wait(ld)`` and ``ctx.fence()`` are
    octagons after the work they wait for, and the scopes of a ``stackable_context``
    (loop bodies, graph scopes, launchable graphs) are clusters around their work.

    A graph of more than ``max_nodes`` nodes is *summarised*: one node per symbol
    (per scope), labelled with how many tasks it stands for, their places and their
    copies, and one edge per pair of symbols, labelled with how many dependencies it
    stands for. The output says so, and how to get the full graph.

    Parameters
    ----------
    path : str or path, optional
        Where :meth:`write` (and ``finalize()``) writes the graph.
    reduce : bool
        Drop the edges implied by longer paths (the transitive reduction).
    summary : bool, optional
        ``True``: always summarise; ``False``: always draw every task; default:
        summarise graphs of more than ``max_nodes`` nodes.
    max_nodes : int, optional
        The largest graph drawn in full (tasks, host callbacks, copies, waits and
        fences); ``0``: no limit. Default: ``STFLOW_DOT_MAX_NODES``, else 500.

    Raises
    ------
    TypeError
        For an argument of the wrong type.
    ValueError
        For a negative ``max_nodes``.

    Notes
    -----
    The recorder keeps one record per task; :meth:`to_dot` takes time about linear
    in the tasks and dependencies (see :func:`transitive_reduction`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        reduce: bool = True,
        *,
        summary: bool | None = None,
        max_nodes: int | None = None,
    ) -> None:
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"DotRecorder(path={path!r}): give a file path (str or "
                "os.PathLike), or leave it out"
            )
        if not isinstance(reduce, bool):
            raise TypeError(f"DotRecorder(reduce={reduce!r}): give True or False")
        _check_summary("DotRecorder", summary)
        if max_nodes is None:
            from .._core.config import config

            max_nodes = config().dot_max_nodes
        elif isinstance(max_nodes, bool) or not isinstance(max_nodes, int):
            raise TypeError(
                f"DotRecorder(max_nodes={max_nodes!r}): give the largest "
                "number of nodes drawn in full as an int (0: no limit)"
            )
        elif max_nodes < 0:
            raise ValueError(
                f"DotRecorder(max_nodes={max_nodes!r}): give a number of "
                "nodes >= 0 (0: no limit)"
            )
        self.path = path
        self.reduce = reduce
        self.summary = summary
        self.max_nodes = max_nodes
        self.records: list[WorkRecord] = []
        # Synchronisation nodes: (ident, label, predecessors); fences have negative
        # idents. Scopes: id -> (parent id, kind, count, discarded).
        self.syncs: list[tuple[int, str, list[int]]] = []
        self.clusters: dict[int, list[Any]] = {}
        self._scope_of: dict[int, int] = {}
        self._open: dict[int, list[int]] = {}  # thread -> stack of scope ids
        self._since_fence: list[int] = []
        self._order: list[int] = []  # every node, in submission order

    def work_submitted(self, record: WorkRecord) -> None:
        if record.kind in ("task", "host_launch"):
            self.records.append(record)
            self._order.append(record.ident)
            self._since_fence.append(record.ident)
            stack = self._open.get(threading.get_ident())
            if stack:
                self._scope_of[record.ident] = stack[-1]
        elif record.kind == "wait":
            self.syncs.append((record.ident, record.label, list(record.predecessors)))
            self._order.append(record.ident)

    def fence(self) -> None:
        ident = -(sum(1 for s in self.syncs if s[0] < 0) + 1)
        self.syncs.append((ident, "fence", self._since_fence))
        self._order.append(ident)
        self._since_fence = []

    def scope_opened(self, kind: str, count: int | None) -> None:
        stack = self._open.setdefault(threading.get_ident(), [])
        number = len(self.clusters) + 1
        self.clusters[number] = [stack[-1] if stack else None, kind, count, False]
        stack.append(number)

    def scope_closed(self, discarded: bool) -> None:
        stack = self._open.get(threading.get_ident())
        if stack:
            self.clusters[stack.pop()][3] = discarded

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
            edges = transitive_reduction(edges, self._order)
        return edges

    def _graph_edges(self) -> set[tuple[int, int]]:
        """The edges drawn: between work, and into waits and fences."""
        drawn = {record.ident for record in self.records}
        edges = self.edges(reduce=False)
        for ident, _, predecessors in self.syncs:
            edges.update((p, ident) for p in predecessors if p in drawn)
            drawn.add(ident)
        if self.reduce:
            edges = transitive_reduction(edges, self._order)
        return edges

    def node_count(self) -> int:
        """The nodes of the full graph: work, copies, waits and fences."""
        return (
            len(self.records)
            + len(self.syncs)
            + sum(len(record.transfers) for record in self.records)
        )

    def to_dot(self, *, summary: bool | None = None) -> str:
        """The graph in Graphviz DOT.

        Parameters
        ----------
        summary : bool, optional
            ``True``: one node per symbol; ``False``: every task; default: the
            recorder's ``summary`` setting (by default: summarise graphs of more
            than ``max_nodes`` nodes).
        """
        _check_summary("to_dot", summary)
        if summary is None:
            summary = self.summary
        edges = self._graph_edges()
        nodes = self.node_count()
        if summary is None:
            summary = 0 < self.max_nodes < nodes
        if summary:
            return self._summary_dot(edges, nodes)
        return self._full_dot(edges)

    def _full_dot(self, edges: set[tuple[int, int]]) -> str:
        nodes: dict[int | None, list[str]] = {}
        for record in self.records:
            shape = (
                ', shape=ellipse, fillcolor="#fff4d6"'
                if record.kind == "host_launch"
                else ""
            )
            where = place_name(record.device)
            lines = nodes.setdefault(self._scope_of.get(record.ident), [])
            lines.append(
                f'w{record.ident} [label="{_escape(record.label)}\\n{where}"{shape}];'
            )
            for number, (data, source, target, nbytes) in enumerate(record.transfers):
                node = f"c{record.ident}_{number}"
                lines.append(
                    f'{node} [label="{_escape(data)}\\n{place_name(source)}→'
                    f'{place_name(target)}\\n{byte_size_text(nbytes)}", shape=note, '
                    'style="dashed,filled", fillcolor="#eeeeee", fontsize=10];'
                )
                lines.append(f"{node} -> w{record.ident} [style=dashed];")
        for ident, label, _ in self.syncs:
            fill = "#fde2e2" if ident >= 0 else "#e2f5e2"
            nodes.setdefault(None, []).append(
                f'{_node(ident)} [label="{_escape(label)}", '
                f'shape=octagon, fillcolor="{fill}"];'
            )
        lines = _HEADER[:]
        self._emit_scopes(lines, nodes)
        for source, target in sorted(edges):
            lines.append(f"  {_node(source)} -> {_node(target)};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _emit_scopes(
        self,
        lines: list[str],
        nodes: dict[int | None, list[str]],
        with_scopes: bool = True,
    ) -> None:
        """Append the nodes of each scope, nested in clusters as the scopes are."""
        children: dict[int | None, list[int]] = {}
        for number, (parent, _, _, _) in (self.clusters if with_scopes else {}).items():
            children.setdefault(parent, []).append(number)

        def emit(scope: int | None, indent: str) -> None:
            lines.extend(indent + line for line in nodes.get(scope, ()))
            for child in children.get(scope, ()):
                _, kind, count, discarded = self.clusters[child]
                title = _SCOPE_TITLES.get(kind, kind)
                if kind == "repeat":
                    title = f"repeat({count})"
                style = "dashed" if discarded else "rounded"
                lines.append(f"{indent}subgraph cluster_{child} {{")
                lines.append(
                    f'{indent}  label="{title}'
                    f'{" (discarded)" if discarded else ""}"; style={style};'
                )
                emit(child, indent + "  ")
                lines.append(f"{indent}}}")

        emit(None, "  ")

    def _summary_dot(self, edges: set[tuple[int, int]], node_count: int) -> str:
        """One node per symbol (and scope), one edge per pair of them, with counts.

        The symbols are taken whole while that gives at most ``max_nodes`` groups;
        else the scopes are left out, and then the numbers in the symbols become
        ``*`` (``matvec[3]`` joins ``matvec[*]``).
        """
        for by_scope, coarse in ((True, False), (False, False), (False, True)):
            group_of, groups = self._groups(by_scope, coarse)
            if not self.max_nodes or len(groups) <= self.max_nodes:
                break
        nodes: dict[int | None, list[str]] = {}
        for number, group in enumerate(groups.values(), 1):
            text = f"{_escape(group.label)}\\n× {group.members}"
            if group.places:
                text += " on " + ", ".join(place_name(p) for p in sorted(group.places))
            if group.copies:
                text += (
                    f"\\n{group.copies} {'copy' if group.copies == 1 else 'copies'}"
                    f" in, {byte_size_text(group.moved)}"
                )
            style = _GROUP_STYLES.get(group.kind, "")
            nodes.setdefault(group.scope, []).append(
                f'g{number} [label="{text}"{style}];'
            )
        numbers = {key: number for number, key in enumerate(groups, 1)}
        between: dict[tuple[int, int], int] = {}
        for source, target in edges:
            pair = (numbers[group_of[source]], numbers[group_of[target]])
            between[pair] = between.get(pair, 0) + 1
        work = len(self.records)
        copies = node_count - work - len(self.syncs)
        how = (
            "the full graph: DotRecorder(summary=False) or to_dot(summary=False), "
            "or STFLOW_DOT_MAX_NODES=0 in the environment"
        )
        grouping = (
            "symbol"
            + (" and scope" if by_scope and self.clusters else "")
            + (", numbers as *" if coarse else "")
        )
        lines = (
            _HEADER[:1]
            + [
                (
                    f"  // stflow: summary of {node_count} nodes ({work} tasks and host "
                    f"callbacks, {copies} copies, {len(self.syncs)} waits and fences) in "
                    f"{len(groups)} groups by {grouping}; max_nodes={self.max_nodes}."
                ),
                (
                    "  // A node counts the work it stands for (× n), an edge the "
                    f"{'reduced ' if self.reduce else ''}dependencies between two groups."
                ),
                f"  // For {how}.",
            ]
            + _HEADER[1:]
        )
        self._emit_scopes(lines, nodes, by_scope)
        for (source, target), count in sorted(between.items()):
            lines.append(f'  g{source} -> g{target} [label="{count}"];')
        lines.append(
            f'  label="summary of {work} tasks in {len(groups)} groups by '
            f"{grouping}; the full graph: to_dot(summary=False) or "
            'STFLOW_DOT_MAX_NODES=0"; labelloc=t;'
        )
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _groups(
        self, by_scope: bool, coarse: bool
    ) -> tuple[dict[int, tuple[Any, ...]], dict[tuple[Any, ...], _Group]]:
        """Each node's group key, and the groups in order of first appearance."""
        group_of: dict[int, tuple[Any, ...]] = {}
        groups: dict[tuple[Any, ...], _Group] = {}

        def join(ident: int, scope: int | None, kind: str, label: str) -> _Group:
            if coarse:
                label = _NUMBERS.sub("*", label)
            key = (scope if by_scope else None, kind, label)
            group_of[ident] = key
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group(key[0], kind, label)
            group.members += 1
            return group

        for record in self.records:
            group = join(
                record.ident, self._scope_of.get(record.ident), record.kind, record.label
            )
            group.places.add(record.device)
            group.copies += len(record.transfers)
            group.moved += sum(transfer[3] for transfer in record.transfers)
        for ident, label, _ in self.syncs:
            join(ident, None, "fence" if ident < 0 else "wait", label)
        return group_of, groups

    def write(
        self, path: str | os.PathLike[str] | None = None, *, summary: bool | None = None
    ) -> None:
        """Write :meth:`to_dot` to ``path`` (default: the recorder's, else
        ``stflow.dot``)."""
        with open(path or self.path or "stflow.dot", "w") as out:
            out.write(self.to_dot(summary=summary))

    def finalized(self) -> None:
        if self.path:
            self.write()


@dataclass
class _Group:
    """Nodes of one symbol (in one scope) drawn as one node of a summary."""

    scope: int | None
    kind: str
    label: str
    places: set[int] = field(default_factory=set)
    members: int = 0
    copies: int = 0
    moved: int = 0  # bytes copied in


_GROUP_STYLES = {
    "host_launch": ', shape=ellipse, fillcolor="#fff4d6"',
    "wait": ', shape=octagon, fillcolor="#fde2e2"',
    "fence": ', shape=octagon, fillcolor="#e2f5e2"',
}
_HEADER = [
    "digraph stflow {",
    "  rankdir=TB;",
    '  node [shape=box, style="rounded,filled", fillcolor="#e8f0fe"];',
]
_NUMBERS = re.compile(r"\d+")


def _check_summary(caller: str, summary: Any) -> None:
    if summary is not None and not isinstance(summary, bool):
        raise TypeError(
            f"{caller}(summary={summary!r}): give True (one node per "
            "symbol), False (every task) or None (summarise graphs of "
            "more than max_nodes nodes)"
        )


_SCOPE_TITLES = {
    "while": "while_loop",
    "graph": "graph_scope",
    "launchable": "launchable graph",
}


def _node(ident: int) -> str:
    return f"w{ident}" if ident >= 0 else f"wf{-ident}"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def transitive_reduction(
    edges: Iterable[tuple[int, int]], order: Sequence[int] | None = None
) -> set[tuple[int, int]]:
    """Drop every edge ``a -> c`` implied by a longer path ``a -> ... -> c``.

    Parameters
    ----------
    edges : iterable of (int, int)
        The edges of a directed acyclic graph.
    order : sequence of int, optional
        Its nodes in a topological order (a task graph: the order of submission),
        every source before its targets. By default one is computed (Kahn's
        algorithm, the smallest node first among those ready).

    Returns
    -------
    set of (int, int)
        The transitive reduction: the fewest edges with the same paths.

    Raises
    ------
    ValueError
        When ``edges`` has a cycle, or ``order`` misses a node or puts a target
        before its source.

    Notes
    -----
    Exact, and near-linear on task graphs. Each node keeps, as bits of a Python
    integer, its ancestors among the ``window`` nodes just before it in ``order``,
    and its ancestors among the *landmarks*, the sources of edges longer than the
    window (data written once and read much later). Nodes are visited in ``order``;
    the predecessors of a node are tried nearest first, and an edge from a
    predecessor already among the ancestors gathered from the nearer ones is implied.
    The window is chosen to minimise ``window + landmarks``, so the work is about
    ``edges * (window + landmarks) / 64`` machine words; a task graph, whose
    dependencies are mostly short, keeps both small. The bits of a node are
    dropped once its last successor is visited.
    """
    edge_list: Collection[tuple[int, int]] = (
        edges if isinstance(edges, (set, frozenset, list, tuple)) else list(edges)
    )
    if order is None:
        order = _topological_order(edge_list)
    position, predecessors, longest = _spans(edge_list, order)
    window = _best_window(longest.values())
    landmark = {
        source: bit
        for bit, source in enumerate(
            sorted(s for s, span in longest.items() if span > window)
        )
    }
    successors_left = dict.fromkeys(longest, 0)
    for source, _ in edge_list:
        successors_left[source] += 1
    near: dict[int, int] = {}  # bit window - d: the ancestor d positions back
    far: dict[int, int] = {}  # bit landmark[a]: the landmark a is an ancestor
    reduced: set[tuple[int, int]] = set()
    for node in order:
        sources = predecessors.get(node)
        near_bits = far_bits = 0
        if sources:
            near_bits, far_bits = _keep_edges_into(
                node, sources, position, window, landmark, near, far, reduced
            )
            for source in sources:
                successors_left[source] -= 1
                if successors_left[source] == 0:
                    near.pop(source, None)
                    far.pop(source, None)
        if node in successors_left:  # someone will ask
            if near_bits:
                near[node] = near_bits
            if far_bits:
                far[node] = far_bits
    return reduced


def _keep_edges_into(
    node: int,
    sources: list[int],
    position: dict[int, int],
    window: int,
    landmark: dict[int, int],
    near: dict[int, int],
    far: dict[int, int],
    reduced: set[tuple[int, int]],
) -> tuple[int, int]:
    """Add to ``reduced`` the edges into ``node`` that no nearer predecessor implies
    (see :func:`transitive_reduction`); return ``node``'s ancestor bits, within the
    window and among the landmarks. Sorts ``sources`` nearest first."""
    here = position[node]
    near_bits = far_bits = 0
    sources.sort(key=position.__getitem__, reverse=True)
    for source in dict.fromkeys(sources):  # nearest first, once each
        distance = here - position[source]
        if distance <= window:
            own = 1 << (window - distance)
            if near_bits & own:
                continue  # implied by a nearer one
        else:
            if far_bits >> landmark[source] & 1:
                continue
            own = 0
        reduced.add((source, node))
        near_bits |= (near.get(source, 0) >> distance) | own
        far_bits |= far.get(source, 0)
        if source in landmark:
            far_bits |= 1 << landmark[source]
    return near_bits, far_bits


def _spans(
    edges: Collection[tuple[int, int]], order: Sequence[int]
) -> tuple[dict[int, int], dict[int, list[int]], dict[int, int]]:
    """Each node's position in ``order``, its predecessors, and (for sources) the
    length of its longest edge in positions; checks ``order``."""
    position = {node: index for index, node in enumerate(order)}
    if len(position) < len(order):
        raise ValueError(
            "transitive_reduction: order lists a node twice; give each "
            "node once, or leave order out"
        )
    predecessors: dict[int, list[int]] = {}
    longest: dict[int, int] = {}
    for source, target in edges:
        if source not in position or target not in position:
            missing = source if source not in position else target
            raise ValueError(
                f"transitive_reduction: node {missing!r} of edge "
                f"{(source, target)!r} is not in the order given; list "
                "every node, or leave order out"
            )
        span = position[target] - position[source]
        if span <= 0:
            raise ValueError(
                f"transitive_reduction: edge {(source, target)!r} goes "
                "against the order given (or is a loop); give a "
                "topological order, or leave order out"
            )
        predecessors.setdefault(target, []).append(source)
        if span > longest.get(source, 0):
            longest[source] = span
    return position, predecessors, longest


def _reduction_width(edges: Collection[tuple[int, int]], order: Sequence[int]) -> int:
    """The bits :func:`transitive_reduction` keeps per node for these edges (window
    plus landmarks): its work is about ``len(edges) * (1 + width / 64)`` steps."""
    _, _, longest = _spans(edges, order)
    window = _best_window(longest.values())
    return window + sum(1 for span in longest.values() if span > window)


def _best_window(spans: Iterable[int]) -> int:
    """The window ``w`` minimising ``w + (number of spans longer than w)``."""
    ordered = sorted(spans)
    best, best_cost = 0, len(ordered)
    for index, span in enumerate(ordered):
        if index + 1 < len(ordered) and ordered[index + 1] == span:
            continue
        cost = span + len(ordered) - index - 1
        if cost < best_cost:
            best, best_cost = span, cost
    return best


def _topological_order(edges: Iterable[tuple[int, int]]) -> list[int]:
    """The nodes of ``edges``, sources first (the smallest ready node next)."""
    successors: dict[int, list[int]] = {}
    waiting: dict[int, int] = {}
    for source, target in edges:
        successors.setdefault(source, []).append(target)
        waiting.setdefault(source, 0)
        waiting[target] = waiting.get(target, 0) + 1
    ready = [node for node, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for target in successors.get(node, ()):
            waiting[target] -= 1
            if waiting[target] == 0:
                heapq.heappush(ready, target)
    if len(order) < len(waiting):
        stuck = sorted(node for node, count in waiting.items() if count > 0)[:5]
        raise ValueError(
            "transitive_reduction: the edges have a cycle (through "
            f"{stuck}); a task graph never does — pass the edges of a "
            "directed acyclic graph"
        )
    return order


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
