"""What graph mode asks of a backend: building graphs by capture, and launching them.

Graph mode (``context(use_graph=True)``, the scopes of ``stackable_context``,
``task_graph``) runs the same runtime over a recorder (``recording.py``) that turns
stream operations into graph nodes. The recorder needs these operations from the real
backend, through ``backend.graphs`` (a :class:`GraphSupport`, or ``None`` when the
backend has no graphs):

==================  ===============================================================
graphs              ``create_graph``, ``destroy_graph``
capture             ``begin_capture``, ``end_capture``: work enqueued on a real stream
                    in between (copies, fills, host functions, whatever a task body
                    enqueues) becomes nodes of a graph instead of running
edges               ``add_dependencies``, ``remove_node``, ``mark`` and
                    ``truncate`` (remove what was added since a mark)
loops               ``add_loop`` (a conditional node and its body graph),
                    ``set_condition`` (enqueue the evaluation of a loop condition),
                    ``end_loop_body``
executables         ``instantiate``, ``update``, ``launch``, ``destroy_exec``
==================  ===============================================================

Nodes, graphs and executables are opaque to the recorder: it only passes back what
these methods returned. Graphs nest: the body of a loop is a graph whose nodes only the
loop node's graph refers to.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._base import Stream

__all__ = ["ConditionTerm", "GraphSupport"]

ConditionTerm = tuple[int, np.dtype, str, float, bool]
"""One term of a loop condition: ``(ptr, dtype, op, threshold, negate)``.

The term holds when ``element0 op threshold`` holds (``op`` is ``">"``, ``"<"``,
``">="`` or ``"<="``; ``element0`` is the value of type ``dtype`` at device address
``ptr``), inverted when ``negate`` is true. ``dtype`` is one of float32, float64,
int32, int64.
"""


class GraphSupport(abc.ABC):
    """Graph construction and launch for one backend."""

    @abc.abstractmethod
    def create_graph(self) -> Any:
        """A new, empty graph."""

    @abc.abstractmethod
    def destroy_graph(self, graph: Any) -> None:
        """Release a graph of :meth:`create_graph` and whatever it owns (loop
        counters, host functions kept for its host nodes). Executables instantiated
        from it stay valid."""

    @abc.abstractmethod
    def begin_capture(self, stream: Stream, graph: Any, deps: Sequence[Any]) -> None:
        """From now on, work enqueued on the real ``stream`` becomes nodes of
        ``graph``, the first of them depending on the nodes ``deps``.

        Everything the backend does on a stream must be capturable: copies, fills,
        host functions (which then run at every launch of the graph) and the work a
        task body enqueues. Only one capture per stream at a time.
        """

    @abc.abstractmethod
    def end_capture(self, stream: Stream) -> list[Any]:
        """Stop capturing on ``stream``.

        Returns the nodes later work must depend on to come after everything captured
        (and after the ``deps`` given to :meth:`begin_capture`): the leaves of what
        was captured, one node holding it, or ``deps`` themselves when nothing was.
        """

    @abc.abstractmethod
    def add_dependencies(self, graph: Any, before: Sequence[Any], after: Any) -> None:
        """Make node ``after`` of ``graph`` depend on the nodes ``before`` (an edge
        that exists already is kept once)."""

    @abc.abstractmethod
    def remove_node(self, graph: Any, node: Any) -> None:
        """Remove ``node`` (a loop node whose body failed to record) and its edges."""

    @abc.abstractmethod
    def add_loop(
        self, graph: Any, deps: Sequence[Any], device: int, count: int | None
    ) -> tuple[Any, Any, int]:
        """Add a loop node to ``graph`` after ``deps``; returns ``(node, body, handle)``.

        ``count=None`` is a while loop: at each launch the body runs once, then again
        as long as the condition last set by :meth:`set_condition` (on ``handle``) is
        true. ``count=n`` repeats the body exactly ``n`` times (``0``: never). ``body``
        is the graph to record the body into; ``handle`` identifies the condition
        (on CUDA the ``CUgraphConditionalHandle`` value, which device code may set with
        ``cudaGraphSetConditional``).
        """

    @abc.abstractmethod
    def set_condition(
        self, stream: Stream, handle: int, terms: Sequence[ConditionTerm], combiner: str
    ) -> None:
        """Enqueue on ``stream`` (capturing into a loop body) the evaluation of a
        condition: ``handle`` becomes 1 if all (``combiner="all"``) or any
        (``"any"``) of ``terms`` hold, else 0."""

    @abc.abstractmethod
    def end_loop_body(self, body: Any, handle: int, sinks: Sequence[Any]) -> None:
        """The body of a loop is recorded; ``sinks`` are its nodes that nothing in the
        body depends on. A repeat loop adds its counter step after them."""

    @abc.abstractmethod
    def instantiate(self, graph: Any) -> Any:
        """An executable graph of ``graph``."""

    @abc.abstractmethod
    def update(self, executable: Any, graph: Any) -> bool:
        """Give ``executable`` the parameters of ``graph``, which has the topology of
        the graph it was made from; ``False`` when that is not possible (the caller
        then instantiates)."""

    @abc.abstractmethod
    def launch(self, executable: Any, stream: Stream) -> None:
        """Run ``executable`` once, in stream order on the real ``stream``."""

    @abc.abstractmethod
    def destroy_exec(self, executable: Any) -> None:
        """Release an executable graph (its queued launches complete normally)."""

    def mark(self, graph: Any) -> Any:
        """A mark of the nodes ``graph`` holds now, for :meth:`truncate`."""
        raise NotImplementedError(f"{type(self).__name__} cannot mark graphs")

    def truncate(self, graph: Any, mark: Any) -> None:
        """Remove every node added to ``graph`` since :meth:`mark` returned ``mark``
        (with their edges, and the bodies of loop nodes among them): a discarded
        inline scope."""
        raise NotImplementedError(f"{type(self).__name__} cannot truncate graphs")

    def topology(self, graph: Any) -> Any:
        """A hashable key equal for graphs that :meth:`update` can exchange; ``None``
        when there is none (never cached)."""
        return None
