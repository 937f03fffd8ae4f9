"""Device memory of a runtime, against a per-device budget.

A runtime charges every device instance it allocates to the instance's device and
discharges it when the instance is freed (:class:`DeviceMemory`). Before an
allocation would exceed the device's budget, the runtime *evicts* instances, least
recently used first (``Instance.last_use``): an instance whose value is valid
elsewhere is dropped, the only valid copy is first written back (to the user's buffer,
else to a host instance). Instances pinned by running work are never taken: those of
the acquisition being made (and the sources of its copies), of started tasks, of
launchable graphs, and of data an open scope recorded work on.

The budget of a device is, in order: the ``memory_budget`` argument of the context,
``STFLOW_DEVICE_MEMORY_BUDGET``, else what the device has (``Backend.device_memory``:
unlimited on emulated devices). Either is a number of bytes (any integer) or a text
with an optional unit (``"512MiB"``, ``"2G"``), at most ``2**63 - 1`` bytes, or, for
the argument, a mapping device -> bytes.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.coherence import INVALID
from .._core.config import device_memory_budget, parse_size

if TYPE_CHECKING:
    from .._core.coherence import DataState, Instance
    from ..backends._base import Backend

__all__ = ["DeviceMemory", "resolve_budgets"]


def resolve_budgets(argument: Any, backend: Backend) -> dict[int, int | None]:
    """The budget of every device of ``backend`` (``None``: unlimited)."""
    count = backend.device_count
    if argument is None:
        size = device_memory_budget()
        if size is not None:
            return {device: size for device in range(count)}
        return {device: backend.device_memory(device) for device in range(count)}
    if isinstance(argument, Mapping):
        budgets = {device: backend.device_memory(device) for device in range(count)}
        for key, size in argument.items():
            device = (
                None
                if isinstance(key, (bool, np.bool_))
                or not hasattr(type(key), "__index__")
                else operator.index(key)
            )
            if device is None or not 0 <= device < count:
                raise ValueError(
                    f"memory_budget: {key!r} is not a device of the "
                    f"{backend.name} backend ({count} device(s))"
                )
            budgets[device] = parse_size(size, f"memory_budget[{device}]")
        return budgets
    size = parse_size(argument, "memory_budget")
    return {device: size for device in range(count)}


class DeviceMemory:
    """The device instances a runtime allocated, per device, against its budgets.

    Attributes
    ----------
    budgets : dict
        device -> bytes (``None``: unlimited).
    used : dict
        device -> bytes of the instances charged to it.
    limited : bool
        Some device has a budget.
    evictions, evicted_bytes, written_back_bytes : int
        What eviction did so far (``ctx.statistics()``).
    """

    __slots__ = (
        "budgets",
        "used",
        "resident",
        "evictions",
        "evicted_bytes",
        "written_back_bytes",
        "limited",
    )

    def __init__(self, budgets: dict[int, int | None]) -> None:
        self.budgets = budgets
        self.limited = any(budget is not None for budget in budgets.values())
        self.used = dict.fromkeys(budgets, 0)
        self.resident: dict[int, dict[int, tuple[DataState, Instance]]] = {
            device: {} for device in budgets
        }
        self.evictions = 0
        self.evicted_bytes = 0
        self.written_back_bytes = 0

    def over(self, device: int, nbytes: int) -> int:
        """By how many bytes ``nbytes`` more would exceed the budget of ``device``
        (``<= 0``: they fit)."""
        budget = self.budgets.get(device)
        if budget is None:
            return 0
        return self.used[device] + nbytes - budget

    def charge(
        self, state: DataState, instance: Instance, evictable: bool = True
    ) -> None:
        """Count ``instance`` against its device (an eviction candidate if
        ``evictable``)."""
        device = instance.device
        if evictable:
            self.resident[device][id(instance)] = (state, instance)
        self.used[device] += state.nbytes

    def release_private(self, device: int, nbytes: int) -> None:
        """A private (never evictable) instance of ``nbytes`` was freed."""
        if device in self.used:
            self.used[device] -= nbytes

    def discharge(self, instance: Instance, nbytes: int) -> None:
        if self.resident.get(instance.device, {}).pop(id(instance), None) is not None:
            self.used[instance.device] -= nbytes

    def candidates(
        self, device: int, pinned: set[int], pinned_states: set[int], sources: set[int]
    ) -> Iterator[tuple[DataState, Instance]]:
        """The instances of ``device`` that may be evicted, least recently used
        first; then the ``sources`` of copies about to be made (the copy is then made
        from another valid instance, or from the one the eviction writes back),
        those valid elsewhere first. ``pinned``: ids of instances,
        ``pinned_states``: ids of states that must stay."""
        ranked = []
        for state, instance in self.resident.get(device, {}).values():
            if (
                id(instance) in pinned
                or id(state) in pinned_states
                or instance.allocation is None
            ):
                continue
            if id(instance) not in sources:
                rank = 0
            elif any(
                other.state is not INVALID and other.device != device
                for other in state.instances.values()
            ):
                rank = 1
            else:
                rank = 2
            ranked.append((rank, instance.last_use, state, instance))
        ranked.sort(key=lambda entry: entry[:2])
        return ((state, instance) for _, _, state, instance in ranked)

    def clear(self) -> None:
        for device in self.resident:
            self.resident[device].clear()
            self.used[device] = 0

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{device}: {self.used[device]}/{budget}"
            for device, budget in self.budgets.items()
        )
        return f"<DeviceMemory {parts}>"
