"""Green contexts, foreign contexts and locality domains on the CUDA backend.

Green contexts are made by ``cuda.core`` (1.0 or later): ``Device.resources.sm``
splits the device's SM resource into groups, ``Device.create_context`` turns a group
into a green ``Context`` whose ``.handle`` is a ``CUcontext`` converted from the green
context (``cuCtxFromGreenCtx``). stflow keeps only that ``CUcontext``: a stream
created while it is current (``cuCtxPushCurrent`` + ``cuStreamCreate``) belongs to the
green context, so its kernels run on the group's SMs only. The same path serves any
context given to ``exec_place.from_context``. Events stay those of the device's
primary context, which green contexts of the device share for ordering.

Locality domains are read from ``CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT`` (CUDA
13.4 drivers and bindings); without it, or when the driver cannot answer, a device
is one domain.

:class:`CudaPartitions` implements the contract's SM-partition methods
(``backends/_base.py``) for the CUDA backend. Everything here runs only after the
CUDA backend has loaded the driver (``_cuda_driver.load``).
"""

from __future__ import annotations

import sys
from typing import Any

from .._core.errors import GreenContextUnavailableError, PlaceError
from . import _cuda_driver as _cu

__all__ = [
    "ContextPartition",
    "CudaPartitions",
    "context_device",
    "locality_domain_count",
    "partition_stream",
    "set_current",
    "split_device",
]

_CORE_EXTRA = (
    "green contexts on the CUDA backend need cuda.core 1.0 or later "
    "(pip install 'cuda-core>=1.0', or stflow[cu13])"
)


class ContextPartition:
    """The CUDA side of a ``StreamPartition``: a ``CUcontext`` (``context``, an int)
    and the object that keeps it alive (``owner``, a ``cuda.core`` Context)."""

    __slots__ = ("context", "owner")

    def __init__(self, owner: Any, context: int | None = None) -> None:
        self.owner = owner
        self.context = int(owner.handle) if context is None else int(context)


def _core() -> tuple[Any, Any, Any]:
    """``cuda.core``'s ``Device``, ``ContextOptions`` and ``SMResourceOptions``."""
    try:
        from cuda.core import Device
    except ImportError as exc:
        raise GreenContextUnavailableError(_CORE_EXTRA) from exc
    try:
        from cuda.core import ContextOptions, SMResourceOptions
    except ImportError:
        try:  # cuda.core 1.0 did not re-export them
            from cuda.core._context import ContextOptions
            from cuda.core._device_resources import SMResourceOptions
        except ImportError as exc:
            raise GreenContextUnavailableError(
                _CORE_EXTRA + "; this cuda.core has no green-context support "
                "(ContextOptions / SMResourceOptions)"
            ) from exc
    return Device, ContextOptions, SMResourceOptions


def split_device(
    device: int, sms: int, n_places: int | None, coscheduled_sm_count: int
) -> list[tuple[Any, int]]:
    """Green contexts of ``sms`` SMs on ``device``: ``n_places`` of them (exactly, else
    ``RuntimeError``) or, with ``None``, as many as fit. Returns ``(Context,
    sm_count)`` pairs. The caller's current context is restored."""
    Device, ContextOptions, SMResourceOptions = _core()
    d = _cu.driver
    prev = _cu.check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
    try:
        dev = Device(device)
        dev.set_current()
        sm = dev.resources.sm
        total = int(sm.sm_count)
        minimum = int(getattr(sm, "min_partition_size", 1) or 1)
        align = int(getattr(sm, "coscheduled_alignment", 1) or 1)
        size = max(minimum, -(-sms // align) * align)
        count = total // size if n_places is None else n_places
        if count <= 0:
            raise RuntimeError(
                f"could not partition device {device} into places of {sms} SMs: it has "
                f"{total} SMs and partitions of at least {size}"
            )
        options = {"count": [sms] * count}
        if coscheduled_sm_count:
            options["coscheduled_sm_count"] = [coscheduled_sm_count] * count
        try:
            groups, _remainder = sm.split(SMResourceOptions(**options))
        except Exception as exc:  # noqa: BLE001 - cuda.core's CUDAError and friends
            raise RuntimeError(
                f"could not partition device {device} into {count} "
                f"places of {sms} SMs: {exc}"
            ) from exc
        if len(groups) < count and n_places is not None:
            raise RuntimeError(
                f"could not partition device {device} into {n_places} places of {sms} "
                f"SMs (the driver returned {len(groups)} groups)"
            )
        if not groups:
            raise RuntimeError(
                f"could not partition device {device} into places of "
                f"{sms} SMs (the driver returned no group)"
            )
        return [
            (
                dev.create_context(ContextOptions(resources=[group])),
                int(getattr(group, "sm_count", sms)),
            )
            for group in groups[:count]
        ]
    finally:
        restored = d.cuCtxSetCurrent(prev)
        if restored[0] and sys.exc_info()[0] is None:
            raise _cu.error(restored[0], "restoring the caller's CUDA context")


def partition_stream(partition: Any) -> Any:
    """A new non-blocking ``CUstream`` in the context of ``partition`` (a
    ``StreamPartition`` whose ``native`` is a :class:`ContextPartition`)."""
    native = partition.native
    if not isinstance(native, ContextPartition):
        raise PlaceError(
            f"{partition} was made for the emulated backend and cannot run "
            "on CUDA; create green places while the CUDA backend is the "
            "default (STFLOW_BACKEND=cuda)"
        )
    d = _cu.driver
    context = d.CUcontext(native.context)
    _cu.check(d.cuCtxPushCurrent(context), f"making {partition} current")
    try:
        flags = int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)
        return _cu.check(d.cuStreamCreate(flags), f"creating a stream in {partition}")
    finally:
        _cu.check(d.cuCtxPopCurrent(), f"leaving {partition}")


def context_device(handle: int) -> tuple[int, bool]:
    """The device of ``CUcontext`` ``handle``, and whether it is that device's
    primary context."""
    d = _cu.driver
    context = d.CUcontext(handle)
    _cu.check(d.cuCtxPushCurrent(context), f"making context 0x{handle:x} current")
    try:
        device = int(_cu.check(d.cuCtxGetDevice(), f"the device of context 0x{handle:x}"))
    finally:
        _cu.check(d.cuCtxPopCurrent(), f"leaving context 0x{handle:x}")
    cu_device = _cu.check(d.cuDeviceGet(device), f"cuDeviceGet({device})")
    primary = _cu.check(
        d.cuDevicePrimaryCtxRetain(cu_device),
        f"retaining device {device}'s primary context",
    )
    try:
        return device, int(primary) == handle
    finally:
        _cu.check(
            d.cuDevicePrimaryCtxRelease(cu_device),
            f"releasing device {device}'s primary context",
        )


def set_current(handle: int) -> None:
    """Make ``CUcontext`` ``handle`` current on the calling thread."""
    d = _cu.driver
    _cu.check(
        d.cuCtxSetCurrent(d.CUcontext(handle)), f"making context 0x{handle:x} current"
    )


def locality_domain_count(device: int) -> int:
    """The locality domains of ``device`` (1 without driver support)."""
    d = _cu.driver
    attribute = getattr(
        d.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT", None
    )
    if attribute is None:
        return 1
    result = d.cuDeviceGetAttribute(attribute, device)
    if result[0]:
        return 1
    return max(1, int(result[1]))


class CudaPartitions:
    """The contract's SM-partition methods on the CUDA backend: green contexts
    through ``cuda.core``, contexts through the driver."""

    __slots__ = ()

    def locality_domain_count(self, device: int) -> int:
        """``CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT`` (1 without support)."""
        return locality_domain_count(device)

    def split_device(
        self, device: int, sm_count: int, n_places: int | None, coscheduled_sm_count: int
    ) -> list[tuple[Any, int]]:
        """Green ``cuda.core`` Contexts (:func:`split_device`)."""
        return split_device(device, sm_count, n_places, coscheduled_sm_count)

    def context_partition(self, context: Any, handle: int) -> tuple[int, Any]:
        """The device of ``CUcontext`` ``handle`` and a :class:`ContextPartition`
        keeping ``context`` alive (``None`` for the device's primary context)."""
        device, primary = context_device(handle)
        return device, None if primary else ContextPartition(context, handle)

    def enter_partition(self, native: Any) -> None:
        """Make the partition's ``CUcontext`` current (a partition made for another
        backend has none: nothing to do; its streams are refused on creation)."""
        if isinstance(native, ContextPartition):
            set_current(native.context)
