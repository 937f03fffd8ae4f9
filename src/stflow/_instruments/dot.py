"""The inferred task graph in Graphviz DOT (:class:`DotRecorder`).

The recorder listens at the seam of ``_instruments/seam.py``; ``STFLOW_DOT_FILE``
attaches one to every new context. A task graph of more than ``max_nodes`` nodes
(``STFLOW_DOT_MAX_NODES``, default 500) is written as a summary, one node per symbol;
the edges implied by longer paths are dropped by :func:`transitive_reduction`
(``reduction.py``, which explains how the graph is reduced in near-linear time).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from .reduction import transitive_reduction
from .seam import Instrument, WorkRecord, byte_size_text, place_name

__all__ = ["DotRecorder"]


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
