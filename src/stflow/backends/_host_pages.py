"""Faulting in the pages of a host array before the driver page-locks it.

``cuMemHostRegister`` faults in a never-touched page as it locks it, one page at a time
on one thread; :func:`populate` faults them in first on several threads, without
writing them (used by ``_cuda_memory.CudaMemory.register_host``).
"""

from __future__ import annotations

import ctypes

__all__ = ["populate"]

_POPULATE_MIN = 64 << 20
"""Arrays from this size on are faulted in by several threads before page-locking."""
_POPULATE_PIECE = 256 << 20
_MADV_POPULATE_WRITE = 23
_populate_unsupported = False


def populate(ptr: int, nbytes: int) -> None:
    """Fault in the pages of ``[ptr, ptr + nbytes)`` writable, without writing them
    (``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+), in pieces on several threads.

    Page-locking faults in a never-touched page as it locks it, one page at a time
    on one thread, several times slower than locking pages already there
    (benchmarks/RESULTS.md, B8). Where the call is unsupported nothing is done."""
    global _populate_unsupported
    if nbytes < _POPULATE_MIN or _populate_unsupported:
        return
    import mmap
    import os
    from concurrent.futures import ThreadPoolExecutor

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        _populate_unsupported = True
        return
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    page = mmap.PAGESIZE
    start = ptr - ptr % page
    end = ptr + nbytes
    pieces = [
        (at, min(_POPULATE_PIECE, end - at)) for at in range(start, end, _POPULATE_PIECE)
    ]

    def one(piece: tuple[int, int]) -> int:
        return (
            0
            if madvise(piece[0], piece[1], _MADV_POPULATE_WRITE) == 0
            else ctypes.get_errno()
        )

    with ThreadPoolExecutor(min(len(pieces), os.cpu_count() or 1, 16)) as pool:
        errors = set(pool.map(one, pieces))
    if errors & {22}:  # EINVAL: a kernel without MADV_POPULATE_WRITE
        _populate_unsupported = True
