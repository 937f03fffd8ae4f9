"""Streams of a runtime: one pool per execution place, and which stream a task gets.

A :class:`StreamPools` owns the streams one recording level of a runtime creates:
the root level of a context, or one top-level graph scope (whose streams capture into
its graph). Streams are created lazily, :data:`STREAMS_PER_PLACE` per execution place,
and destroyed at the end (``destroy``). In a caller-stream context
(``context(stream=...)``) every new stream first waits for the *entry event*, what
the caller had enqueued when the context was created.

The stream choice (:func:`choose_stream`) is pure: run on the stream of a
prerequisite when that stream belongs to the place's pool (no wait is then needed for
it), else on the next stream of the pool, round-robin.

Pools are keyed by an execution place's *stream key* (``exec_place._stream_key``): its
device number for ordinary places, so that ``exec_place.device(0)`` and
``exec_place.current_device()`` share streams, and a key of its own
(:data:`PARTITION_KEYS` or more) for a place whose streams must be created in an SM
partition or a foreign CUDA context (green and ``from_context`` places). Such a key
names a :class:`~stflow._places.stream_partitions.StreamPartition`, found with
:func:`~stflow._places.stream_partitions.partition_of`; its streams are created with
``backend.create_stream(device, sink, partition)``.

A level may borrow its streams from a *lender* (an ``async_resources``) instead of
creating them: they go back to the lender, not to the backend, at ``destroy``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._places.stream_partitions import PARTITION_KEYS, partition_of
from .deps import needs_wait

if TYPE_CHECKING:
    from ..backends._base import Backend, Event, Stream

__all__ = ["Pool", "STREAMS_PER_PLACE", "StreamPools", "choose_stream"]

STREAMS_PER_PLACE: Final = 4
"""Compute streams created (lazily) per execution place."""


class Pool:
    """The streams of one execution place, and the round-robin position."""

    __slots__ = ("streams", "members", "next")

    def __init__(self, streams: list[Stream]) -> None:
        self.streams = streams
        self.members = frozenset(streams)
        self.next = 0

    def add(self, stream: Stream) -> None:
        """One more stream for the place."""
        self.streams.append(stream)
        self.members = frozenset(self.streams)

    def next_stream(self) -> Stream:
        """The next stream round-robin."""
        streams = self.streams
        stream = streams[self.next % len(streams)]
        self.next += 1
        return stream


def choose_stream(pool: Pool, first: Event | None, others: list[Event] | None) -> Stream:
    """The stream of a task whose prerequisites are ``first`` and ``others``.

    The stream of the first prerequisite that belongs to ``pool`` and is still the
    newest work of its stream (callers put the last writer first): the task follows
    it with no wait. A prerequisite that other work has followed since is waited
    for from the pool's next stream round-robin instead, so that tasks depending on
    one task (the updates after a tiled factorisation's panel) run side by side
    rather than queued behind each other on its stream.
    """
    members = pool.members
    if first is not None:
        stream = first.stream
        if stream in members and stream.last_event is first:
            return stream
    if others:
        for event in others:
            stream = event.stream
            if stream in members and stream.last_event is event:
                return stream
    return pool.next_stream()


class StreamPools:
    """The streams of one recording level of a runtime (see the module docstring).

    Parameters
    ----------
    backend : Backend
        Creates and destroys the streams.
    error_sink : callable
        Where failures of work on these streams are reported.
    entry : Event, optional
        What every new stream waits for first (a caller stream's entry event).
    """

    __slots__ = (
        "backend",
        "error_sink",
        "entry",
        "pools",
        "streams",
        "lender",
        "transfers",
    )

    def __init__(
        self,
        backend: Backend,
        error_sink: Callable[..., None],
        entry: Event | None = None,
    ) -> None:
        self.backend = backend
        self.error_sink = error_sink
        self.entry = entry
        self.pools: dict[int, Pool] = {}
        self.streams: list[Stream] = []
        self.lender: Any = None  # an async_resources lending its streams
        self.transfers: dict[int, Stream] = {}

    def transfer(self, device: int) -> Stream:
        """The stream that copies data into device ``device``'s instances (created
        on first use): copies queued there wait only for their own data, not behind
        the tasks of a compute stream, so they run ahead of the tasks needing them
        (in submission order) while earlier tasks compute."""
        stream = self.transfers.get(device)
        if stream is None:
            stream = self.transfers[device] = self.new_stream(device)
        return stream

    def pool(self, device: int) -> Pool:
        """The pool of the execution places of stream key ``device`` (created on
        first use)."""
        pool = self.pools.get(device)
        if pool is None:
            pool = self.pools[device] = Pool(
                [self.new_stream(device) for _ in range(STREAMS_PER_PLACE)]
            )
        return pool

    def new_stream(self, device: int) -> Stream:
        """A stream of this level for stream key ``device``; outside the pools when
        called directly (a fence stream, say)."""
        partition = partition_of(device) if device >= PARTITION_KEYS else None
        if partition is not None:
            device = partition.device
        if self.lender is not None:
            stream = self.lender.lend(self.backend, device, partition, self.error_sink)
        else:
            stream = self.backend.create_stream(device, self.error_sink, partition)
        entry = self.entry
        if entry is not None and needs_wait(stream, entry):
            self.backend.wait(stream, entry)
        self.streams.append(stream)
        return stream

    def last_events(self) -> list[Event]:
        """The newest event of every stream: all the work of this level."""
        return [s.last_event for s in self.streams if s.last_event is not None]

    def forget_order(self) -> None:
        """Drop what the streams remember of other streams (after a recorded level
        is closed, so that it keeps nothing of earlier levels alive)."""
        for stream in self.streams:
            stream.waited.clear()

    def destroy(self) -> None:
        """Destroy every stream (queued work completes normally), or give it back to
        the lender."""
        backend = self.backend
        lender = self.lender
        for stream in self.streams:
            if lender is not None:
                lender.give_back(stream)
            else:
                backend.destroy_stream(stream)
        self.streams.clear()
        self.pools.clear()
        self.transfers.clear()

    def __repr__(self) -> str:
        places = ", ".join(str(device) for device in self.pools)
        return f"<StreamPools places=[{places}] streams={len(self.streams)}>"
