"""Eviction: room on a device within its memory budget (the runtime's policy).

The accounting is ``_memory.DeviceMemory``; this module decides what goes. Before a
plan's decisions are enacted, :func:`room_for` makes room for the instances it
allocates, so that its prerequisites include the write-backs the evictions make;
:func:`make_room` evicts instances of a device, least recently used first
(``Instance.last_use``): an instance valid elsewhere is dropped, the only valid copy is
written back first (to the user's buffer, else a host instance), and the free is
ordered after every use. Pinned (never evicted): the instances of the acquisition
being made and of started tasks, the data of launchable graphs, of open scopes and of
reductions being combined. Partial results of reductions waiting on the device are
combined on the host when evicting is not enough. Every function takes the runtime;
the lock is held.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._core.access import READ
from .._core.coherence import INVALID
from .._core.errors import OutOfMemoryError
from .._core.reduce import reduce_op
from .._instruments.seam import byte_size_text
from ..backends._base import HOST
from . import reductions as reductions

if TYPE_CHECKING:
    from .._core.coherence import DataState, Instance
    from .._core.plan import Plan
    from ..backends._base import Event
    from .registry import DataRegistry

__all__ = ["Owner", "make_room", "room_for"]


class HeldWork(Protocol):
    """Started work the runtime holds until it ends (``Runtime.started``): a task,
    a launchable graph between its launches."""

    def held_plan(self) -> Plan | None:
        """The plan whose instances the work uses, if any."""

    def held_states(self) -> Iterable[DataState]:
        """Data the work holds besides its plan's (a launchable graph's)."""

    def held_private(self) -> Sequence[Instance]:
        """The private instances the work reduces into."""


class Owner(reductions.Owner, Protocol):
    """What eviction uses of the runtime (``_runtime.Runtime``), besides what
    reductions do."""

    data: DataRegistry
    started: dict[Any, int]
    """Started work (tasks, launchable graphs) -> its thread."""

    def copy_into(
        self,
        state: DataState,
        target: Instance,
        source: Instance,
        prerequisites: list[Event],
        label: str,
        keep: bool = True,
        copy_title: str | None = None,
    ) -> Event:
        """An internal copy, ordered after ``prerequisites``."""


def make_room(
    rt: Owner,
    device: int,
    nbytes: int,
    plan: Plan | None,
    keep: tuple[Instance, ...],
    what: Any,
    exhausted: OutOfMemoryError | None = None,
) -> None:
    """Evict instances of ``device``, least recently used first, until
    ``nbytes`` more fit in its budget (``exhausted``: the device itself ran out;
    evict ``nbytes`` and wait until the memory is free).

    Raises
    ------
    OutOfMemoryError
        ``plan``'s own data at ``device`` exceeds the budget, or not enough can
        be evicted; nothing was changed for the work being acquired.
    """
    memory = rt.memory
    budget = memory.budgets.get(device)
    own = _working_set(plan, device, nbytes)
    if budget is not None and own > budget:
        raise OutOfMemoryError(
            f"{what} needs {byte_size_text(own)} on device {device} (its data at "
            f"that place: {_data_sizes(plan, device, nbytes)}), more than the "
            f"device's memory budget of {byte_size_text(budget)}; split the data "
            "or raise the budget (memory_budget=, STFLOW_DEVICE_MEMORY_BUDGET)"
        )
    needed = nbytes if exhausted is not None else memory.over(device, nbytes)
    if exhausted is not None and rt.mode.recording():
        raise OutOfMemoryError(
            f"{what}: device {device} is out of memory while "
            "work is recorded into a graph (memory an eviction "
            "frees is released only when the graph has run)"
        ) from exhausted
    pinned, pinned_states = _pinned(rt, plan, ())
    sources = {id(instance) for instance in keep}
    freed: list[Event] = []
    for state, instance in memory.candidates(device, pinned, pinned_states, sources):
        if needed <= 0:
            break
        freed.append(_evict(rt, state, instance))
        needed -= state.nbytes
    if needed > 0 and exhausted is None:
        needed = _combine_pending_on(rt, device, needed, what)
    if needed > 0:
        used = memory.used[device]
        limit = (
            "the device's memory"
            if exhausted is not None or budget is None
            else f"its memory budget of {byte_size_text(budget)}"
        )
        partials = _partials_on(rt, device)
        held = f" (here: {partials})" if partials else ""
        raise OutOfMemoryError(
            f"{what} needs {byte_size_text(nbytes)} more on device {device}, where "
            f"{byte_size_text(used)} are in use and nothing more can be evicted "
            f"within {limit}: the rest belongs to running tasks, launchable graphs, "
            f"open scopes or partial results of reductions not combined yet{held}"
        ) from exhausted
    if exhausted is not None:
        for event in freed:  # the memory is free once the frees ran
            rt.backend.synchronize(event)


def room_for(rt: Owner, plan: Plan, what: Any) -> bool:
    """Before ``plan``'s decisions are enacted: make room for the instances it
    allocates (its moves' targets without memory, its reductions' private
    instances). Returns True when something was evicted or combined: the caller
    decides again, after what that changed (a write-back its work must follow)."""
    needs: dict[int, int] = {}
    for access, _ in plan.moves or ():
        instance = access.instance
        if instance is not None and instance.allocation is None and access.device >= 0:
            needs[access.device] = needs.get(access.device, 0) + access.state.nbytes
    for access in plan.reductions:
        if access.device >= 0:
            needs[access.device] = needs.get(access.device, 0) + access.state.nbytes
    memory = rt.memory
    changed = False
    for device, nbytes in needs.items():
        if memory.over(device, nbytes) > 0:
            before = (memory.evictions, memory.used[device])
            make_room(rt, device, nbytes, plan, (), what)
            changed = changed or before != (memory.evictions, memory.used[device])
    return changed


def _combine_pending_on(rt: Owner, device: int, needed: int, what: Any) -> int:
    """Free partial results of reductions held on ``device`` by combining them
    on the host (none still being reduced into or used); returns the bytes still
    needed."""
    for state in list(rt.data.states.values()):
        if needed <= 0:
            break
        pending = state.pending
        if (
            pending is None
            or pending.holders
            or pending.combining
            or state.writing is not None
            or state.reading
            or state.scope is not None
        ):
            continue
        held = sum(
            state.nbytes for instance, _ in pending.partials if instance.device == device
        )
        if not held:
            continue
        with rt.mode.root_level():
            reductions.combine(rt, state, pending, HOST, what)
        needed -= held
    return needed


def _pinned(
    rt: Owner, plan: Plan | None, keep: tuple[Instance, ...]
) -> tuple[set[int], set[int]]:
    """Ids of the instances and of the data eviction must leave alone: ``keep``
    (sources of copies about to be made), the instances of ``plan`` and of
    started tasks, and the data of launchable graphs and open scopes."""
    instances = {id(instance) for instance in keep}
    states: set[int] = set()
    plans = [] if plan is None else [plan]
    for owner in rt.started:
        work: HeldWork = owner
        started_plan = work.held_plan()
        if started_plan is not None:
            plans.append(started_plan)
        states.update(id(state) for state in work.held_states())
    for held_plan in plans:
        for access in held_plan.accesses:
            if access.instance is not None:
                instances.add(id(access.instance))
    states.update(id(state) for state in rt.mode.held_states())
    states.update(id(state) for state in rt.combining)
    return instances, states


def _evict(rt: Owner, state: DataState, instance: Instance) -> Event:
    """Drop ``instance`` (writing its value back first if it is the only valid
    copy) and free its memory after every use; returns the free's event."""
    with rt.mode.root_level():  # the data is not the open scopes'
        rt.mode.touch(state)
        return _evicted(rt, state, instance)


def _evicted(rt: Owner, state: DataState, instance: Instance) -> Event:
    """:func:`_evict` at the root level."""
    memory = rt.memory
    nbytes = state.nbytes
    if not any(
        other is not instance and other.state is not INVALID
        for other in state.instances.values()
    ):
        reference = state.reference
        target = (
            reference
            if reference is not None and reference is not instance
            else state.instance(HOST)
        )
        prerequisites = [*state.tracker.prerequisites(READ), *instance.ready.values()]
        rt.copy_into(state, target, instance, prerequisites, state.label)
        memory.written_back_bytes += nbytes
    stream = rt.stream_on(rt.current_pools(), instance.device, state.uses())
    allocation = instance.allocation
    assert allocation is not None
    rt.backend.free(allocation, stream)
    instance.allocation = None
    instance.state = INVALID
    instance.ready.clear()
    memory.discharge(instance, nbytes)
    memory.evictions += 1
    memory.evicted_bytes += nbytes
    return rt.backend.record(stream)


def _working_set(plan: Plan | None, device: int, nbytes: int) -> int:
    """Bytes of ``plan``'s data at ``device``, its reductions' private instances
    included (``nbytes`` without a plan)."""
    if plan is None:
        return nbytes
    return sum(state.nbytes for state, _ in _plan_data(plan, device))


def _data_sizes(plan: Plan | None, device: int, nbytes: int) -> str:
    if plan is None:
        return byte_size_text(nbytes)
    return ", ".join(
        f"{state.label} {byte_size_text(state.nbytes)}{role}"
        for state, role in _plan_data(plan, device)
    )


def _plan_data(plan: Plan, device: int) -> list[tuple[DataState, str]]:
    """The data of ``plan`` at ``device`` that needs memory there, each with how
    (``""``: its instance; a reduction: a private instance for the partial
    result)."""
    found = [
        (access.state, "")
        for access in plan.accesses
        if access.device == device and access.instance is not None
    ]
    found += [
        (
            access.state,
            f" (the partial result of its reduce({reduce_op(access.mode).name!r}))",
        )
        for access in plan.reductions
        if access.device == device
    ]
    return found


def _partials_on(rt: Owner, device: int) -> str:
    """The partial results of reductions held on ``device`` (pending, or of
    started tasks), named with their bytes; ``""`` when there are none."""
    parts = []
    for state in list(rt.data.states.values()):
        pending = state.pending
        if pending is None:
            continue
        count = sum(1 for instance, _ in pending.partials if instance.device == device)
        for owner in pending.holders:
            work: HeldWork = owner
            private = work.held_private()
            count += sum(
                1
                for instance in private
                if instance.device == device and instance.allocation is not None
            )
        if count:
            parts.append(f"{state.label} {count} x {byte_size_text(state.nbytes)}")
    return ", ".join(parts)
