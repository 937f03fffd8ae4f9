"""What places ask the default backend: its devices, locality domains and contexts.

A factory checks its ordinals at once, against the *default* backend
(``STFLOW_BACKEND``): a device ordinal against its device count
(:func:`check_device_ordinal`, :func:`default_device_count`), a locality domain
against :func:`locality_domain_count`. A context that uses the place checks again,
against its own backend.

Locality domains are the parts of a device with their own memory and SMs (CUDA 13.4
drivers report them); a backend that cannot tell reports one domain per device, the
whole device, so domain places then behave exactly like device places. Known limit:
with several domains, stflow still runs a domain place on the whole device and
allocates plain device memory (the placement is a label, not yet a partition).

Contexts: :func:`context_partition` resolves what ``exec_place.from_context`` is
given (a ``CUcontext``, a ``cuda.core`` Context, an emulated context) through the
backend's ``context_partition``, and keeps one :class:`StreamPartition` per live
context, so places of the same context share its streams.

Every question goes to a method of the backend contract (``backends/_base.py``);
nothing here knows which backend answers.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol, runtime_checkable

from .._core import config as _config
from .._core.errors import DeviceOrdinalError, PlaceError
from ..backends._base import Backend
from .stream_partitions import StreamPartition

__all__ = [
    "HasHandle",
    "SM_SPLITS",
    "check_device_ordinal",
    "check_domain",
    "check_split",
    "checked_device",
    "context_partition",
    "default_backend",
    "default_device_count",
    "locality_domain_count",
]

SM_SPLITS = ("backfill", "aligned", "fine")
"""How the SMs of a device are shared between its domains' execution places."""


def default_backend() -> Backend:
    """The configured default backend (``STFLOW_BACKEND``), for the factories that
    check or resolve a device now."""
    from ..backends import default_backend as configured

    return configured(notify=False)


_known_count: tuple[Any, int] | None = None


def default_device_count() -> int:
    """The number of devices of the default backend (cached per configuration)."""
    global _known_count
    settings = _config.config()
    known = _known_count
    if known is not None and known[0] is settings:
        return known[1]
    count = default_backend().device_count
    _known_count = (settings, count)
    return count


def check_device_ordinal(dev_id: Any, what: str, device_count: int | None = None) -> int:
    """Validate a device ordinal and return it as an ``int``.

    Without ``device_count`` only its type and sign are checked (a context checks
    the rest when it uses the place, against its own backend).

    Raises
    ------
    TypeError
        ``dev_id`` is not an ``int``.
    PlaceError
        ``dev_id`` is negative, or not below ``device_count``.
    """
    if isinstance(dev_id, bool) or not isinstance(dev_id, int):
        raise TypeError(
            f"{what}: the device ordinal must be an int, got {type(dev_id).__name__}"
        )
    dev_id = int(dev_id)
    if dev_id < 0:
        raise DeviceOrdinalError(
            f"{what}: invalid device id {dev_id}: device ordinals are 0 or more"
        )
    if device_count is not None and dev_id >= device_count:
        raise DeviceOrdinalError(
            f"{what}: invalid device id {dev_id}: device {dev_id} does not exist; valid "
            f"ordinals are 0..{device_count - 1} ({device_count} device(s))"
        )
    return dev_id


def checked_device(dev_id: Any, what: str) -> tuple[Backend, int]:
    """The default backend and ``dev_id`` checked against its device count."""
    device = check_device_ordinal(dev_id, what)
    backend = default_backend()
    return backend, check_device_ordinal(device, what, backend.device_count)


def locality_domain_count(dev_id: int = 0) -> int:
    """The number of locality domains of device ``dev_id`` (at least 1).

    Raises
    ------
    TypeError
        ``dev_id`` is not an ``int``.
    PlaceError
        ``dev_id`` is not a device of the default backend (a ``ValueError``).
    """
    backend, device = checked_device(dev_id, "locality_domain_count")
    return backend.locality_domain_count(device)


def check_domain(dev_id: Any, domain_id: Any, what: str) -> tuple[int, int]:
    """``(device, domain)`` checked against the default backend."""
    device = check_device_ordinal(dev_id, what)
    count = locality_domain_count(device)
    if isinstance(domain_id, bool) or not isinstance(domain_id, int):
        raise TypeError(
            f"{what}: the domain ordinal must be an int, got {type(domain_id).__name__}"
        )
    if not 0 <= domain_id < count:
        raise PlaceError(
            f"{what}: locality domain {domain_id} does not exist on device "
            f"{device}; valid ordinals are 0..{count - 1} "
            f"(locality_domain_count({device}) == {count})"
        )
    return device, int(domain_id)


def check_split(sm_split: Any) -> str:
    """``sm_split`` when it is one of :data:`SM_SPLITS`."""
    if sm_split not in SM_SPLITS:
        raise ValueError(
            f"sm_split must be one of {', '.join(map(repr, SM_SPLITS))}, got {sm_split!r}"
        )
    return str(sm_split)


_context_partitions: weakref.WeakValueDictionary[int, StreamPartition] = (
    weakref.WeakValueDictionary()
)
"""The partition of each context handle that a live place (or stream) names."""


@runtime_checkable
class HasHandle(Protocol):
    """A context object: a ``cuda.core`` Context, an ``EmulatedContext``."""

    handle: Any
    """Its ``CUcontext`` (or an ``int`` convertible handle)."""


def _context_handle(ctx: Any) -> int:
    """The handle of ``ctx``: an ``int`` ``CUcontext`` or an object with ``.handle``."""
    if ctx is None or isinstance(ctx, (bool, str, bytes, float)):
        raise TypeError(
            f"exec_place.from_context expects a CUcontext (int) or an object "
            f"with .handle (a cuda.core Context), got {type(ctx).__name__}"
        )
    handle_source = ctx.handle if isinstance(ctx, HasHandle) else ctx
    try:
        handle = int(handle_source)
    except (TypeError, ValueError):
        raise TypeError(
            f"exec_place.from_context expects a CUcontext (int) or an object "
            f"with .handle (a cuda.core Context), got {type(ctx).__name__}"
        ) from None
    if handle == 0:
        raise ValueError(
            "exec_place.from_context: the context handle is NULL (0); pass "
            "a live CUcontext or cuda.core Context"
        )
    return handle


def context_partition(ctx: Any, dev_id: int = -1) -> tuple[int, StreamPartition | None]:
    """The device of context ``ctx`` and the partition its places' streams live in
    (``None``: the device's own context, whose places are device places).

    Raises
    ------
    TypeError, ValueError
        ``ctx`` is no context handle, or a NULL one; ``dev_id`` is not an ``int``.
    PlaceError
        ``ctx`` is not a context of the default backend, or it belongs to another
        device than ``dev_id`` (``-1``: derive the device).
    """
    handle = _context_handle(ctx)
    if isinstance(dev_id, bool) or not isinstance(dev_id, int):
        raise TypeError(f"dev_id must be an int, got {type(dev_id).__name__}")
    if dev_id < -1:
        raise PlaceError(
            f"exec_place.from_context: device {dev_id} does not exist; "
            "give an ordinal, or -1 to derive it from the context"
        )
    backend = default_backend()
    device, native = backend.context_partition(ctx, handle)
    check_device_ordinal(device, "exec_place.from_context", backend.device_count)
    if dev_id != -1 and dev_id != device:
        raise PlaceError(
            f"exec_place.from_context: the context belongs to device "
            f"{device}, not {dev_id}; pass dev_id={device} or -1"
        )
    if native is None:
        return device, None
    partition = _context_partitions.get(handle)
    if partition is None:
        partition = StreamPartition(
            device, native, f"context(dev={device}, 0x{handle:x})"
        )
        _context_partitions[handle] = partition
    return device, partition
