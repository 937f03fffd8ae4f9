"""Backend selection.

``"emulated"`` and ``"null"`` (synchronous, for measurements and debugging) are always
available. ``"cuda"`` needs ``cuda.bindings`` (the ``cu12`` or
``cu13`` extra) and at least one visible device. ``"auto"`` takes CUDA when it is
usable and otherwise falls back to the emulated backend, saying so once per process
with a :class:`~stflow.errors.BackendNotice`.
"""

from __future__ import annotations

import threading
from typing import Any

from .._core.errors import (
    BackendNotice,
    BackendUnavailableError,
    PlaceAllocationError,
    warn_user,
)
from ._base import HOST, MANAGED, Allocation, Backend

__all__ = ["Backend", "default_backend", "get_backend", "machine_init", "place_allocator"]

_BACKEND_NAMES = ("auto", "cuda", "emulated", "null")
_auto: Backend | None = None
_auto_reason: str | None = None  # why "auto" fell back to emulation
_noticed = False
_lock = threading.Lock()


def _cuda() -> Backend:
    import importlib

    try:
        cuda = importlib.import_module(f"{__name__}.cuda")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.cuda":
            raise
        raise BackendUnavailableError(
            "this installation of stflow has no CUDA backend; use backend='emulated'"
        ) from None
    return cuda.get_backend()


def get_backend(name: str, *, notify: bool = True) -> Backend:
    """Return the process-wide backend called ``name``.

    Raises
    ------
    ValueError
        ``name`` is not ``"auto"``, ``"cuda"``, ``"emulated"`` or ``"null"``.
    BackendUnavailableError
        ``"cuda"`` was asked for and cannot be used; the message says why.
    """
    if not isinstance(name, str):
        raise TypeError(f"backend must be a str, got {type(name).__name__}")
    if name == "emulated":
        from .emulated import get_backend as emulated

        return emulated()
    if name == "null":
        from .null import get_backend as null

        return null()
    if name == "cuda":
        return _cuda()
    if name == "auto":
        return _resolve_auto(notify)
    raise ValueError(f"backend={name!r} is not one of {', '.join(_BACKEND_NAMES)}")


def _resolve_auto(notify: bool) -> Backend:
    """CUDA when usable, else the emulated backend (noticed once, when ``notify``)."""
    global _auto, _auto_reason, _noticed
    if _auto is None:
        with _lock:
            if _auto is None:
                try:
                    _auto = _cuda()
                except BackendUnavailableError as exc:
                    from .emulated import get_backend as emulated

                    _auto_reason = str(exc)
                    _auto = emulated()
    if notify and _auto_reason is not None and not _noticed:
        _noticed = True
        warn_user(
            f"stflow: no usable CUDA GPU ({_auto_reason}); running on the emulated CPU "
            f"backend ({_auto.describe()}). Pass backend='emulated' or set "
            "STFLOW_BACKEND=emulated to silence this notice.",
            BackendNotice,
        )
    return _auto


def default_backend(*, notify: bool = True) -> Backend:
    """The backend that ``STFLOW_BACKEND`` (default ``"auto"``) selects."""
    from .._core.config import config

    return get_backend(config().backend, notify=notify)


class _PlaceAllocator:
    """Backs ``data_place.allocate`` / ``deallocate`` outside any context."""

    def __init__(self) -> None:
        self._live: dict[int, Allocation] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _device(place: Any) -> int:
        device = place._device
        if device >= 0 or device in (HOST, MANAGED):
            return device
        raise PlaceAllocationError(
            f"data_place.allocate failed: {place!r} cannot "
            "allocate memory; use a host, managed or device "
            "place"
        )

    def allocate(self, place: Any, nbytes: int, stream: Any) -> int:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int):
            raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
        if nbytes < 0:
            raise ValueError(
                f"data_place.allocate: nbytes must be non-negative, got {nbytes}"
            )
        device = self._device(place)
        if nbytes == 0:
            return 0
        import numpy as np

        backend = default_backend()
        native = _stream(backend, stream) if device >= 0 else None
        allocation = backend.allocate(device, nbytes, native, np.dtype(np.uint8))
        with self._lock:
            self._live[allocation.ptr] = allocation
        return allocation.ptr

    def deallocate(self, place: Any, ptr: int, nbytes: int, stream: Any) -> None:
        self._device(place)
        if ptr == 0:
            return
        with self._lock:
            allocation = self._live.pop(ptr, None)
        if allocation is None:
            raise ValueError(f"0x{ptr:x} was not allocated by data_place.allocate")
        backend = default_backend()
        native = _stream(backend, stream) if allocation.device >= 0 else None
        backend.free(allocation, native)


def _stream(backend: Backend, stream: Any) -> Any:
    from .._interchange.views import stream_handle

    return backend.stream_from_handle(stream_handle(stream))


_allocator = _PlaceAllocator()


def place_allocator() -> _PlaceAllocator:
    return _allocator


def machine_init() -> None:
    """Enable peer access, configure memory pools and read the topology.

    The CUDA backend runs it once when it starts (for the first context or place that
    needs it); call it yourself only to prepare devices before that.
    Idempotent. A driver failure raises ``CudaError``.
    """
    default_backend().machine_init()
