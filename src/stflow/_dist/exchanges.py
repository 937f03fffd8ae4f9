"""This rank's messages for :mod:`stflow._dist.context`: sends and receives posted at
their program points (or sends posted ahead, once their copies completed), a value
cut into pieces, what a sender keeps staged.

Tags, the order of posting and the no-deadlock argument are in the docstring of
:mod:`stflow._dist.context`; how a value goes between a local data and a message
buffer (host arrays, pinned host memory, device buffers) in :mod:`stflow._dist.staging`.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

import numpy as np

from .._core import config as _config
from .staging import Message, Staging, piece_bounds, piece_size, send_limit, staging_for

__all__ = ["Exchanges", "Incoming"]


def _send_ahead() -> bool:
    """``STFLOW_MPI_SEND_AHEAD``: ``1`` (post a send once its copy completed, the
    rank going on meanwhile) or ``0`` (wait for the copy at the program point)."""
    return _config.mpi_send_ahead()


_TAG_LIMIT = 32767
"""The smallest upper bound of tags MPI guarantees (the communicator's own bound is
used when it says)."""


class Incoming:
    """A value being received into ``message``: one receive per piece
    (``requests``, completed piece by piece while the value lands)."""

    __slots__ = ("requests", "message", "bounds")

    def __init__(
        self, requests: list[Any], message: Message, bounds: list[tuple[int, int]]
    ) -> None:
        self.requests = requests
        self.message = message
        self.bounds = bounds


class _Staged:
    """A value staged for sending whose pieces are not all posted yet: piece ``k``
    is posted once ``events[k]`` (its copy out of the data) completed."""

    __slots__ = ("message", "events", "dest", "tag", "bounds", "posted")

    def __init__(
        self,
        message: Message,
        events: list[Any],
        dest: int,
        tag: int,
        bounds: list[tuple[int, int]],
    ) -> None:
        self.message = message
        self.events = events
        self.dest = dest
        self.tag = tag
        self.bounds = bounds
        self.posted = 0  # pieces posted so far


class Exchanges:
    """This rank's messages: sends posted at their program point (or, with
    ``ahead``, as soon as their copies completed), completed lazily; receives posted
    at their program point, completed when the data is needed.

    ``waiting`` holds the values staged whose pieces are not all posted (only ever
    non-empty when sending ahead), oldest first; ``in_flight`` the posted sends, one
    per piece; a value's last piece holds its message, given back to the staging
    once that send completed (sends are forgotten oldest first: tested at every
    task, waited for at ``fence``/``finalize``, and before a new send would stage
    more than ``send_limit`` bytes). Every send of the program points a rank has
    passed is posted, or gets posted while the rank waits on another rank
    (:meth:`wait_request`), so a rank that blocks waiting for a receive holds back
    nothing another rank may wait for. A value larger than ``piece`` bytes goes as
    several messages (see :mod:`stflow._dist.staging`).
    """

    def __init__(self, comm: Any, local: Any, use_graph: bool, device: int) -> None:
        self.comm = comm
        self.local = local
        self.backend = local._live().backend
        self.staging: Staging = staging_for(local, use_graph, device)
        self.piece = piece_size() if self.staging.pieces else 1 << 62
        try:
            from mpi4py import MPI

            bound = comm.Get_attr(MPI.TAG_UB)
        except (ImportError, AttributeError):  # not an mpi4py communicator
            bound = None
        self.tag_limit = min(int(bound), 1 << 30) + 1 if bound else _TAG_LIMIT + 1
        # request, the message its completion frees (a value's last piece), bytes
        self.in_flight: list[tuple[Any, Message | None, int]] = []
        # values staged, not all posted (oldest first: sends are posted in program
        # order, which MPI's non-overtaking rule needs where tags wrap around)
        self.waiting: deque[_Staged] = deque()
        self.staged = 0  # bytes of the sends staged, not received
        self.send_limit = send_limit()
        self.ahead = _send_ahead()

    def send(self, local_data: Any, nbytes: int, dest: int, tag: int) -> None:
        """Stage local logical data ``local_data``'s value (``nbytes`` bytes) for
        ``dest`` and post its sends, piece by piece as each is copied out. With
        send-ahead the rank goes on at once and the pieces are posted as their
        copies complete (:meth:`post_ready`); else it waits for them here (for
        the local work producing the value, never for the receiver)."""
        while self.staged + nbytes > self.send_limit and (self.in_flight or self.waiting):
            self._retire_oldest()
        # Buffers of the right size held by earlier sends (send_buffers() of them):
        # wait for the oldest send to be received and reuse its buffer rather than
        # allocate page-locked memory.
        staging = self.staging
        while self.in_flight and staging.awaits_buffer(
            nbytes, [sent for _, sent, _ in self.in_flight if sent is not None]
        ):
            self._retire_oldest()
        bounds = piece_bounds(nbytes, self.piece)
        message, events = staging.read(self.local, local_data, bounds)
        self.staged += nbytes
        if events is None:  # ready at once
            events = []
        self.waiting.append(_Staged(message, events, dest, tag, bounds))
        if self.ahead:
            self.post_ready()
        else:
            self._post_all()

    def post_ready(self) -> None:
        """Post the pieces whose copies completed, in program order (a piece
        still being copied holds back the ones after it)."""
        waiting, query = self.waiting, self.backend.query
        while waiting:
            staged = waiting[0]
            events = staged.events
            while staged.posted < len(staged.bounds):
                k = staged.posted
                if events and not query(events[k]):
                    return
                self._post(staged, k)
            waiting.popleft()

    def _post(self, staged: _Staged, k: int) -> None:
        start, stop = staged.bounds[k]
        last = k == len(staged.bounds) - 1
        request = self.comm.Isend(
            staged.message.pieces[k], dest=staged.dest, tag=staged.tag
        )
        self.in_flight.append((request, staged.message if last else None, stop - start))
        staged.posted = k + 1

    def _post_all(self) -> None:
        """Post every staged piece, waiting for each copy in turn (local work only),
        letting MPI move the sends in flight meanwhile (without an asynchronous
        progress thread, a message moves only while its ranks are in MPI calls)."""
        query, waiting = self.backend.query, self.waiting
        while waiting:
            staged = waiting[0]
            if staged.events:
                event = staged.events[staged.posted]
                if not query(event):
                    if not self.in_flight:
                        self.backend.synchronize(event)
                    else:
                        from mpi4py import MPI

                        requests = [request for request, _, _ in self.in_flight]
                        while not query(event):
                            MPI.Request.Testall(requests)
                            os.sched_yield()
            self._post(staged, staged.posted)
            if staged.posted == len(staged.bounds):
                waiting.popleft()

    def _retire_oldest(self) -> None:
        """Wait until the oldest send is received (posting it first if need be)."""
        if not self.in_flight:
            self._post_all()  # local copies only
        request, sent, size = self.in_flight.pop(0)
        self.wait_request(request)
        self.staged -= size
        if sent is not None:
            self.staging.release(sent)

    def wait_request(self, request: Any) -> None:
        """Complete ``request`` (a receive, or one of our sends), posting this rank's
        staged sends as their copies complete meanwhile: another rank may be
        waiting for one of them before it can complete ours."""
        while self.waiting:
            if request.Test():
                return
            self.post_ready()
            os.sched_yield()  # ranks sharing cores (oversubscribed)
        request.Wait()

    def receive(
        self, shape: tuple[int, ...], dtype: np.dtype, nbytes: int, source: int, tag: int
    ) -> Incoming:
        """Post the receive of a value of ``shape`` and ``dtype`` (``nbytes`` bytes)
        from ``source``."""
        bounds = piece_bounds(nbytes, self.piece)
        message = self.staging.buffer(shape, dtype, bounds)
        comm = self.comm
        return Incoming(
            [comm.Irecv(piece, source=source, tag=tag) for piece in message.pieces],
            message,
            bounds,
        )

    def progress(self) -> None:
        """Post the staged sends whose copies completed, and forget the sends that
        completed, oldest first (at every task while any is staged or in flight;
        the test also lets MPI progress them)."""
        if self.waiting:
            self.post_ready()
        staging = self.staging
        staging.progress()
        in_flight = self.in_flight
        done = staged = 0
        while done < len(in_flight) and in_flight[done][0].Test():
            _, sent, size = in_flight[done]
            staged += size
            if sent is not None:
                staging.release(sent)
            done += 1
        if done:
            del in_flight[:done]
            self.staged -= staged

    def land(self, data: Any, incoming: Incoming) -> None:
        """Write the value ``incoming`` brings into local data ``data`` (each piece
        copied in once it arrived)."""
        requests, wait_request = incoming.requests, self.wait_request
        self.staging.land(
            self.local,
            data,
            incoming.message,
            incoming.bounds,
            lambda k: wait_request(requests[k]),
        )

    def post_all(self) -> None:
        """Post every staged send (before a collective operation, in which this
        rank cannot post them while others may wait for them)."""
        if self.waiting:
            self._post_all()

    def flush(self) -> None:
        """Wait until every send completed (fence, finalize)."""
        from mpi4py import MPI

        self.post_all()
        MPI.Request.Waitall([request for request, _, _ in self.in_flight])
        for _, sent, _ in self.in_flight:
            if sent is not None:
                self.staging.release(sent)
        self.in_flight.clear()
        self.staged = 0

    def close(self) -> None:
        """Free the staging buffers (after :meth:`flush`, once the local context's
        work is done)."""
        self.staging.close()
