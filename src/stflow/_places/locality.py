"""Locality domains: the parts of a device with their own memory and SMs.

Recent GPUs may expose several locality domains per device (CUDA 13.4 drivers report
them as ``CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT``). A locality-domain execution
place runs on a domain's SMs and a locality-domain data place allocates memory local
to it. Where the driver (or the bindings) cannot answer, as with CUDA 13.3 and on a
backend without CUDA contexts (``backend.cuda_contexts``: the emulated backend), every
valid device is **one** domain, the whole device: the places then behave exactly like
``exec_place.device(d)`` / ``data_place.device(d)`` (same streams, same memory) while
keeping their domain ordinal in ``kind`` and ``repr``, so code written for several
domains runs everywhere.

Known limit: with a driver that reports several domains, stflow still runs a domain
place on the whole device and allocates plain device memory (the placement is a
label, not yet an SM or memory partition).

Ordinals are checked when a factory is called (I-8): the device against the default
backend's device count, the domain against :func:`locality_domain_count`.
"""

from __future__ import annotations

from typing import Any

from .._errors import PlaceError
from .places import _default_backend, check_device_ordinal, data_place, exec_place

__all__ = ["SM_SPLITS", "locality_domain_count", "locality_domain_places"]

SM_SPLITS = ("backfill", "aligned", "fine")
"""How the SMs of a device are shared between its domains' execution places."""


def locality_domain_count(dev_id: int = 0) -> int:
    """The number of locality domains of device ``dev_id`` (at least 1).

    Raises
    ------
    TypeError
        ``dev_id`` is not an ``int``.
    PlaceError
        ``dev_id`` is not a device of the default backend (a ``ValueError``).
    """
    device = check_device_ordinal(dev_id, "locality_domain_count")
    backend = _default_backend()
    check_device_ordinal(device, "locality_domain_count", backend.device_count)
    if backend.cuda_contexts:
        from ..backends import _cuda_green
        return _cuda_green.locality_domain_count(device)
    return 1


def _check_domain(dev_id: Any, domain_id: Any, what: str) -> tuple[int, int]:
    device = check_device_ordinal(dev_id, what)
    count = locality_domain_count(device)
    if isinstance(domain_id, bool) or not isinstance(domain_id, int):
        raise TypeError(f"{what}: the domain ordinal must be an int, got "
                        f"{type(domain_id).__name__}")
    if not 0 <= domain_id < count:
        raise PlaceError(f"{what}: locality domain {domain_id} does not exist on device "
                         f"{device}; valid ordinals are 0..{count - 1} "
                         f"(locality_domain_count({device}) == {count})")
    return device, int(domain_id)


def _check_split(sm_split: Any) -> str:
    if sm_split not in SM_SPLITS:
        raise ValueError(f"sm_split must be one of {', '.join(map(repr, SM_SPLITS))}, "
                         f"got {sm_split!r}")
    return str(sm_split)


class _domain_exec_place(exec_place):
    """An execution place of one locality domain (the whole device without driver
    support: it shares the device's streams)."""

    __slots__ = ("_domain", "_sm_split")
    _domain: int
    _sm_split: str

    def __repr__(self) -> str:
        return (f"exec_place(locality_domain(dev={self._device},id={self._domain}), "
                f"sm_split={self._sm_split!r})")


class _domain_data_place(data_place):
    """Memory local to one locality domain (plain device memory without driver
    support)."""

    __slots__ = ("_domain",)
    _domain: int

    @property
    def kind(self) -> str:
        return f"locality_domain(dev={self._device},id={self._domain})"

    def __repr__(self) -> str:
        return f"data_place({self.kind!r})"


def domain_data_place(dev_id: int, domain_id: int) -> data_place:
    """``data_place.locality_domain(dev_id, domain_id)``."""
    device, domain = _check_domain(dev_id, domain_id, "data_place.locality_domain")
    place = _domain_data_place._make(device)
    assert isinstance(place, _domain_data_place)
    place._domain = domain
    return place


def domain_exec_place(dev_id: int, domain_id: int, sm_split: str = "backfill"
                      ) -> exec_place:
    """``exec_place.locality_domain(dev_id, domain_id, sm_split)``."""
    split = _check_split(sm_split)
    device, domain = _check_domain(dev_id, domain_id, "exec_place.locality_domain")
    place = _domain_exec_place._make(device)
    assert isinstance(place, _domain_exec_place)
    place._domain = domain
    place._sm_split = split
    place._affine = domain_data_place(device, domain)
    return place


def locality_domain_places(dev_id: int = 0, sm_split: str = "backfill"
                           ) -> list[exec_place]:
    """One execution place per locality domain of device ``dev_id``, in domain order
    (what ``exec_place_grid.locality_domains`` arranges in a rank-1 grid)."""
    split = _check_split(sm_split)
    device = check_device_ordinal(dev_id, "exec_place_grid.locality_domains")
    return [domain_exec_place(device, domain, split)
            for domain in range(locality_domain_count(device))]
