"""Launching what a recorder recorded: executables, retirement, the end of a context.

Functions of a :class:`~stflow._graph.recording.GraphRecorder` (its methods of the
same names call them). They run once per launch, or at the end of a context, apart
from the hot path: this module stays Python.

When the outermost scope closes, its graph is instantiated (or an executable of the
same topology is updated) and launched on the recorder's launch stream; frees asked
for during the recording run after it. A launched graph is destroyed once it has run;
at most :data:`MAX_GRAPHS_IN_FLIGHT` may be pending (the next launch waits for the
oldest). The executable of a retired graph is kept for the next graph of its topology
(at most ``cache_entries`` topologies, the least recently used destroyed first). At
the end of a context the graphs still running are waited for (or, on a caller's
stream, adopted until they have run) and the recorder's streams destroyed.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ..backends._base import Backend, Event, Stream
from .recorded import Graph

__all__ = [
    "MAX_GRAPHS_IN_FLIGHT",
    "Owner",
    "context_finalized",
    "drop_cached",
    "executable",
    "launch",
    "pending_events",
    "release",
    "retire",
]


MAX_GRAPHS_IN_FLIGHT = 16
"""Launched graphs of one context that may be queued or running at once: a launch
beyond that first waits for the oldest to complete, so a host that records faster
than the device runs keeps a bounded backlog (as CUDA's own launch queue does)."""


class Owner(Protocol):
    """What the functions use of the
    :class:`~stflow._graph.recording.GraphRecorder` they serve."""

    real: Backend
    graphs: Any
    spare: dict[tuple, list[Stream]]
    launch_streams: dict[int, Stream]
    caller_stream: Stream | None
    retiring: list[tuple[Event, Graph]]
    cache: dict[Any, Any]
    cache_entries: int
    cache_lock: Any
    cache_shared: bool
    graph_instantiations: int
    graph_updates: int

    def launch_stream(self) -> Stream:
        """The stream graphs are launched on."""

    def executable(self, graph: Graph) -> Any:
        """The executable of a closed top-level graph (:func:`executable`)."""

    def release(self, graph: Graph) -> None:
        """After the last launch of ``graph`` (:func:`release`)."""

    def drop_cached(self) -> None:
        """Destroy the cached executables (:func:`drop_cached`)."""


def launch(recorder: Owner, graph: Graph, release: bool = True) -> Event:
    """Launch a closed top-level graph; returns its completion event.

    ``release=False`` keeps the graph for more launches (``launchable``); call
    :meth:`release` after the last one.
    """
    recorder.executable(graph)
    stream = recorder.launch_stream()
    if graph.launches == 0:
        for event in graph.prereqs:
            if event.stream is not stream:
                recorder.real.wait(stream, event)
    recorder.graphs.launch(graph.executable[1], stream)
    graph.launches += 1
    graph.done = recorder.real.record(stream)
    if release:
        recorder.release(graph)
    return graph.done


def executable(recorder: Owner, graph: Graph) -> Any:
    """The executable of a closed top-level graph (instantiated on first use, or
    an updated cached executable of the same topology)."""
    graphs = recorder.graphs
    executable = graph.executable
    if executable is None:
        if recorder.retiring:  # graphs that have run give theirs back
            _retire(recorder)
        key = graphs.topology(graph.handle)
        cached = None
        if key is not None:
            with recorder.cache_lock:  # _park may be evicting on another thread
                cached = recorder.cache.pop(key, None)
        if cached is not None and graphs.update(cached, graph.handle):
            executable = cached
            with recorder.cache_lock:
                recorder.graph_updates += 1
        else:
            if cached is not None:
                graphs.destroy_exec(cached)
            executable = graphs.instantiate(graph.handle)
            with recorder.cache_lock:
                recorder.graph_instantiations += 1
        graph.executable = (key, executable)
    return graph.executable[1]


def release(recorder: Owner, graph: Graph) -> None:
    """After the last launch: frees, then the graph once its work completed."""
    stream = recorder.launch_stream()
    for allocation in graph.frees:
        recorder.real.free(allocation, stream)
    graph.frees = []
    done = graph.done if graph.done is not None else recorder.real.record(stream)
    recorder.retiring.append((done, graph))
    _retire(recorder)
    while len(recorder.retiring) > MAX_GRAPHS_IN_FLIGHT:
        oldest, graph = recorder.retiring.pop(0)
        recorder.real.synchronize(oldest)
        _destroy(recorder, graph)


def retire(recorder: Owner) -> None:
    """Destroy the launched graphs whose work completed (their executables go
    back to the cache)."""
    _retire(recorder)


def _retire(recorder: Owner) -> None:
    pending = []
    for done, graph in recorder.retiring:
        if recorder.real.query(done):
            _destroy(recorder, graph)
        else:
            pending.append((done, graph))
    recorder.retiring = pending


def _destroy(recorder: Owner, graph: Graph) -> None:
    """Release a launched graph once its work completed. Events of its work may
    live on in data states (as :class:`GraphEvent` s whose nodes name the graph):
    the graph keeps only its completion."""
    if graph.executable is not None:
        _park(recorder, *graph.executable)
        graph.executable = None
    recorder.graphs.destroy_graph(graph.handle)
    graph.handle = None
    graph.sinks = {}
    graph.prereqs = []


def _park(recorder: Owner, key: Any, executable: Any) -> None:
    """Keep the executable of a retired graph for the next graph of its topology;
    beyond :attr:`cache_entries` topologies, destroy the least recently used."""
    destroyed = [executable]
    if key is not None:
        cache = recorder.cache
        with recorder.cache_lock:  # contexts on several threads may share the cache
            if key in cache:  # another graph of the topology retired first
                cache[key] = cache.pop(key)
            else:
                cache[key] = executable
                destroyed.clear()
                while len(cache) > recorder.cache_entries:
                    destroyed.append(cache.pop(next(iter(cache))))
    for executable in destroyed:
        recorder.graphs.destroy_exec(executable)


def drop_cached(recorder: Owner) -> None:
    """Destroy the cached executables (a shared cache belongs to its
    ``async_resources``, which destroys them)."""
    if recorder.cache_shared:
        return
    with recorder.cache_lock:
        executables = list(recorder.cache.values())
        recorder.cache.clear()
    for executable in executables:
        recorder.graphs.destroy_exec(executable)


def pending_events(recorder: Owner) -> list[Event]:
    _retire(recorder)
    return [done for done, _ in recorder.retiring]


def context_finalized(recorder: Owner) -> None:
    """Release everything kept for the context (its work has completed).

    With a caller's launch stream the host does not wait: graphs still running
    are handed to :func:`_adopt_running`, destroyed once their launch completed.
    """
    _collect_orphans()
    for done, graph in recorder.retiring:
        if recorder.caller_stream is not None and not recorder.real.query(done):
            _adopt_running(recorder, done, graph)
            continue
        recorder.real.synchronize(done)
        _destroy(recorder, graph)
    recorder.retiring = []
    recorder.drop_cached()  # a shared cache outlives the context
    for streams in recorder.spare.values():
        for real in streams:
            recorder.real.destroy_stream(real)
    recorder.spare.clear()
    for stream in recorder.launch_streams.values():
        if stream is not recorder.caller_stream:  # the caller's, not ours
            recorder.real.destroy_stream(stream)
    recorder.launch_streams.clear()


_orphans: list[tuple[Owner, Event, Graph]] = []
_orphans_lock = threading.Lock()


def _adopt_running(recorder: Owner, done: Event, graph: Graph) -> None:
    """Keep a launched graph of a finalized caller-stream context until it has run
    (its loop conditions and host functions live as long as the graph)."""
    with _orphans_lock:
        _orphans.append((recorder, done, graph))


def _collect_orphans() -> None:
    """Destroy the adopted graphs whose launch completed (at every context's end)."""
    with _orphans_lock:
        finished = [entry for entry in _orphans if entry[0].real.query(entry[1])]
        _orphans[:] = [entry for entry in _orphans if entry not in finished]
    for recorder, _, graph in finished:
        _destroy(recorder, graph)
        recorder.drop_cached()  # its context is finalized
