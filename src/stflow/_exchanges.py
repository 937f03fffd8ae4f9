"""This rank's messages for :mod:`stflow._distributed`: sends and receives posted at
their program points, a value cut into pieces, what a sender keeps staged.

Tags, the order of posting and the no-deadlock argument are in the docstring of
:mod:`stflow._distributed`; how a value goes between a local data and a message
buffer (host arrays, pinned host memory, device buffers) in :mod:`stflow._staging`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._staging import Message, Staging, piece_bounds, piece_size, send_limit, staging_for

__all__ = ["Exchanges", "Incoming"]

_TAG_LIMIT = 32767
"""The smallest upper bound of tags MPI guarantees (the communicator's own bound is
used when it says)."""



class Incoming:
    """A value being received into ``message``: one receive per piece
    (``requests``, completed by :meth:`Exchanges.complete` or piece by piece while
    the value lands)."""

    __slots__ = ("requests", "message", "bounds")

    def __init__(self, requests: list[Any], message: Message,
                 bounds: list[tuple[int, int]]) -> None:
        self.requests = requests
        self.message = message
        self.bounds = bounds

    def wait_piece(self, k: int) -> None:
        self.requests[k].Wait()


class Exchanges:
    """This rank's messages: sends posted at their program point, completed lazily;
    receives posted at their program point, completed when the data is needed.

    ``in_flight`` holds the posted sends, one per piece; a value's last piece holds
    its message, given back to the staging once that send completed (sends are
    forgotten oldest first: tested at every task, waited for at ``fence``/
    ``finalize``, and before a new send would stage more than ``send_limit`` bytes).
    Every send of the program points a rank has passed is posted, so a rank that
    blocks waiting for a receive holds back nothing another rank may wait for.
    A value larger than ``piece`` bytes goes as several messages (see
    :mod:`stflow._staging`).
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
        except (ImportError, AttributeError):   # not an mpi4py communicator
            bound = None
        self.tag_limit = min(int(bound), 1 << 30) + 1 if bound else _TAG_LIMIT + 1
        # request, the message its completion frees (a value's last piece), bytes
        self.in_flight: list[tuple[Any, Message | None, int]] = []
        self.staged = 0                      # bytes of the sends in flight
        self.send_limit = send_limit()

    def send(self, local_data: Any, nbytes: int, dest: int, tag: int) -> None:
        """Post the send of local logical data ``local_data``'s value (``nbytes``
        bytes) to ``dest`` once it is ready on this rank (the local work producing
        it, not the receiver, is waited for), piece by piece as each is staged."""
        in_flight = self.in_flight
        while in_flight and self.staged + nbytes > self.send_limit:
            request, sent, size = in_flight.pop(0)    # the oldest send, received
            request.Wait()
            self.staged -= size
            if sent is not None:
                self.staging.release(sent)
        bounds = piece_bounds(nbytes, self.piece)
        message, staged = self.staging.read(self.local, local_data, bounds)
        comm, last = self.comm, len(bounds) - 1
        for k, (start, stop) in enumerate(bounds):
            if staged is not None:
                self._await(staged[k])
            in_flight.append((comm.Isend(message.pieces[k], dest=dest, tag=tag),
                              message if k == last else None, stop - start))
        self.staged += nbytes

    def _await(self, event: Any) -> None:
        """Wait for a staging copy's ``event``, letting MPI move the sends in
        flight meanwhile (without an asynchronous progress thread, a message moves
        only while its ranks are in MPI calls)."""
        query = self.backend.query
        if query(event):
            return
        if not self.in_flight:
            self.backend.synchronize(event)
            return
        from mpi4py import MPI
        requests = [request for request, _, _ in self.in_flight]
        while not query(event):
            MPI.Request.Testall(requests)

    def receive(self, shape: tuple[int, ...], dtype: np.dtype, source: int, tag: int
                ) -> Incoming:
        """Post the receive of a value of ``shape`` and ``dtype`` from ``source``."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        bounds = piece_bounds(nbytes, self.piece)
        message = self.staging.buffer(shape, dtype, bounds)
        comm = self.comm
        return Incoming([comm.Irecv(piece, source=source, tag=tag)
                         for piece in message.pieces], message, bounds)

    def progress(self) -> None:
        """Forget the sends that completed, oldest first (at every task while any
        is in flight; the test also lets MPI progress them)."""
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

    def complete(self, incoming: Sequence[Incoming]) -> None:
        """Wait for every piece of the receives ``incoming`` (each request's own
        ``Wait``: a receive may be an object completing more than MPI's request, as
        the tests' stand-in for a CUDA-aware MPI does)."""
        for item in incoming:
            for request in item.requests:
                request.Wait()

    def land(self, data: Any, incoming: Incoming) -> None:
        """Write the value ``incoming`` brings into local data ``data`` (each piece
        copied in once it arrived)."""
        self.staging.land(self.local, data, incoming.message, incoming.bounds,
                          incoming.wait_piece)

    def flush(self) -> None:
        """Wait until every send completed (fence, finalize)."""
        from mpi4py import MPI
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
