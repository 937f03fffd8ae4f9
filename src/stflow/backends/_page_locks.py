"""The emulated backend's model of page-locking host memory (``cuMemHostRegister``).

The emulated backend needs no page-locked memory, but the runtime's page-locking
must still be right when the CUDA backend runs it: :class:`PageLocks` keeps the
registrations the way the driver does, so the CPU suite tests them.

- A registration covers whole pages: ``[ptr, ptr + nbytes)`` rounded out to the host
  page size.
- A page is registered at most once: a range meeting a registered page is refused
  (``None``, as the CUDA backend answers ``CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED``)
  unless it starts where a registration starts and ends within it, which is counted
  (the CUDA backend shares such registrations the same way).
- An unregistration undoes the last use of a count; the array is kept alive until
  then.

With :attr:`PageLocks.trace` set to a list, every registration, unregistration and
host-side copy range is appended to it in the order it happened (copies when they
are *enqueued*, the moment a pageable copy reads on CUDA), so a test can check that
no copy touched pages before they were registered.
"""

from __future__ import annotations

import bisect
import mmap
import threading
from typing import Any

import numpy as np

__all__ = ["PageLocks"]


class PageLocks:
    """Registered host page ranges, counted (see the module docstring)."""

    def __init__(self, page: int = mmap.PAGESIZE) -> None:
        self.page = page
        self._lock = threading.Lock()
        self._starts: list[int] = []                       # sorted
        self._entries: dict[int, list[Any]] = {}           # start -> [end, uses, array]
        self.registrations = 0
        """Registrations made (counted shares not included), for tests."""
        self.trace: list[tuple[str, int, int]] | None = None
        """``("register" | "unregister" | "copy", start, end)``, when a list."""

    def _pages(self, ptr: int, nbytes: int) -> tuple[int, int]:
        page = self.page
        return ptr - ptr % page, -(-(ptr + nbytes) // page) * page

    def _meets(self, start: int, end: int) -> int | None:
        """The start of a registration sharing a page with ``[start, end)``."""
        index = bisect.bisect_left(self._starts, end) - 1
        if index >= 0:
            other = self._starts[index]
            if self._entries[other][0] > start:
                return other
        return None

    def register(self, array: np.ndarray) -> int | None:
        """Register the pages of ``array``; its token, or ``None`` when refused."""
        nbytes = int(array.nbytes)
        if nbytes == 0:
            return None
        start, end = self._pages(int(array.__array_interface__["data"][0]), nbytes)
        with self._lock:
            other = self._meets(start, end)
            if other is not None:
                entry = self._entries[other]
                if other == start and entry[0] >= end:
                    entry[1] += 1
                    return start
                return None
            bisect.insort(self._starts, start)
            self._entries[start] = [end, 1, array]
            self.registrations += 1
            if self.trace is not None:
                self.trace.append(("register", start, end))
        return start

    def unregister(self, token: int | None) -> None:
        """Undo one :meth:`register` (``None`` does nothing)."""
        if token is None:
            return
        with self._lock:
            entry = self._entries.get(token)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1]:
                return
            del self._entries[token]
            del self._starts[bisect.bisect_left(self._starts, token)]
            if self.trace is not None:
                self.trace.append(("unregister", token, entry[0]))

    def covers(self, ptr: int, nbytes: int) -> bool:
        """True when every page of ``[ptr, ptr + nbytes)`` is registered."""
        at, end = self._pages(ptr, max(nbytes, 1))
        with self._lock:
            while at < end:
                index = bisect.bisect_right(self._starts, at) - 1
                if index < 0:
                    return False
                stop = self._entries[self._starts[index]][0]
                if stop <= at:
                    return False
                at = stop
        return True

    def live(self) -> list[tuple[int, int]]:
        """The registered page ranges ``(start, end)``, sorted."""
        with self._lock:
            return [(start, self._entries[start][0]) for start in self._starts]

    def copied(self, ptr: int, nbytes: int) -> None:
        """Note a copy reading or writing ``[ptr, ptr + nbytes)`` (traced only)."""
        trace = self.trace
        if trace is not None and nbytes:
            with self._lock:
                trace.append(("copy", ptr, ptr + nbytes))
