"""Ordering: which completed work a task must wait for.

Pure Python over plain objects: an *event* is anything with ``stream`` and ``seq``
attributes (``seq`` grows along its stream), a *stream* anything with a ``waited``
dict. Nothing here imports a backend, so the rules are unit-tested with stand-ins.

The rules (per logical data)
----------------------------
The tracker remembers the events of the *last writer* and of the *readers since that
write*, keeping only the newest event per stream, because stream order implies the
older ones.

- ``read``: wait for the last writer; afterwards the task's end event joins the
  readers.
- ``write`` / ``rw``: wait for the last writer and every reader since; afterwards the
  task is the last writer and the readers are forgotten.
- Tokens follow the same rules and move no data.

Pruning waits
-------------
A stream never waits for an event of its own (stream order already holds), and each
stream remembers, per other stream, the newest event it already waits for: an older
or equal event of that stream needs no new wait. :func:`choose_stream` prefers a
stream that carries one of the prerequisites, which removes that wait entirely.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

__all__ = ["READ", "WRITE", "AccessTracker", "choose_stream", "merge_events",
           "needs_wait"]

READ = 1
WRITE = 2


class AccessTracker:
    """The ordering state of one logical data.

    Attributes
    ----------
    writer : dict
        stream -> newest event of the last writing task (usually one entry).
    readers : dict
        stream -> newest event of the tasks that read since the last write.
    """

    __slots__ = ("writer", "readers")

    def __init__(self) -> None:
        self.writer: dict[Any, Any] = {}
        self.readers: dict[Any, Any] = {}

    def prerequisites(self, mode: int) -> list[Any]:
        """Events a new access with ``mode`` must wait for."""
        if mode & WRITE:
            if self.readers:
                return [*self.writer.values(), *self.readers.values()]
            return list(self.writer.values())
        return list(self.writer.values())

    def release(self, mode: int, event: Any) -> None:
        """Record that an access with ``mode`` ends with ``event``."""
        if mode & WRITE:
            self.writer = {event.stream: event}
            if self.readers:
                self.readers = {}
        else:
            readers = self.readers
            previous = readers.get(event.stream)
            if previous is None or previous.seq < event.seq:
                readers[event.stream] = event

    def all_events(self) -> list[Any]:
        """Every event an observer of the final value must wait for."""
        return [*self.writer.values(), *self.readers.values()]


def merge_events(events: Iterable[Any]) -> list[Any]:
    """Keep the newest event of each stream."""
    newest: dict[Any, Any] = {}
    for event in events:
        previous = newest.get(event.stream)
        if previous is None or previous.seq < event.seq:
            newest[event.stream] = event
    return list(newest.values())


def needs_wait(stream: Any, event: Any) -> bool:
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


def choose_stream(pool: Sequence[Any], members: Any, prerequisites: Sequence[Any],
                  next_index: int) -> tuple[Any, int]:
    """Pick the stream of a task.

    Parameters
    ----------
    pool : sequence of streams
        The streams of the execution place.
    members : container
        ``pool`` as a set, for membership tests.
    prerequisites : sequence of events
        What the task must wait for.
    next_index : int
        Round-robin position in ``pool``.

    Returns
    -------
    (stream, next_index)
        The stream of the first prerequisite that belongs to ``pool`` (no wait is
        then needed for it; callers list the last writer first), else the next
        stream round-robin.
    """
    for event in prerequisites:
        if event.stream in members:
            return event.stream, next_index
    return pool[next_index % len(pool)], next_index + 1
