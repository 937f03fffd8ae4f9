"""Ordering: which completed work an access must wait for.

Pure Python over plain objects: an *event* is anything with ``stream`` and ``seq``
attributes (``seq`` grows along its stream), a *stream* anything with a ``waited``
dict. Nothing here imports a backend, so the rules are unit-tested with stand-ins.

The rules (per logical data)
----------------------------
The tracker remembers the end event of the *last writer* and the events of the
*readers since that write*, keeping only the newest event per stream, because stream
order implies the older ones.

- ``read``: wait for the last writer; afterwards the task's end event joins the
  readers.
- ``write`` / ``rw``: wait for the last writer and every reader since; afterwards the
  task is the last writer and the readers are forgotten.
- Tokens follow the same rules and move no data.

Pruning waits
-------------
A stream never waits for an event of its own (stream order already holds), and each
stream remembers, per other stream, the newest event it already waits for: an older
or equal event of that stream needs no new wait (:func:`needs_wait`). Stream choice
(``_streams.choose_stream``) prefers a stream that carries a prerequisite, which
removes that wait entirely.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .access import WRITE

if TYPE_CHECKING:
    from ..backends._base import Event, Stream

__all__ = ["AccessTracker", "merge_events", "needs_wait", "newest_per_stream"]


class AccessTracker:
    """The ordering state of one logical data.

    Attributes
    ----------
    writer : Event or None
        The end event of the last writing access (``None`` before the first).
    readers : dict
        stream -> newest end event of the reading accesses since the last write.
    """

    __slots__ = ("writer", "readers")

    def __init__(self) -> None:
        self.writer: Event | None = None
        self.readers: dict[Stream, Event] = {}

    def prerequisites(self, mode: int) -> list[Event]:
        """The events a new access with ``mode`` must wait for (writer first)."""
        events = [] if self.writer is None else [self.writer]
        if mode & WRITE and self.readers:
            events.extend(self.readers.values())
        return events

    def release(self, mode: int, event: Event) -> None:
        """Record that an access with ``mode`` ends with ``event``."""
        if mode & WRITE:
            self.writer = event
            if self.readers:
                self.readers.clear()
        else:
            readers = self.readers
            previous = readers.get(event.stream)
            if previous is None or previous.seq < event.seq:
                readers[event.stream] = event

    def events(self) -> list[Event]:
        """Every event an observer of the final value must wait for."""
        events = [] if self.writer is None else [self.writer]
        events.extend(self.readers.values())
        return events

    def substitute(self, stand_in: Callable[[Event], Event]) -> None:
        """Replace every event ``e`` by ``stand_in(e)`` (an event completing no
        earlier: the launch of a recorded graph for the events recorded in it)."""
        if self.writer is not None:
            self.writer = stand_in(self.writer)
        if self.readers:
            self.readers = newest_per_stream(map(stand_in, self.readers.values()))


def newest_per_stream(events: Iterable[Event]) -> dict[Stream, Event]:
    """stream -> the newest of ``events`` on it, in first-seen order of the streams."""
    newest: dict[Stream, Event] = {}
    for event in events:
        previous = newest.get(event.stream)
        if previous is None or previous.seq < event.seq:
            newest[event.stream] = event
    return newest


def merge_events(events: Iterable[Event]) -> list[Event]:
    """Keep the newest event of each stream, in first-seen order of the streams."""
    return list(newest_per_stream(events).values())


def needs_wait(stream: Stream, event: Event) -> bool:
    """True when ``stream`` must be told to wait for ``event``; remembers it.

    A stream never waits for its own events, nor again for an event of another
    stream older than one it already waits for.
    """
    source = event.stream
    if source is stream:
        return False
    waited = stream.waited
    if waited.get(source, 0) >= event.seq:
        return False
    waited[source] = event.seq
    return True
