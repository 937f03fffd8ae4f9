"""Planning a task's work: pure decisions over data states and streams.

Nothing here calls a backend. The runtime (``_engine/runtime.py``) asks for a plan, then
*enacts* it: the waits, allocations and copies the plan names, the end event, and the
release. Stream mode and graph mode use the same plans; only the backend that enacts
them differs.

Resolution, once per dependency pattern (:func:`resolve`)
    A task's dependencies become *accesses*: one per (logical data, place), the place
    resolved from the dependency's data place and the task's execution place, the
    modes of repeated dependencies OR-ed together. A written data accessed at two
    places is refused. The result, a :class:`Plan`, also keeps each access's
    :class:`~stflow._core.coherence.Instance`, so a later task with the same pattern (same
    execution place, same data, modes and places) reuses it (:func:`remember`).

Acquisition, at every submission (:func:`acquire`)
    For each access: the ordering prerequisites (``_core.deps``: the last writer, and the
    readers since when it writes), the instance's readiness, and the *moves* it needs:
    an allocation for an instance without memory, a copy into an invalid instance it
    reads (from ``DataState.valid_source``, after that source's readiness). Then the
    stream (``_streams.choose_stream``) and the waits it does not already imply
    (``_deps.needs_wait``). In the steady state of a loop (every instance valid and
    allocated, nothing in flight into it) nothing is allocated: the decision is a
    stream and, at most, a few waits.

Release, at the end of the work (:func:`release`)
    The end event becomes the data's last writer or a reader (``_core.deps``); a write
    makes its instance the only valid one (``_core.coherence``).

Holding (:func:`held`, :func:`hold`)
    A task's end event exists only when it ends, so work submitted while a task is
    started cannot be ordered after it: data a started task accesses is *held*, and
    conflicting work waits until the release (the runtime blocks the thread).

The decision fields of a plan (``stream``, ``first``, ``others``, ``waits``,
``moves``) describe the latest acquisition and are valid until the runtime's lock is
released; the work copies what it keeps (its stream).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from .._places.numbering import COMPOSITE, LAYOUT_IDS, layout_place, place_name
from ..backends._base import AFFINE, HOST, MANAGED, NO_AFFINE, USER_PAGEABLE
from .access import READ, WRITE
from .coherence import INVALID, MODIFIED, DataState, Instance
from .deps import merge_events, needs_wait
from .errors import AccessModeError, DeviceOrdinalError, PlaceError
from .reduce import REDUCE
from .streams import Pool, choose_stream

if TYPE_CHECKING:
    from ..backends._base import Event, Stream

__all__ = [
    "Access",
    "Dependency",
    "Move",
    "PLANS_KEPT",
    "Plan",
    "acquire",
    "held",
    "hold",
    "release",
    "remember",
    "resolve",
    "retarget",
]

Dependency = tuple[DataState, int, Any]
"""What resolution reads of a dependency: ``(state, mode, data place device)``; the
device is ``None`` for the affine place."""
Move = tuple["Access", "Instance | None"]
"""A move of an acquisition: the access, and the instance to copy from (``None``:
only an allocation)."""


class Access:
    """One logical data at one place, as every task of one pattern accesses it.

    Attributes
    ----------
    state : DataState
    mode : int
        ``READ``, ``WRITE`` or ``RW`` (repeated dependencies OR-ed).
    device : int
        The place of the instance (``HOST`` for a token).
    instance : Instance or None
        ``None`` for a token.
    """

    __slots__ = ("state", "mode", "device", "instance")

    def __init__(self, state: DataState, mode: int, device: int) -> None:
        self.state = state
        self.mode = mode
        self.device = device
        # A reduction gets a private instance at every acquisition (Plan.private).
        self.instance = (
            None if state.is_token or mode & REDUCE else state.instance(device)
        )

    def __repr__(self) -> str:
        return f"<Access {self.state.label} mode={self.mode} device={self.device}>"


class Plan:
    """The accesses of one dependency pattern, and the latest acquisition's decision.

    Attributes
    ----------
    accesses : tuple of Access
        The distinct accesses.
    per_dependency : tuple of Access
        The access of each dependency, in order (``accesses`` itself when no data
        repeats).
    device : int
        The execution place (``HOST`` or an ordinal).
    stream : Stream
        The stream the work runs on (decided by :func:`acquire`).
    first, others : Event or None, list of Event or None
        The prerequisites: ``first`` (the first last-writer found) and the rest.
    waits : sequence of Event
        The prerequisites the stream must be told to wait for.
    skipped : int
        The prerequisites (newest per stream) that need no wait.
    moves : list of Move or None
        Allocations and copies to enqueue before the work.
    reductions : tuple of Access
        The reduction accesses (``ld.reduce(op)``), apart from ``accesses``: they
        order against nothing and get private instances.
    private : list of Instance or None
        The private instances of the latest acquisition's reductions (the runtime
        fills them with the identity).
    """

    __slots__ = (
        "accesses",
        "per_dependency",
        "device",
        "stream",
        "first",
        "others",
        "waits",
        "skipped",
        "moves",
        "reductions",
        "private",
    )
    stream: Stream  # decided by acquire(), before anything reads it

    def __init__(
        self,
        accesses: tuple[Access, ...],
        per_dependency: tuple[Access, ...],
        device: int,
        reductions: tuple[Access, ...] = (),
    ) -> None:
        self.accesses = accesses
        self.per_dependency = per_dependency
        self.device = device
        self.reductions = reductions
        self.private: list[Instance] | None = None
        self.first: Event | None = None
        self.others: list[Event] | None = None
        self.waits: Sequence[Event] = ()
        self.skipped = 0
        self.moves: list[Move] | None = None

    def prerequisites(self) -> list[Event]:
        """Every prerequisite of the latest acquisition (``first`` first)."""
        events = [] if self.first is None else [self.first]
        if self.others:
            events.extend(self.others)
        return events

    def __repr__(self) -> str:
        return f"<Plan device={self.device} {list(self.accesses)}>"


PLANS_KEPT: Final = 1024
"""Plans a runtime keeps (by dependency pattern) before it starts over."""


def remember(
    plans: dict[tuple, Plan], key: tuple, plan: Plan, limit: int = PLANS_KEPT
) -> None:
    """Keep ``plan`` under ``key``; a full cache starts over, which also drops the
    plans of data that no longer exists (their keys never recur)."""
    if len(plans) >= limit:
        plans.clear()
    plans[key] = plan


# -- resolution -------------------------------------------------------------------


def resolve(
    dependencies: Sequence[Dependency],
    exec_device: int,
    affine_device: int,
    device_count: int,
    host_only: bool,
    what: Any,
    grid: tuple[int, ...] | None = None,
) -> Plan:
    """The plan of a dependency pattern.

    Parameters
    ----------
    dependencies : sequence of (state, mode, data place device)
        The data place device is ``None`` for the affine place.
    exec_device, affine_device : int
        The execution place, and the place of its affine memory.
    device_count : int
        Devices of the backend (ordinals are checked against it).
    host_only : bool
        Work that runs on the host (``host_launch``): only host-accessible places.
    what : object
        Names the work in error messages (formatted only when one is raised).
    grid : tuple of int, optional
        For work on a grid of places, the affine memory of each member: a
        replicated place without a grid of its own copies the data to each.
        ``affine_device`` is then ``NO_AFFINE`` when the grid has no affine place.

    Raises
    ------
    PlaceError
        A place that does not exist or cannot hold the instance.
    AccessModeError
        A written data accessed at two places.
    """
    accesses: list[Access] = []
    copies: list[Access] = []  # replicated reads beyond each first member's
    for state, mode, place in dependencies:
        if state.is_token:
            device = HOST
        elif host_only:
            device = _host_device(place, what)
        else:
            if place is None or place == AFFINE:
                if affine_device == NO_AFFINE:
                    raise PlaceError(
                        f"{what} runs on a grid without an affine data place, and a "
                        f"dependency on logical data {state.label} names no data place; "
                        "give the dependency a place (ld.rw(dplace)), build the grid "
                        "with exec_place_grid.create(..., mapper=...) or machine(), or "
                        "call grid.set_affine_data_place(dplace)"
                    )
                place = affine_device
            if place >= 0:
                if place >= device_count:
                    raise _no_such_device(place, device_count, what)
                device = place
            elif place == HOST or place == MANAGED:
                device = place
            elif place <= LAYOUT_IDS:
                members = _layout_devices(
                    place, mode, state, grid, affine_device, device_count, what
                )
                device = members[0]
                copies.extend(Access(state, mode, member) for member in members[1:])
            else:
                raise PlaceError(f"{what}: {place_name(place)} cannot hold an instance")
        if device == HOST and host_only:
            device = _host_instance(state)
        accesses.append(Access(state, mode, device))
    if any(access.mode & REDUCE for access in accesses):
        return _with_reductions(accesses + copies, exec_device, what)
    if copies:
        plan = _merge_repeated(accesses + copies, exec_device, what)
        return Plan(plan.accesses, plan.per_dependency[: len(accesses)], exec_device)
    if len(accesses) == 1 or len({id(a.state) for a in accesses}) == len(accesses):
        distinct = tuple(accesses)
        return Plan(distinct, distinct, exec_device)
    return _merge_repeated(accesses, exec_device, what)


def _no_such_device(place: int, device_count: int, what: Any) -> DeviceOrdinalError:
    return DeviceOrdinalError(
        f"{what}: invalid device id {place}: data_place.device({place}) "
        f"does not exist on this backend ({device_count} device(s))"
    )


def _host_instance(state: DataState) -> int:
    """Where a host callback (``host_launch``) finds ``state``: in the user's own
    buffer when it is pageable (``USER_PAGEABLE``), else in the host instance. A task
    on ``exec_place.host()`` gets the host instance, page-locked: the work it enqueues
    on its stream may reach it from a device."""
    reference = state.reference
    if reference is not None and reference.device == USER_PAGEABLE:
        return USER_PAGEABLE
    return HOST


def _layout_devices(
    place: int,
    mode: int,
    state: DataState,
    grid: tuple[int, ...] | None,
    affine_device: int,
    device_count: int,
    what: Any,
) -> list[int]:
    """Where a dependency at composite or replicated place number ``place`` has its
    instances: the composite place itself, or each member's memory of a replicated
    place (its own grid, else the task's grid, else the task's affine memory)."""
    layout = layout_place(place)
    if layout is None:
        raise PlaceError(
            f"{what}: the composite or replicated place of a dependency on "
            f"logical data {state.label} no longer exists"
        )
    members = layout._grid
    if members is not None:
        for member in members._members():
            if member._device >= device_count:
                raise PlaceError(
                    f"{what}: {layout!r} spans {member!r}, which does not "
                    f"exist on this backend ({device_count} device(s))"
                )
    if layout._layout_kind == COMPOSITE:
        return [place]
    if mode & (WRITE | REDUCE):
        raise AccessModeError(
            f"{what} writes logical data {state.label} at a replicated place, which "
            "holds read-only copies; use read(), or write at one place"
        )
    if members is not None:
        devices = [_affine_of(member) for member in members._members()]
    elif grid is not None:
        devices = list(grid)
    else:
        devices = [affine_device]
    distinct: list[int] = []
    for device in devices:
        if device <= LAYOUT_IDS or device == NO_AFFINE:
            raise PlaceError(
                f"{what}: a replicated place copies data into each grid "
                "member's own memory; a member whose affine place is "
                "composite or replicated has none"
            )
        if device not in distinct:
            distinct.append(device)
    return distinct


def _affine_of(member: Any) -> int:
    """The place of a scalar execution place's affine memory."""
    affine = member._affine
    return member._device if affine is None else affine._device


def _with_reductions(accesses: list[Access], exec_device: int, what: Any) -> Plan:
    """A plan whose reductions are apart from its other accesses; a task reduces
    into a data once and does nothing else with it."""
    reductions = [access for access in accesses if access.mode & REDUCE]
    others = [access for access in accesses if not access.mode & REDUCE]
    reduced = [id(access.state) for access in reductions]
    for access in reductions:
        if reduced.count(id(access.state)) > 1 or any(
            other.state is access.state for other in others
        ):
            raise AccessModeError(
                f"{what} reduces into logical data {access.state.label} and accesses "
                "it again; a task reduces into a data once and does nothing else with "
                "it (reduce in one task, read in a later one)"
            )
    if not others:
        plan = Plan((), (), exec_device)
    elif len({id(a.state) for a in others}) == len(others):
        plan = Plan(tuple(others), tuple(others), exec_device)
    else:
        plan = _merge_repeated(others, exec_device, what)
    kept = iter(plan.per_dependency)
    per_dependency = tuple(
        access if access.mode & REDUCE else next(kept) for access in accesses
    )
    return Plan(plan.accesses, per_dependency, exec_device, tuple(reductions))


def _merge_repeated(accesses: list[Access], exec_device: int, what: Any) -> Plan:
    """Merge accesses to the same data at the same place (modes combine); refuse a
    written data accessed at two places."""
    merged: list[Access] = []
    per_dependency: list[Access] = []
    by_place: dict[tuple[int, int], Access] = {}
    for access in accesses:
        key = (id(access.state), access.device)
        kept = by_place.get(key)
        if kept is None:
            kept = by_place[key] = Access(access.state, access.mode, access.device)
            merged.append(kept)
        else:
            kept.mode |= access.mode
        per_dependency.append(kept)
    first_place: dict[int, Access] = {}
    for access in merged:
        other = first_place.setdefault(id(access.state), access)
        if other is not access and (other.mode | access.mode) & WRITE:
            raise AccessModeError(
                f"{what} accesses logical data {access.state.label} at two places and "
                "writes it; use one place for data a task writes"
            )
    return Plan(tuple(merged), tuple(per_dependency), exec_device)


def _host_device(place: int | None, what: Any) -> int:
    if place is None or place == AFFINE or place == HOST:
        return HOST
    if place == MANAGED:
        return MANAGED
    raise PlaceError(
        f"{what}: {place_name(place)} is not host-accessible; a host "
        "callback sees data in data_place.host(), .managed() or .affine()"
    )


# -- acquisition ------------------------------------------------------------------


def acquire(
    plan: Plan, pool: Pool, completed: Callable[[Event], bool], tick: int
) -> Stream | None:
    """Decide what a submission of ``plan`` on ``pool`` needs (see the module).

    ``completed(event)`` tells events that have completed: copies into an instance
    that completed order nothing any more and are forgotten. Fills the decision
    fields of ``plan`` but the waits; returns the stream, or ``None`` when started
    work holds data the plan conflicts with (the caller waits for its release, then
    asks again). The caller may decide again (after making room in memory, say),
    then calls :func:`retarget` once, for the stream the work runs on. ``tick``
    stamps the instances used (``Instance.last_use``).
    """
    first: Event | None = None
    others: list[Event] | None = None
    moves: list[Move] | None = None
    for access in plan.accesses:
        state = access.state
        if (
            state.writing is not None
            or state.pending is not None
            or (state.reading and access.mode & WRITE)
        ):
            return None
        tracker = state.tracker
        writer = tracker.writer
        if writer is not None:
            if first is None:
                first = writer
            elif writer is not first:
                if others is None:
                    others = [writer]
                else:
                    others.append(writer)
        if access.mode & WRITE and tracker.readers:
            if others is None:
                others = list(tracker.readers.values())
            else:
                others.extend(tracker.readers.values())
        instance = access.instance
        if instance is None:  # a token: ordering only
            continue
        instance.last_use = tick
        if instance.state is INVALID:
            source = state.valid_source(access.device) if access.mode & READ else None
            if source is not None or instance.allocation is None:
                if moves is None:
                    moves = [(access, source)]
                else:
                    moves.append((access, source))
                if source is not None and source.ready:
                    if others is None:
                        others = list(source.ready.values())
                    else:
                        others.extend(source.ready.values())
        elif instance.ready:
            ready = instance.ready
            if all(map(completed, ready.values())):
                ready.clear()
            elif others is None:
                others = list(ready.values())
            else:
                others.extend(ready.values())
    stream = choose_stream(pool, first, others)
    plan.stream = stream
    plan.first = first
    plan.others = others
    plan.moves = moves
    return stream


def retarget(plan: Plan, stream: Stream) -> None:
    """Run the latest acquisition of ``plan`` on ``stream``: the waits it needs there
    (``needs_wait`` remembers them: call it once, for the stream the work runs on)."""
    plan.stream = stream
    first = plan.first
    others = plan.others
    if others is not None:
        events = merge_events([first, *others] if first is not None else others)
        waits = [event for event in events if needs_wait(stream, event)]
        plan.waits = waits
        plan.skipped = len(events) - len(waits)
    elif first is None:
        plan.waits = ()
        plan.skipped = 0
    elif needs_wait(stream, first):
        plan.waits = (first,)
        plan.skipped = 0
    else:
        plan.waits = ()
        plan.skipped = 1


def held(plan: Plan) -> bool:
    """True when started, not yet ended work holds data ``plan`` conflicts with."""
    for access in plan.accesses:
        state = access.state
        if state.writing is not None or (state.reading and access.mode & WRITE):
            return True
    return False


def hold(plan: Plan, owner: Any) -> None:
    """Mark the data of ``plan`` as held by ``owner`` (started work) until
    :func:`release`."""
    for access in plan.accesses:
        if access.mode & WRITE:
            access.state.writing = owner
        else:
            access.state.reading += 1


def release(plan: Plan, event: Event, owner: Any) -> None:
    """Record that the work of ``plan`` ended at ``event``: ordering (``_core.deps``) for
    every access, coherence (``_core.coherence``) for the writes; what ``owner`` held (if
    not ``None``) is free again."""
    for access in plan.accesses:
        state = access.state
        mode = access.mode
        state.tracker.release(mode, event)
        if mode & WRITE:
            instance = access.instance
            if instance is not None and instance.state is not MODIFIED:
                state.written(instance)
            if owner is not None:
                state.writing = None
        elif owner is not None:
            state.reading -= 1
