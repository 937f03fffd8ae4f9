"""Stream resources outside and across contexts: ``exec_place_resources`` and
``async_resources``.

``exec_place_resources``
    A registry of per-place stream pools for the places layer without a context:
    ``place.pick_stream(resources)`` hands out a stream of the place's computation
    pool (or, with ``for_computation=False``, of its transfer pool), created lazily,
    :data:`~stflow._core.streams.STREAMS_PER_PLACE` per place and kind, round-robin. Pools
    are keyed like the runtime's (``exec_place._stream_key``), so a green place gets
    streams of its green context. When the registry is collected it first waits for
    the work queued on its streams, then destroys them. ``ctx.place_resources`` lends
    a registry owned by a context: in stream mode its computation pools *are* the
    context's task pools (under the context's lock).

``async_resources``
    Resources shared by many short contexts (``context(handle=...)``), the legacy
    library pattern. A stream-mode context borrows its streams from the shared free
    lists (``StreamPools.lender``) and gives them back at ``finalize()`` instead of
    destroying them; a graph-mode context uses the shared topology → executable cache
    of the graph recorder, so a later context recording the same topology updates a
    cached executable instead of instantiating a new one. Collection waits for the
    work still queued on the streams (also work enqueued by caller-stream contexts,
    whose ``finalize()`` does not block), then destroys the streams and the
    cached executables. One ``async_resources`` serves one backend.
"""

from __future__ import annotations

import itertools
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from .._core.errors import ContextFinalizedError, PlaceError
from .._core.streams import StreamPools
from .._places.locality import default_backend
from .._places.places import StreamResources, exec_place

if TYPE_CHECKING:
    from ..backends._base import Backend, Stream
    from .runtime import Runtime

__all__ = ["async_resources", "exec_place_resources", "pick_stream"]

_ids = itertools.count(1)


def _warn_failure(exc: BaseException, *order: Any) -> None:
    """The error sink of standalone streams: nobody waits on them, so a failure of
    their work is reported as a warning."""
    warnings.warn(
        f"stflow: work on a stream of exec_place_resources failed: {exc!r}",
        RuntimeWarning,
        stacklevel=2,
    )


def _drain(backend: Backend, streams: list[Stream], what: str) -> None:
    """Wait for the work queued on ``streams``, then destroy them (failures become
    warnings: this runs at collection)."""
    for stream in streams:
        try:
            backend.synchronize(backend.record(stream))
        except Exception as exc:  # noqa: BLE001 - nobody can catch it here
            warnings.warn(
                f"stflow: waiting for the work of {what} failed: {exc!r}",
                RuntimeWarning,
                stacklevel=2,
            )
        try:
            backend.destroy_stream(stream)
        except Exception as exc:  # noqa: BLE001
            warnings.warn(
                f"stflow: destroying a stream of {what} failed: {exc!r}",
                RuntimeWarning,
                stacklevel=2,
            )


class _Pools:
    """The pools behind an ``exec_place_resources``: computation and transfer."""

    __slots__ = ("backend", "lock", "compute", "transfer", "runtime", "own")

    def __init__(self, backend: Backend, runtime: Runtime | None = None) -> None:
        self.backend = backend
        self.runtime = runtime
        sink = _warn_failure if runtime is None else runtime.errors.capture
        if runtime is not None and not runtime.mode.graph:
            self.lock: Any = runtime.lock  # share the context's task pools
            self.compute = runtime.root_pools
        else:
            self.lock = threading.Lock()
            self.compute = StreamPools(backend, sink)
        self.transfer = StreamPools(backend, sink)
        self.own = [
            p
            for p in (self.compute, self.transfer)
            if runtime is None or p is not runtime.root_pools
        ]

    def close(self) -> None:
        """Wait for the queued work of the own streams, then destroy them."""
        with self.lock:
            streams = [s for pools in self.own for s in pools.streams]
            for pools in self.own:
                pools.streams.clear()
                pools.pools.clear()
        _drain(self.backend, streams, "exec_place_resources")


class exec_place_resources(StreamResources):
    """A registry of per-place stream pools (see the module docstring).

    ``exec_place_resources()`` builds a standalone one on the default backend;
    ``ctx.place_resources`` lends one owned by a context. No public methods: use
    ``place.pick_stream(resources)``.

    Notes
    -----
    Streams stay valid while the registry lives (for a lent one, until its context is
    finalized). Collection waits for their queued work before destroying them.
    """

    __slots__ = ("_pools", "_id", "__weakref__")
    _pools: _Pools
    _id: int

    def __init__(self) -> None:
        self._setup(_Pools(default_backend()))

    def _setup(self, pools: _Pools) -> None:
        self._pools = pools
        self._id = next(_ids)
        # Not at interpreter exit: the process ending frees the streams anyway, and
        # the device threads that would complete their work may be gone by then.
        weakref.finalize(self, pools.close).atexit = False

    @classmethod
    def _lent(cls, runtime: Runtime) -> exec_place_resources:
        """The registry a context lends (``ctx.place_resources``)."""
        resources = cls.__new__(cls)
        resources._setup(_Pools(runtime.backend.native, runtime))  # real streams
        return resources

    def __repr__(self) -> str:
        runtime = self._pools.runtime
        owner = "standalone" if runtime is None else f"lent by context {runtime.id}"
        return f"<exec_place_resources {self._id} {owner}>"

    def _pick_stream(self, place: exec_place, for_computation: bool) -> Any:
        """``place.pick_stream(self, for_computation)`` (the place asks the
        resources: places know no resource type)."""
        return pick_stream(place, self, for_computation)


def pick_stream(
    place: exec_place, resources: exec_place_resources, for_computation: bool = True
) -> Any:
    """The next stream of ``place``'s pool in ``resources``, as a ``CudaStream``."""
    pools = resources._pools
    runtime = pools.runtime
    if runtime is not None and runtime.finalized:
        raise ContextFinalizedError(
            "pick_stream: the context lending these "
            "place_resources is finalized; create a new context "
            "or use exec_place_resources()"
        )
    member = place.get_place(0)  # a scalar place is its own member 0
    device = member._device
    count = pools.backend.device_count
    if device >= count:
        raise PlaceError(
            f"pick_stream: {member!r} is not a place of the "
            f"{pools.backend.name} backend ({count} device(s))"
        )
    key = member._stream_key
    with pools.lock:
        stream_pools = pools.compute if for_computation else pools.transfer
        return stream_pools.pool(key).next_stream().handle


class _SharedStreams:
    """The state of an ``async_resources``: free streams by (device, partition),
    the shared executable-graph cache, the backend they belong to."""

    __slots__ = ("lock", "backend", "free", "lent", "graph_cache", "graphs", "closed")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.backend: Backend | None = None
        self.free: dict[tuple[int, Any], list[Stream]] = {}
        self.lent = 0
        self.graph_cache: dict[Any, Any] = {}
        self.graphs: Any = None
        self.closed = False

    # -- the lender contract of StreamPools ------------------------------------------
    def lend(
        self, backend: Backend, device: int, partition: Any, error_sink: Any
    ) -> Stream:
        """A free stream of ``device`` / ``partition``, else a new one."""
        with self.lock:
            free = self.free.get((device, partition))
            stream = free.pop() if free else None
            self.lent += 1
        if stream is None:
            return backend.create_stream(device, error_sink, partition)
        stream.error_sink = error_sink
        return stream

    def give_back(self, stream: Stream) -> None:
        """Keep ``stream`` for the next context; its queued work goes on."""
        stream.waited.clear()  # ordering state of the old context
        stream.error_sink = None
        with self.lock:
            self.lent -= 1
            closed = self.closed
            if not closed:
                self.free.setdefault((stream.device, stream.partition), []).append(stream)
        if closed:  # a context finalized after its resources were collected
            assert self.backend is not None
            self.backend.destroy_stream(stream)

    def close(self) -> None:
        """Wait for the streams' work, then destroy them and the cached graphs."""
        backend = self.backend
        if backend is None:
            return
        with self.lock:
            self.closed = True
            streams = [s for free in self.free.values() for s in free]
            self.free.clear()
            executables = list(self.graph_cache.values())
            self.graph_cache.clear()
        _drain(backend, streams, "async_resources")
        graphs = self.graphs
        for executable in executables:
            try:
                graphs.destroy_exec(executable)
            except Exception as exc:  # noqa: BLE001 - runs at collection
                warnings.warn(
                    f"stflow: destroying a cached graph of async_resources "
                    f"failed: {exc!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )


class async_resources:
    """Stream pools and an executable-graph cache shared by contexts created with
    ``context(handle=resources)`` (see the module docstring).

    Notes
    -----
    Contexts keep it alive. Collection waits for work still queued on its streams,
    then frees them (work a caller-stream context left queued included). It serves the backend of the first context given it;
    a context of another backend raises ``ValueError``.
    """

    __slots__ = ("_shared", "_id", "__weakref__")

    def __init__(self) -> None:
        self._shared = _SharedStreams()
        self._id = next(_ids)
        weakref.finalize(self, self._shared.close).atexit = False

    @property
    def _handle_int(self) -> int:
        return self._id

    def _bind(self, backend: Backend) -> None:
        """Refuse a context of another backend than the first one."""
        shared = self._shared
        with shared.lock:
            if shared.backend is None:
                shared.backend = backend
            elif shared.backend is not backend:
                raise ValueError(
                    f"this async_resources serves the "
                    f"{shared.backend.name} backend; a context of the "
                    f"{backend.name} backend needs its own async_resources"
                )

    def _attach(self, runtime: Runtime) -> None:
        """Let a new context use the shared resources."""
        shared = self._shared
        if runtime.mode.graph:  # graph mode: share the graph cache
            runtime.mode.share_graphs(shared)
        else:  # stream mode: borrow the streams
            runtime.root_pools.lender = shared

    def __repr__(self) -> str:
        return f"async_resources(handle={self._id})"
