"""Page-locking a large host array in pieces, in the order its bytes are first needed.

Page-locking a user array whole (``cuMemHostRegister``, about 26 GB/s measured on an
H200 host) delays the first transfer until the last page is locked. With
``STFLOW_PIN_PIECE`` set (``_config.pin_piece``), an owning array larger than one
piece is page-locked in pieces instead, and the first transfers start while later
pieces are still being locked.

The pieces
    :func:`piece_bounds`: the pages the array touches, cut every ``piece`` bytes
    (rounded up to whole pages) into half-open byte ranges. Each starts and ends on a
    page boundary, so no page belongs to two pieces: the driver refuses to register a
    page twice. A tile of a C-ordered matrix spans the bytes of its block row, so a
    piece of one block row's bytes is what its first tile needs; a buffer whose bytes
    cross a boundary needs every piece it meets.
Where the locking runs
    The first and the last piece, one page each (the pages the array may share with
    neighbouring memory), are locked on the registering thread: a refusal there
    (read-only memory, a page registered by other code) leaves the array to the
    runtime's unpinned path, as a refused whole-array page-locking does. The others are locked by one thread of the pins,
    which runs ahead in address order and takes first the pieces a copy is waiting for
    (:meth:`PiecePins.wait`). A copy is enqueued only once every piece its host bytes
    meet is locked: the runtime calls :meth:`PiecePins.wait` on the submitting thread
    before it enqueues the copy (a copy of pageable memory on CUDA is synchronous for
    the host and reads at call time, so an unlocked piece is never copied from).
The end
    :meth:`PiecePins.release` stops the thread (it finishes the piece it is locking),
    joins it, and undoes every locked piece through the backend's
    ``unregister_host`` (deferred on CUDA). It is called when the last data using the
    array is retired and its work completed, or at ``finalize()``, errors included;
    the thread never outlives the context. A failure of the thread (a driver error)
    is raised by the next :meth:`PiecePins.wait` and returned by :meth:`release`
    (``finalize()`` raises it).
"""

from __future__ import annotations

import bisect
import mmap
import threading
from collections import deque
from typing import Any

import numpy as np

from ._errors import HostPinningError
from .backends._base import Backend, pointer_array

__all__ = ["PiecePins", "piece_bounds"]

PAGE = mmap.PAGESIZE
"""The host page size: pieces start and end on its multiples."""

_PENDING, _LOCKING, _LOCKED, _REFUSED = range(4)


def piece_bounds(ptr: int, nbytes: int, piece: int, page: int | None = None
                 ) -> list[tuple[int, int]]:
    """The page-aligned byte ranges ``(start, end)`` of the pieces of ``[ptr, ptr +
    nbytes)``: consecutive and disjoint, together covering every page the range
    touches (``page``: :data:`PAGE` by default, read at each call).

    The first and the last page are pieces of their own (they may be shared with
    neighbouring memory, which :meth:`PiecePins.start` checks at once); the pages
    between are cut every ``piece`` bytes, rounded up to whole pages."""
    if page is None:
        page = PAGE
    if nbytes <= 0:
        return []
    step = max(page, -(-piece // page) * page)
    first = ptr - ptr % page
    end = -(-(ptr + nbytes) // page) * page
    if end - first <= 2 * page:
        return [(start, start + page) for start in range(first, end, page)]
    inner = [(start, min(start + step, end - page))
             for start in range(first + page, end - page, step)]
    return [(first, first + page), *inner, (end - page, end)]


def _failed(what: str, failure: BaseException) -> HostPinningError:
    error = HostPinningError(
        f"page-locking {what} in pieces (STFLOW_PIN_PIECE) failed: {failure!r}; "
        "unset STFLOW_PIN_PIECE to page-lock arrays whole, or fix the cause above")
    error.__cause__ = failure
    return error


class PiecePins:
    """One host array page-locked in pieces (see the module docstring).

    Parameters
    ----------
    backend : Backend
        Whose ``register_host`` / ``unregister_host`` lock and unlock each piece.
    array : numpy.ndarray
        The contiguous owning array (kept alive until :meth:`release`).
    piece : int
        Bytes per piece (rounded up to whole pages).
    """

    def __init__(self, backend: Backend, array: np.ndarray, piece: int) -> None:
        self.backend = backend
        self.array = array
        ptr = int(array.__array_interface__["data"][0])
        self.bounds = piece_bounds(ptr, int(array.nbytes), piece)
        self.starts = [start for start, _ in self.bounds]
        count = len(self.bounds)
        self.tokens: list[Any] = [None] * count
        self.status = [_PENDING] * count
        self.complete = False
        """Every piece locked: :meth:`wait` returns at once."""
        self.failure: BaseException | None = None
        self._reported = False
        self._cv = threading.Condition()
        self._wanted: deque[int] = deque()
        self._next = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Lock the first and the last piece here (the pages the array may share
        with other memory) and start the thread for the others; False (nothing
        locked, no thread) when the backend refuses either."""
        last = len(self.bounds) - 1
        self.status[0] = self.status[last] = _LOCKING
        try:
            locked = self._lock_piece(0) and self._lock_piece(last)
        except BaseException:
            self.release()
            raise
        if not locked:
            self.release()
            return False
        if last <= 1:
            self.complete = True
            return True
        self._thread = threading.Thread(target=self._run, name="stflow-pin-pieces",
                                        daemon=True)
        self._thread.start()
        return True

    def _lock_piece(self, index: int) -> bool:
        """Page-lock piece ``index`` (no lock held); True when it is locked."""
        start, end = self.bounds[index]
        view = pointer_array(start, (end - start,), np.dtype(np.uint8), False,
                             self.array)
        token = self.backend.register_host(view)
        locked = token is not None or self.backend.is_pinned(start, end - start)
        with self._cv:
            self.tokens[index] = token
            self.status[index] = _LOCKED if locked else _REFUSED
            self._cv.notify_all()
        return locked

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    index = self._take()
                    if index is None:
                        return
                self._lock_piece(index)
        except BaseException as exc:        # surfaces at the next wait() or release()
            with self._cv:
                self.failure = exc
                self._cv.notify_all()

    def _take(self) -> int | None:
        """The next piece to lock (the lock held): one a copy waits for, else the
        next in address order; None once all are taken or when stopping."""
        status = self.status
        if self._stopping:
            return None
        while self._wanted:
            index = self._wanted.popleft()
            if status[index] == _PENDING:
                status[index] = _LOCKING
                return index
        while self._next < len(status) and status[self._next] != _PENDING:
            self._next += 1
        if self._next == len(status):
            self.complete = all(s == _LOCKED for s in status)
            return None
        status[self._next] = _LOCKING
        return self._next

    def pieces_of(self, ptr: int, nbytes: int) -> range:
        """The indices of the pieces that ``[ptr, ptr + nbytes)`` meets."""
        first = max(bisect.bisect_right(self.starts, ptr) - 1, 0)
        return range(first, bisect.bisect_left(self.starts, ptr + max(nbytes, 1)))

    def wait(self, ptr: int, nbytes: int, label: str) -> None:
        """Return once every piece that ``[ptr, ptr + nbytes)`` (the host bytes of
        logical data ``label``) meets is page-locked, asking the thread for them
        first.

        Raises
        ------
        HostPinningError
            The thread failed, or the backend refused one of the pieces.
        """
        if self.complete:
            return
        indices = self.pieces_of(ptr, nbytes)
        with self._cv:
            status = self.status
            missing = [i for i in indices if status[i] in (_PENDING, _LOCKING)]
            self._wanted.extendleft(reversed(
                [i for i in missing if status[i] == _PENDING]))
            self._cv.notify_all()
            while self.failure is None and any(
                    status[i] in (_PENDING, _LOCKING) for i in missing):
                if self._thread is None or not self._thread.is_alive():
                    break                       # released: nothing will lock them
                self._cv.wait(0.5)
            failure = self.failure
            refused = [i for i in indices if status[i] != _LOCKED]
        if failure is not None:
            self._reported = True
            raise _failed(f"the host array of logical data {label}", failure)
        if refused:
            start, end = self.bounds[refused[0]]
            raise HostPinningError(
                f"the backend refused to page-lock bytes 0x{start:x}..0x{end:x} of the "
                f"host array of logical data {label} (STFLOW_PIN_PIECE): the pages are "
                "read-only, file-backed, or partly registered by other code; unset "
                "STFLOW_PIN_PIECE (a refused whole array is then copied through "
                "staging buffers) or register a writable array of your own")

    def release(self) -> BaseException | None:
        """Stop and join the thread, undo every locked piece; the thread's failure
        as a :class:`HostPinningError`, unless :meth:`wait` raised it already."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        tokens, self.tokens = self.tokens, [None] * len(self.tokens)
        for token in tokens:
            if token is not None:
                self.backend.unregister_host(token)
        self.complete = False
        if self.failure is None or self._reported:
            return None
        self._reported = True
        return _failed(f"a host array of {self.array.nbytes} bytes", self.failure)

    def locked(self) -> list[tuple[int, int]]:
        """The byte ranges of the pieces locked so far (tests, statistics)."""
        with self._cv:
            return [bounds for bounds, status in zip(self.bounds, self.status)
                    if status == _LOCKED]
