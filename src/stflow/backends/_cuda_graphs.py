"""CUDA graphs for the CUDA backend: the graph-mode contract of ``_graphs.py``.

:class:`CudaGraphSupport` is ``CudaBackend.graphs``. Graphs are built by stream capture
(``cuStreamBeginCaptureToGraph`` in relaxed mode), so whatever a task body enqueues
on its stream (CuPy, Numba, cuda.core kernels, the backend's own copies and fills)
becomes nodes; loops are conditional WHILE nodes.

Captures
    :meth:`~CudaGraphSupport.begin_capture` starts a capture for an existing graph,
    the captured work depending on the given nodes (which may come from earlier
    captures into the same graph, on any device). Into a top-level graph, the work is
    captured into a graph of its own that :meth:`~CudaGraphSupport.end_capture` adds
    as one child graph node (the driver's cost of capturing straight into a graph
    grows with the graph's size); into a loop body, it is captured straight into the
    body (``cuStreamBeginCaptureToGraph``), whose nodes must stay in the loop's
    device context. ``end_capture`` returns the nodes later work depends on: the
    child node, the leaves of the captured work, or the initial nodes when nothing
    was captured.
    While a stream captures, the backend knows it (``CudaBackend._captures``): a host
    callback enqueued then becomes a host node added to the graph directly
    (:meth:`~CudaGraphSupport.capture_host_node`) and stays registered for the life
    of the graph, since a host node runs at every launch; the releases the backend
    would do once the enqueued work completed (pinned staging buffers of pageable
    copies and long fill patterns) wait for the graph instead.

Resources and their lifetime
    What a graph's nodes use (host callbacks, loop counters, staging buffers) belongs
    to its :class:`_Resources`, shared by the graph, its loop bodies and every
    executable made from it or updated with it. They are released when the last of
    those goes: the graph at :meth:`~CudaGraphSupport.destroy_graph`, an executable
    once the launches enqueued before :meth:`~CudaGraphSupport.destroy_exec` (or
    before an update gave it another graph's parameters) completed. Each launch
    re-records one event per stream for that purpose.

Loops
    A loop is a conditional WHILE node preceded by a *start* kernel node, which sets
    the condition every time the loop is reached: to 1 for a while loop
    (``count=None``; the body runs once, then as long as the last
    :meth:`~CudaGraphSupport.set_condition` of the body set 1), to ``n > 0`` for a
    repeat loop (``count=n``), whose start node also resets a 32-bit device counter
    to ``n``; a kernel node after the body's sinks decrements it and sets the
    condition to ``counter != 0``. A handle's default value
    (``CU_GRAPH_COND_ASSIGN_DEFAULT``) would not do: it is applied when the whole
    executable is launched, not each time a loop nested in another loop's body
    starts again. The body of a conditional node can hold kernels, copies, fills and
    nested conditional nodes only, all in the loop node's device context: host
    callbacks (and the pageable copies and host fills made of them) raise
    ``ScopeError`` there, and so does a capture into a body from a stream of
    another device.

Condition kernels
    ``set_condition`` launches a one-thread kernel generated per signature of the
    condition (``_cuda_conditions.py``), compiled with NVRTC and cached.

Updates
    :meth:`~CudaGraphSupport.topology` keys graphs by their numbers of top-level nodes
    and edges and of the nodes their captures made: a cheap key, since
    ``cuGraphExecUpdate`` itself refuses a graph of another topology (the caller then
    instantiates). ``cuGraphExecUpdate`` cannot change a conditional node's
    parameters, but handles are numbered per graph in creation order, so graphs
    recorded alike get equal handles and update (measured with repeat and while
    loops).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core.errors import ScopeError
from . import _cuda_driver as _cu
from ._base import Allocation, Stream
from ._cuda_conditions import LOOP_KERNELS, condition_kernel
from ._cuda_kernels import kernel_params as _kernel_params
from ._graphs import ConditionTerm, GraphSupport

__all__ = ["CudaGraphSupport"]


class _Resources:
    """What the nodes of one graph need while it or an executable made from it lives.

    ``users`` counts the graph and those executables; ``releases`` run when it drops
    to zero. ``bodies`` and ``loops`` are the keys of the graph's loop bodies and loop
    nodes in :class:`CudaGraphSupport`'s tables.
    """

    __slots__ = ("users", "releases", "bodies", "loops", "edges", "captured")

    def __init__(self) -> None:
        self.users = 1
        self.captured = 0  # nodes of the child graphs of the top level's captures
        self.releases: list[Callable[[], None]] = []
        self.edges: dict[int, set[int]] = {}  # node -> nodes added as its dependencies
        self.bodies: list[int] = []
        self.loops: list[int] = []


class _Capture:
    """An open capture: the graph's resources, and whether it records a loop body."""

    __slots__ = ("resources", "in_loop_body", "target")

    def __init__(self, resources: _Resources, in_loop_body: bool) -> None:
        self.resources = resources
        self.in_loop_body = in_loop_body
        self.target: tuple[Any, list[Any]] | None = None  # (graph, deps) of a child


class _Loop:
    """A loop node: its body graph, device, and for repeat loops the counter."""

    __slots__ = ("node", "body", "device", "counter", "start", "handle")

    def __init__(
        self,
        node: Any,
        body: Any,
        device: int,
        counter: Allocation | None,
        start: Any,
        handle: Any = None,
    ) -> None:
        self.node = node
        self.body = body
        self.device = device
        self.counter = counter
        self.start = start  # the kernel node setting the condition
        self.handle = handle  # its CUgraphConditionalHandle


class _Executable:
    """An executable graph, the resources its parameters use, and its launch events."""

    __slots__ = ("native", "resources", "launched")

    def __init__(self, native: Any, resources: _Resources) -> None:
        self.native = native
        self.resources = resources
        self.launched: dict[int, tuple[Any, list]] = {}  # stream -> (event, pool)

    def __int__(self) -> int:
        """The ``CUgraphExec`` handle (``exec_graph``: a caller may launch it)."""
        return int(self.native)


class CudaGraphSupport(GraphSupport):
    """Graph construction and launch on the CUDA driver (see the module docstring).

    Parameters
    ----------
    backend : CudaBackend
        The backend whose streams capture and whose contexts run the graphs.
    """

    def __init__(self, backend: Any) -> None:
        d = _cu.driver
        self._backend = backend
        self._lock = threading.Lock()
        self._resources: dict[int, _Resources] = {}  # graph or body -> resources
        self._bodies: dict[int, _Loop] = {}  # body graph -> its loop
        self._loop_nodes: dict[int, _Loop] = {}  # loop node -> its loop
        self._placeholders: dict[int, tuple[Any, int]] = {}  # IF node: (handle, device)
        # cuda-bindings 12 names the calls taking edge data ``*_v2``; 13 drops the
        # suffix (same arguments).
        self._add_node = getattr(d, "cuGraphAddNode_v2", None) or d.cuGraphAddNode
        self._add_edges = (
            getattr(d, "cuGraphAddDependencies_v2", None) or d.cuGraphAddDependencies
        )
        self._get_edges = getattr(d, "cuGraphGetEdges_v2", None) or d.cuGraphGetEdges
        self._capture_info = (
            getattr(d, "cuStreamGetCaptureInfo_v3", None) or d.cuStreamGetCaptureInfo
        )
        self._set_capture_deps = (
            getattr(d, "cuStreamUpdateCaptureDependencies_v2", None)
            or d.cuStreamUpdateCaptureDependencies
        )
        self._cuGraphLaunch = d.cuGraphLaunch
        self._cuEventRecord = d.cuEventRecord
        self._conditional_type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        self._update_failure = d.CUresult.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE

    # -- graphs --------------------------------------------------------------------
    def create_graph(self) -> Any:
        self._backend._ensure_context()  # a thread without one (workers)
        graph = _cu.check(_cu.driver.cuGraphCreate(0), "creating a CUDA graph")
        with self._lock:
            self._resources[int(graph)] = _Resources()
        return graph

    def destroy_graph(self, graph: Any) -> None:
        """Destroy ``graph``; its resources go once its executables are gone too."""
        resources = self._owner(graph)
        with self._lock:
            del self._resources[int(graph)]
            for body in resources.bodies:
                self._resources.pop(body, None)
                self._bodies.pop(body, None)
            for node in resources.loops:
                self._loop_nodes.pop(node, None)
            resources.bodies = []
            resources.loops = []
        _cu.check(_cu.driver.cuGraphDestroy(graph), "destroying a CUDA graph")
        self._drop(resources)

    def remove_node(self, graph: Any, node: Any) -> None:
        """Remove ``node`` (and, for a loop node, its start node) from ``graph``."""
        d = _cu.driver
        with self._lock:
            loop = self._loop_nodes.pop(int(node), None)
            if loop is not None:
                self._bodies.pop(int(loop.body), None)
                self._resources.pop(int(loop.body), None)
        edges = self._owner(graph).edges  # its handle value may be reused
        edges.pop(int(node), None)
        for known in edges.values():
            known.discard(int(node))
        _cu.check(d.cuGraphDestroyNode(node), "removing a node from a CUDA graph")
        if loop is not None:
            _cu.check(
                d.cuGraphDestroyNode(loop.start),
                "removing the start of a loop from a CUDA graph",
            )

    def _nodes(self, graph: Any) -> list[Any]:
        """The nodes of the top level of ``graph``."""
        d = _cu.driver
        step = "listing the nodes of a CUDA graph"
        count = int(_cu.check(d.cuGraphGetNodes(graph, 0), step)[-1])
        if not count:
            return []
        return list(_cu.check(d.cuGraphGetNodes(graph, count), step)[0])[:count]

    def mark(self, graph: Any) -> frozenset[int]:
        """The nodes ``graph`` holds now (for :meth:`truncate`)."""
        return frozenset(int(node) for node in self._nodes(graph))

    def truncate(self, graph: Any, mark: Any) -> None:
        """Remove the nodes added to ``graph`` since ``mark``: loop nodes first (with
        their start nodes and bodies), then the others.

        The conditional handle of a removed loop still belongs to ``graph``, and
        instantiation refuses a handle that no node uses: each gets a placeholder,
        an IF node with an empty body, which does nothing."""
        added = [node for node in self._nodes(graph) if int(node) not in mark]
        handles: list[tuple[Any, int]] = []
        for node in added:
            loop = self._loop_nodes.get(int(node))
            if loop is not None:
                handles.append((loop.handle, loop.device))
                self.remove_node(graph, node)
            else:
                kept = self._placeholders.pop(int(node), None)
                if kept is not None:
                    handles.append(kept)
        edges = self._owner(graph).edges
        for node in self._nodes(graph):
            if int(node) in mark:
                continue
            edges.pop(int(node), None)
            for known in edges.values():
                known.discard(int(node))
            _cu.check(
                _cu.driver.cuGraphDestroyNode(node), "removing a node from a CUDA graph"
            )
        for handle, device in handles:
            self._placeholder(graph, handle, device)

    def _conditional(self, handle: Any, kind: Any, context: Any) -> Any:
        """The parameters of a conditional node of ``kind`` on ``handle`` with one
        body graph, in ``context``."""
        params = _cu.driver.CUgraphNodeParams()
        params.type = self._conditional_type
        conditional = params.conditional
        conditional.handle = handle
        conditional.type = kind
        conditional.size = 1
        conditional.ctx = context
        return params

    def _placeholder(self, graph: Any, handle: Any, device: int) -> None:
        """An IF node of ``handle`` with an empty body, keeping the handle used."""
        d = _cu.driver
        kinds = d.CUgraphConditionalNodeType
        params = self._conditional(
            handle, kinds.CU_GRAPH_COND_TYPE_IF, self._backend._contexts[device]
        )
        step = "keeping the condition of a discarded loop in a CUDA graph"
        node = _cu.check(self._add_node(graph, [], None, 0, params), step)
        _cu.check(d.cuGraphAddEmptyNode(params.conditional.phGraph_out[0], None, 0), step)
        self._placeholders[int(node)] = (handle, device)

    def _drop(self, resources: _Resources) -> None:
        """One user of ``resources`` is gone; the last runs the releases."""
        with self._lock:
            resources.users -= 1
            if resources.users:
                return
            releases, resources.releases = resources.releases, []
        for release in releases:
            release()

    def _owner(self, graph: Any) -> _Resources:
        try:
            return self._resources[int(graph)]
        except KeyError:
            raise ScopeError(
                f"CUDA graph 0x{int(graph):x} was not made by "
                "create_graph or add_loop, or was destroyed"
            ) from None

    # -- capture -------------------------------------------------------------------
    def begin_capture(self, stream: Stream, graph: Any, deps: Sequence[Any]) -> None:
        """Capture the work enqueued on ``stream`` into ``graph``, after ``deps``.

        Notes
        -----
        Relaxed capture mode: other threads may keep making calls that are illegal
        during a global capture (allocations, synchronisations).

        Raises
        ------
        ScopeError
            The stream is capturing already, or ``graph`` is the body of a loop on
            another device than the stream's.
        """
        self._backend._ensure_context()  # a thread without one (workers)
        backend = self._backend
        if stream.handle in backend._captures:
            raise ScopeError(
                f"{stream!r} is already capturing into a graph; end that capture first"
            )
        d = _cu.driver
        deps = list(deps)
        resources = self._owner(graph)
        loop = self._bodies.get(int(graph))
        device = stream.ordinal
        if loop is not None and device != loop.device:
            raise ScopeError(
                f"work of device {device} cannot run in the body of a loop "
                f"on device {loop.device}: the body of a CUDA conditional "
                "node runs in the loop node's device context only; keep "
                "the work of a loop on one device"
            )
        mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        capture = _Capture(resources, loop is not None)
        if loop is None:
            # A top-level graph: capture into a graph of its own, added as one child
            # graph node at the end. Capturing into the growing graph itself costs
            # the driver time proportional to the graph's size at every capture,
            # a child graph node a constant time (benchmarks/capture_scaling.py).
            capture.target = (graph, deps)
            _cu.check(
                d.cuStreamBeginCapture(stream.native, mode),  # type: ignore
                f"beginning a graph capture on {stream!r}",
            )
        else:
            _cu.check(
                d.cuStreamBeginCaptureToGraph(
                    stream.native,  # type: ignore
                    graph,
                    deps,
                    None,
                    len(deps),
                    mode,
                ),
                f"beginning a graph capture on {stream!r}",
            )
        backend._captures[stream.handle] = capture

    def end_capture(self, stream: Stream) -> list[Any]:
        """End the capture on ``stream``; returns the captured leaves (or the deps).

        Raises
        ------
        CudaError
            The capture was invalidated: something enqueued on the stream cannot be
            captured (a synchronous call, work of a legacy stream, an event of
            another capture); the message says so.
        """
        self._backend._ensure_context()  # a thread without one (workers)
        d = _cu.driver
        native = stream.native  # type: ignore[attr-defined]
        capture = self._backend._captures.pop(stream.handle, None)
        if capture is not None and capture.target is not None:
            # A capture of its own, for a child graph node: an invalidated capture
            # fails in cuStreamEndCapture; an empty one makes an empty child node.
            ended = d.cuStreamEndCapture(native)
            if ended[0]:
                raise _cu.error(
                    ended[0],
                    f"capturing the work enqueued on {stream!r} "
                    "into a graph (an operation on it could not "
                    "be captured: a synchronous call, a "
                    "legacy-stream dependency or an event of "
                    "another capture)",
                )
            graph, before = capture.target
            child = ended[1]
            try:
                captured = d.cuGraphGetNodes(child, 0)
                if not captured[0]:
                    capture.resources.captured += int(captured[-1])
                node = _cu.check(
                    d.cuGraphAddChildGraphNode(graph, before, len(before), child),
                    f"adding the work captured on {stream!r} to a graph",
                )
            finally:
                _cu.check(d.cuGraphDestroy(child), "destroying a captured graph")
            return [node]
        try:
            info = _cu.check(
                self._capture_info(native), f"reading the capture state of {stream!r}"
            )
            status, deps, count = info[0], info[3], info[-1]
        finally:
            ended = d.cuStreamEndCapture(native)
        if ended[0] or status != d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
            error = ended[0] or d.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
            raise _cu.error(
                error,
                f"capturing the work enqueued on {stream!r} into a "
                "graph (an operation on it could not be captured: "
                "a synchronous call, a legacy-stream dependency or "
                "an event of another capture)",
            )
        return list(deps[:count]) if count else []

    def capture_host_node(self, stream: Stream, function: Any, user_data: int) -> None:
        """Add a host node calling ``function(user_data)`` to the capture of ``stream``.

        Notes
        -----
        ``cuLaunchHostFunc`` of cuda-bindings calls the C function through a wrapper
        that it frees after the first call, so a captured one crashes at the second
        launch of the graph. The node is added to the captured graph directly
        instead, after the stream's capture dependencies, and becomes the stream's
        only dependency: later captured work comes after it.
        """
        d = _cu.driver
        native = stream.native  # type: ignore[attr-defined]
        step = f"capturing a host callback on {stream!r}"
        info = _cu.check(self._capture_info(native), step)
        graph, deps, count = info[2], info[3], info[-1]
        deps = list(deps[:count]) if count else []
        params = d.CUgraphNodeParams()
        params.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_HOST
        params.host.fn = function
        params.host.userData = user_data
        node = _cu.check(self._add_node(graph, deps, None, len(deps), params), step)
        flags = (
            d.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES
        )
        _cu.check(self._set_capture_deps(native, [node], None, 1, int(flags)), step)

    # -- edges and loops -----------------------------------------------------------
    def add_dependencies(self, graph: Any, before: Sequence[Any], after: Any) -> None:
        """Make ``after`` depend on ``before``; edges added before are skipped (the
        driver refuses an existing edge with ``CUDA_ERROR_INVALID_VALUE``)."""
        known = self._owner(graph).edges.setdefault(int(after), set())
        new = []
        for node in before:
            if int(node) not in known:
                known.add(int(node))
                new.append(node)
        if not new:
            return
        result = self._add_edges(graph, new, [after] * len(new), None, len(new))
        if result[0]:
            for node in new:
                known.discard(int(node))
            raise _cu.error(
                result[0],
                "adding dependencies to a CUDA graph node"
                + self._explain_edges(graph, new, after),
            ) from None

    def _explain_edges(self, graph: Any, before: Sequence[Any], after: Any) -> str:
        """What the driver may have refused in an edge ``before -> after`` of
        ``graph`` (a node of another graph, an existing edge, a self edge), for the
        message of a failed :meth:`add_dependencies`. Never raises."""
        d = _cu.driver
        found: list[str] = []
        try:
            if any(int(node) == int(after) for node in before):
                found.append("a node would depend on itself")
            containing = getattr(d, "cuGraphNodeGetContainingGraph", None)
            if containing is not None:
                for role, node in [
                    ("the dependent", after),
                    *(("a dependency", node) for node in before),
                ]:
                    err, owner = containing(node)
                    if err:
                        found.append(
                            f"{role} 0x{int(node):x} is not a live node "
                            f"({getattr(err, 'name', err)})"
                        )
                    elif int(owner) != int(graph):
                        found.append(
                            f"{role} 0x{int(node):x} belongs to graph "
                            f"0x{int(owner):x}, not 0x{int(graph):x}"
                        )
            dependencies = (
                getattr(d, "cuGraphNodeGetDependencies_v2", None)
                or d.cuGraphNodeGetDependencies
            )
            result = dependencies(after, 0)
            count = int(result[-1]) if not result[0] else 0
            if count:
                result = dependencies(after, count)
                existing = {int(node) for node in list(result[1])[:count]}
                for node in before:
                    if int(node) in existing:
                        found.append(
                            f"the edge 0x{int(node):x} -> 0x{int(after):x} exists already"
                        )
        except Exception:  # a diagnosis only
            pass
        return f" ({'; '.join(found)})" if found else ""

    def add_loop(
        self, graph: Any, deps: Sequence[Any], device: int, count: int | None
    ) -> tuple[Any, Any, int]:
        """Add a conditional WHILE node to ``graph`` on ``device``, after ``deps``.

        Returns ``(node, body, handle)``: the loop node, the body graph to capture
        into, and the ``CUgraphConditionalHandle`` value. See the module docstring.

        Raises
        ------
        ValueError
            ``count`` is negative or does not fit 32 bits.
        CudaError
            The driver refused the node (conditional nodes need CUDA 12.4 or later).
        """
        if count is not None and not 0 <= count < 2**32:
            raise ValueError(f"a repeat loop runs 0 to {2**32 - 1} times, not {count}")
        d = _cu.driver
        backend = self._backend
        backend._check_ordinal(device, "add_loop")
        resources = self._owner(graph)
        context = backend._contexts[device]
        step = f"adding a loop node to a CUDA graph on device {device}"
        handle = _cu.check(d.cuGraphConditionalHandleCreate(graph, context, 0, 0), step)
        counter = None
        if count:
            counter = backend.allocate(device, 4, None, np.dtype(np.uint32))
            resources.releases.append(lambda: backend.free(counter, None))
        kernel = self._function(LOOP_KERNELS, "stflow_loop_start", device)
        args = [
            ctypes.c_uint64(int(handle)),
            ctypes.c_uint64(counter.ptr if counter is not None else 0),
            ctypes.c_uint32(count or 0),
            ctypes.c_uint32(1 if count is None else int(count > 0)),
        ]
        start = self._add_kernel_node(graph, [], kernel, args, device)
        deps = [*deps, start]
        params = self._conditional(
            handle, d.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE, context
        )
        node = _cu.check(self._add_node(graph, deps, None, len(deps), params), step)
        body = params.conditional.phGraph_out[0]
        loop = _Loop(node, body, device, counter, start, handle)
        with self._lock:
            self._resources[int(body)] = resources
            self._bodies[int(body)] = loop
            self._loop_nodes[int(node)] = loop
            resources.bodies.append(int(body))
            resources.loops.append(int(node))
        return node, body, int(handle)

    def end_loop_body(self, body: Any, handle: int, sinks: Sequence[Any]) -> None:
        """Close a loop body; a repeat loop gets its counter step after ``sinks``."""
        loop = self._bodies.get(int(body))
        if loop is None:
            raise ScopeError(f"CUDA graph 0x{int(body):x} is not the body of a loop")
        if loop.counter is None:
            return
        kernel = self._function(LOOP_KERNELS, "stflow_repeat_step", loop.device)
        args = [ctypes.c_uint64(handle), ctypes.c_uint64(loop.counter.ptr)]
        self._add_kernel_node(body, list(sinks), kernel, args, loop.device)

    def set_condition(
        self, stream: Stream, handle: int, terms: Sequence[ConditionTerm], combiner: str
    ) -> None:
        """Enqueue on ``stream`` the kernel setting ``handle`` from ``terms``.

        Raises
        ------
        ValueError
            A condition :func:`~stflow.backends._cuda_conditions.condition_kernel`
            refuses (no term or more than ``MAX_TERMS``, an unknown combiner,
            comparison or dtype, a NaN threshold against an integer element).
        """
        source, args = condition_kernel(handle, terms, combiner)
        device = stream.ordinal
        kernel = self._function(source, "stflow_condition", device)
        array = _kernel_params(args)
        _cu.check(
            _cu.driver.cuLaunchKernel(
                kernel,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream.native,  # type: ignore
                ctypes.addressof(array),
                0,
            ),
            f"launching a loop condition kernel on {stream!r}",
        )

    # -- executables ---------------------------------------------------------------
    def instantiate(self, graph: Any) -> _Executable:
        self._backend._ensure_context()  # a thread without one (workers)
        resources = self._owner(graph)
        native = _cu.check(
            _cu.driver.cuGraphInstantiate(graph, 0), "instantiating a CUDA graph"
        )
        with self._lock:
            resources.users += 1
        return _Executable(native, resources)

    def update(self, executable: Any, graph: Any) -> bool:
        """Give ``executable`` the parameters of ``graph``; False when refused.

        Notes
        -----
        The resources of the graph the executable used before are released once the
        launches enqueued so far completed (and that graph is destroyed).
        """
        self._backend._ensure_context()  # a thread without one (workers)
        resources = self._owner(graph)
        (err, _info) = _cu.driver.cuGraphExecUpdate(executable.native, graph)
        if err == self._update_failure:
            return False
        if err:
            raise _cu.error(err, "updating an executable CUDA graph") from None
        with self._lock:
            resources.users += 1
        self._release_after_launches(executable)
        executable.resources = resources
        return True

    def launch(self, executable: Any, stream: Stream) -> None:
        self._backend._ensure_context()  # a thread without one (workers)
        native = stream.native  # type: ignore[attr-defined]
        (err,) = self._cuGraphLaunch(executable.native, native)
        if err:
            raise _cu.error(err, f"launching a CUDA graph on {stream!r}") from None
        entry = executable.launched.get(stream.handle)
        if entry is None:
            pool = stream.events  # type: ignore[attr-defined]
            try:
                event = pool.pop()
            except IndexError:
                event = self._backend._new_event(stream.ordinal)
            entry = executable.launched[stream.handle] = (event, pool)
        _cu.check(
            self._cuEventRecord(entry[0], native),
            f"recording the end of a CUDA graph launch on {stream!r}",
        )

    def destroy_exec(self, executable: Any) -> None:
        _cu.check(
            _cu.driver.cuGraphExecDestroy(executable.native),
            "destroying an executable CUDA graph",
        )
        self._release_after_launches(executable)

    def _release_after_launches(self, executable: _Executable) -> None:
        """Drop the executable's use of its resources once its launches completed."""
        resources = executable.resources
        events = list(executable.launched.values())
        executable.launched = {}
        if events:
            self._backend._after_events(events, lambda: self._drop(resources))
        else:
            self._drop(resources)

    def topology(self, graph: Any) -> Any:
        """``(nodes, edges, captured)``: the counts of the top level of ``graph``
        (two driver calls) and of the nodes its captures made (counted as each
        capture ended: a run of tasks on one stream is one child graph node, so
        chains of different lengths differ only there). Graphs with equal keys may
        still differ (inside child graphs, in loop bodies): :meth:`update` then fails
        and the caller instantiates, so the key only has to be cheap, not exact (an
        exact walk of the graph cost 2.5 µs per node, more than the update it
        saves)."""
        d = _cu.driver
        step = "reading the size of a CUDA graph"
        nodes = _cu.check(d.cuGraphGetNodes(graph, 0), step)[-1]
        edges = _cu.check(self._get_edges(graph, 0), step)[-1]
        return int(nodes), int(edges), self._owner(graph).captured

    # -- kernels -------------------------------------------------------------------
    def _function(self, source: str, name: str, device: int) -> Any:
        """The kernel ``name`` of ``source`` loaded in ``device``'s context (cached)."""
        return self._backend.kernels.function(source, name, device)

    def _add_kernel_node(
        self, graph: Any, deps: list[Any], function: Any, args: list[Any], device: int
    ) -> Any:
        d = _cu.driver
        params = d.CUgraphNodeParams()
        params.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
        kernel = params.kernel
        kernel.func = function
        kernel.gridDimX = kernel.gridDimY = kernel.gridDimZ = 1
        kernel.blockDimX = kernel.blockDimY = kernel.blockDimZ = 1
        array = _kernel_params(args)
        kernel.kernelParams = ctypes.addressof(array)
        return _cu.check(
            self._add_node(graph, deps, None, len(deps), params),
            f"adding a kernel node to a CUDA graph on device {device}",
        )
