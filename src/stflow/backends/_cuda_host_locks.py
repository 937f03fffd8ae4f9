"""Page-locking of user host memory for the CUDA backend (a mixin of
:class:`~stflow.backends._cuda_memory.CudaMemory`).

``register_host`` page-locks a user array so that device work can reach it and copies
run at full speed; registrations are counted (contexts registering one array share
it) and undone off the caller's path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _cuda_driver as _cu
from ._host_pages import populate

__all__ = ["CudaHostLocks"]


class CudaHostLocks:
    """Page-locking of user host buffers (see the module docstring)."""

    _ensure_context: Callable[[], None]

    def _init_host_locks(self) -> None:
        # ptr -> [nbytes, users, array]
        self._registered: dict[int, list[Any]] = {}
        self._unregistering: dict[int, tuple[int, threading.Event]] = {}
        self._registered_lock = threading.Lock()

    def register_host(self, array: np.ndarray) -> Any:
        """Page-lock a user host buffer; returns a token or ``None``.

        Notes
        -----
        A page-locked user buffer can be the host instance itself (device work reaches
        it, copies run at full speed). When the driver refuses (the pages are already
        registered, e.g. by a neighbouring slice of the same array, or are read-only
        or file-backed), nothing is done and ``None`` is returned: the runtime then
        keeps a pinned host instance of its own. Registrations are counted: contexts
        registering the same array share one page-locking, undone by the last
        :meth:`unregister_host`. Unregister only after the copies using it completed.

        The driver faults in the pages it locks one by one; a large array whose pages
        were never touched (``numpy.zeros``, a fresh ``numpy.empty``) is faulted in
        first by several threads (``madvise(MADV_POPULATE_WRITE)``, which writes
        nothing), several times faster.
        """
        nbytes = int(array.nbytes)
        if nbytes == 0:
            return None
        ptr = int(array.__array_interface__["data"][0])
        self._unregistered(ptr, nbytes)  # a deferred unregistering first
        with self._registered_lock:
            entry = self._registered.get(ptr)
            if entry is not None and entry[0] >= nbytes:
                entry[1] += 1
                return ptr
            self._ensure_context()
            populate(ptr, nbytes)
            flags = _cu.driver.CU_MEMHOSTREGISTER_PORTABLE
            if _cu.driver.cuMemHostRegister(ptr, nbytes, flags)[0]:
                return None
            self._registered[ptr] = [nbytes, 1, array]
        return ptr

    def unregister_host(self, token: Any) -> None:
        """Undo :meth:`register_host` (``None`` does nothing).

        The last use's unregistering (milliseconds per GiB) is left to a thread of its
        own, off the caller's path (a ``finalize()``): the backend keeps the array
        until then, and registering memory it covers waits for it."""
        if token is None:
            return
        with self._registered_lock:
            entry = self._registered.get(token)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del self._registered[token]
            nbytes, array = entry[0], entry[2]
            done = threading.Event()
            self._unregistering[token] = (nbytes, done)
        threading.Thread(
            target=self._unregister,
            args=(token, array, done),
            name="stflow-unregister",
            daemon=True,
        ).start()

    def _unregister(self, ptr: int, array: Any, done: threading.Event) -> None:
        try:
            self._ensure_context()
            (err,) = _cu.driver.cuMemHostUnregister(ptr)
            if err:
                import warnings

                warnings.warn(
                    f"stflow: unregistering host memory at 0x{ptr:x} "
                    f"failed: {_cu.error(err, 'cuMemHostUnregister')}",
                    RuntimeWarning,
                    stacklevel=1,
                )
        finally:
            with self._registered_lock:
                self._unregistering.pop(ptr, None)
            done.set()
            del array

    def _unregistered(self, ptr: int, nbytes: int) -> None:
        """Wait for the deferred unregistering of memory overlapping ``[ptr, ptr +
        nbytes)``."""
        with self._registered_lock:
            pending = [
                done
                for start, (size, done) in self._unregistering.items()
                if start < ptr + nbytes and ptr < start + size
            ]
        for done in pending:
            done.wait()

    def settle_host_registrations(self) -> None:
        """Wait for every deferred unregistering (tests; the end of a process)."""
        with self._registered_lock:
            pending = [done for _, done in self._unregistering.values()]
        for done in pending:
            done.wait()
