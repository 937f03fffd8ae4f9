"""SM partitions of virtual devices: green contexts on the emulated and null backends.

A virtual device has :data:`EMULATED_SM_COUNT` SMs, split in multiples of
:data:`EMULATED_SM_GRANULARITY`. A partition is an :class:`EmulatedContext`, the
stand-in for a CUDA green context: places bound to it get streams labelled with
their partition (``stream.partition``); work is not throttled. Every virtual
device is one locality domain (the contract's default).

:class:`EmulatedPartitions` implements the contract's SM-partition methods
(``backends/_base.py``) for the backends that mix it in.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

from .._core.errors import PlaceError

__all__ = [
    "EMULATED_SM_COUNT",
    "EMULATED_SM_GRANULARITY",
    "EmulatedContext",
    "EmulatedPartitions",
    "split_sizes",
]

EMULATED_SM_COUNT = 32
"""SMs of a virtual device."""

EMULATED_SM_GRANULARITY = 2
"""Partitions hold a multiple of this many SMs (the minimum partition)."""

_handles = itertools.count(0x6C0000)
_contexts: weakref.WeakValueDictionary[int, EmulatedContext] = (
    weakref.WeakValueDictionary()
)
"""The live contexts by handle (process-wide, like ``CUcontext`` values)."""


class EmulatedContext:
    """The stand-in for a CUDA green context: an SM partition of a virtual device
    (what ``green_places`` returns as ``backing_context`` on these backends).

    Attributes
    ----------
    handle : int
        An opaque id, accepted by ``exec_place.from_context`` like a ``CUcontext``.
    device_id : int
        The virtual device.
    sm_count : int
        Its SMs.
    is_green : bool
        Always ``True``.
    """

    __slots__ = ("handle", "device_id", "sm_count", "__weakref__")
    is_green = True

    def __init__(self, device_id: int, sm_count: int) -> None:
        self.handle = next(_handles)
        self.device_id = device_id
        self.sm_count = sm_count
        _contexts[self.handle] = self

    def __repr__(self) -> str:
        return (
            f"EmulatedContext(handle=0x{self.handle:x}, device_id={self.device_id}, "
            f"sm_count={self.sm_count})"
        )


def split_sizes(device: int, sm_count: int, n_places: int | None) -> list[int]:
    """The SM counts of the partitions of ``sm_count`` SMs each (rounded up to the
    granularity): ``n_places`` of them, or as many as fit.

    Raises
    ------
    RuntimeError
        Fewer than ``n_places`` fit on a virtual device.
    """
    granule = EMULATED_SM_GRANULARITY
    size = max(granule, -(-sm_count // granule) * granule)
    fit = EMULATED_SM_COUNT // size
    wanted = fit if n_places is None else n_places
    if wanted > fit or fit == 0:
        raise RuntimeError(
            f"could not partition device {device} into {wanted} places of {sm_count} "
            f"SMs: a virtual device has {EMULATED_SM_COUNT} SMs, partitions are "
            f"multiples of {granule}, so {fit} fit; ask for fewer or smaller places"
        )
    return [size] * wanted


class EmulatedPartitions:
    """The contract's SM-partition methods for backends of virtual devices."""

    __slots__ = ()
    name: str

    def split_device(
        self, device: int, sm_count: int, n_places: int | None, coscheduled_sm_count: int
    ) -> list[tuple[Any, int]]:
        """:class:`EmulatedContext` partitions (``Backend.split_device``); the
        co-scheduled count is a lower bound of each partition's SMs."""
        sizes = split_sizes(device, max(sm_count, coscheduled_sm_count), n_places)
        return [(EmulatedContext(device, sms), sms) for sms in sizes]

    def context_partition(self, context: Any, handle: int) -> tuple[int, Any]:
        """The device of the :class:`EmulatedContext` of ``handle``, which is its
        own partition's ``native`` (``Backend.context_partition``)."""
        emulated = _contexts.get(handle)
        if emulated is None:
            raise PlaceError(
                f"exec_place.from_context: 0x{handle:x} is not a context of the "
                f"{self.name} backend; there, pass a backing_context of a green place "
                "(green_places(...)[i].backing_context) or its .handle"
            )
        return emulated.device_id, emulated
