"""The transitive reduction of a task graph, in near-linear time.

:class:`~stflow._instruments.dot.DotRecorder` draws a task graph without the edges that
longer paths imply; :func:`transitive_reduction` explains how they are found. Pure:
edges and node numbers in, edges out.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Sequence

__all__ = ["transitive_reduction"]


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
