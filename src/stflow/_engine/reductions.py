"""Reductions at work (``ld.reduce(op)``; the operations are in ``_core/reduce.py``).

:func:`begin` gives each reduction of an acquisition a private instance filled with
the operation's identity; :func:`end` keeps the partial result (``DataState.pending``)
at the work's end event, and in a stackable context's scopes combines it at once (a
recording may run many times). :func:`flush` combines the pending results before any
other access, once the tasks reducing have ended: :func:`combine` folds each device's
partial results into one of them, then those into the instance at the next reader's
place, where the data's current value is brought first. Every function takes the
runtime; the lock is held.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from .._core.access import WRITE
from .._core.coherence import INVALID, Instance
from .._core.errors import OutOfMemoryError, ScopeError
from .._core.reduce import Reduction, reduce_op
from ..backends._base import HOST

if TYPE_CHECKING:
    from .._core.coherence import DataState
    from .._core.plan import Plan
    from .._core.streams import StreamPools
    from .._instruments.seam import WorkRecord
    from ..backends._base import Backend, Event, Stream
    from .memory import DeviceMemory
    from .mode import Mode

__all__ = ["Owner", "begin", "combine", "end", "flush", "free_private", "prepare"]

_thread = threading.get_ident


class Owner(Protocol):
    """What reductions (and eviction) use of the runtime (``_runtime.Runtime``)."""

    backend: Backend
    memory: DeviceMemory
    mode: Mode
    combining: list[DataState]
    """Data whose reductions are being combined (eviction leaves them alone)."""

    def allocate(
        self,
        state: DataState,
        instance: Instance,
        stream: Stream,
        record: WorkRecord | None,
        plan: Plan | None,
        what: Any,
        keep: tuple[Instance, ...] = (),
        private: bool = False,
    ) -> None:
        """Memory for ``instance`` within its device's budget."""

    def copy_instance(
        self,
        state: DataState,
        target: Instance,
        source: Instance,
        stream: Stream,
        record: WorkRecord | None,
    ) -> None:
        """Enqueue the copy of ``source`` into ``target`` (both allocated)."""

    def stream_on(self, pools: StreamPools, device: int, events: list[Event]) -> Stream:
        """A stream of place ``device`` ordered after ``events``."""

    def current_pools(self) -> StreamPools:
        """The streams of the calling thread's recording level."""

    def wait_for_conflicts(
        self, accesses: list[tuple[DataState, int]], what: Any
    ) -> None:
        """Block while another thread's started work holds conflicting data."""

    def block(
        self,
        thread: int | None,
        what: Any,
        state: DataState | None = None,
        holder: Any = None,
    ) -> None:
        """Wait until held work is released (``ScopeError`` on a cycle)."""

    def wake(self) -> None:
        """Wake the threads waiting for held data."""


def prepare(rt: Owner, plan: Plan, what: Any) -> bool:
    """Combine what ``plan``'s reductions must not join: a pending reduction with
    another operation than the new one (combined into the place of the new
    reduction), and any pending reduction when the reduction is recorded in a
    stackable context's scope (combined at once, in a recording that may run many
    times, it must not combine what came before: that is combined at the root).

    Combining may wait for other threads (their tasks reducing, their work holding
    the data), and meanwhile another thread may begin a reduction with yet another
    operation: after every combination all of the plan's reductions are checked
    again, so that on return (the lock still held) none of them has anything
    pending it must not join. Returns True when something was combined."""
    recording = rt.mode.combines_at_once()
    flushed = False
    while True:
        for access in plan.reductions:
            pending = access.state.pending
            if pending is not None and (recording or pending.mode != access.mode):
                flush(rt, access.state, access.device, what)
                flushed = True
                break
        else:
            return flushed


def begin(
    rt: Owner,
    plan: Plan,
    stream: Stream,
    owner: Any,
    record: WorkRecord | None,
    what: Any,
) -> None:
    """Private instances for ``plan``'s reductions, filled with the identity on
    ``stream`` (``plan.private``); a started ``owner`` holds the reductions.
    :func:`prepare` ran under the same hold of the lock: a pending reduction of
    the data has the same operation, and the new partial result joins it."""
    private: list[Instance] = []
    me = _thread()
    backend = rt.backend
    for access in plan.reductions:
        state = access.state
        instance = Instance(access.device)
        # First the memory: making room may combine the data's pending results.
        try:
            rt.allocate(state, instance, stream, record, plan, what, private=True)
        except BaseException:  # the reductions begun so far are undone
            _undo(rt, plan, private, owner, stream)
            raise
        pending = state.pending
        if pending is None:
            pending = state.pending = Reduction(access.mode)
        elif pending.mode != access.mode:
            # A partial result combined with another operation than its own would
            # be wrong (an identity of max, -inf, summed): never join.
            private.append(instance)
            _undo(rt, plan, private, owner, stream)
            raise RuntimeError(
                f"stflow internal error: {what} would join the pending "
                f"reduce({pending.op.name!r}) of logical data {state.label} with "
                f"reduce({reduce_op(access.mode).name!r}); please report it"
            )
        allocation = instance.allocation
        assert allocation is not None and state.dtype is not None
        backend.fill(
            allocation.ptr,
            state.nbytes,
            reduce_op(access.mode).pattern(state.dtype),
            stream,
        )
        if owner is not None:
            pending.holders[owner] = me
        private.append(instance)
    plan.private = private


def _undo(
    rt: Owner, plan: Plan, private: list[Instance], owner: Any, stream: Stream
) -> None:
    """Undo the reductions of ``plan`` begun so far (their ``private``
    instances)."""
    for begun, made in zip(plan.reductions, private):
        if begun.state.pending is not None:
            begun.state.pending.holders.pop(owner, None)
        free_private(rt, made, begun.state.nbytes, stream)


def end(
    rt: Owner,
    plan: Plan,
    event: Event,
    owner: Any,
    private: list[Instance] | None,
    ident: int,
) -> None:
    """The partial results of ``plan``'s reductions are complete at ``event``.
    Inside a stackable context's scopes, where a recording may run many times,
    they are combined at once."""
    if private is None:
        private = plan.private
    assert private is not None
    at_once = rt.mode.combines_at_once()
    for access, instance in zip(plan.reductions, private):
        state = access.state
        pending = state.pending
        assert pending is not None
        pending.partials.append((instance, event))
        if owner is not None:
            pending.holders.pop(owner, None)
        if at_once:
            flush(rt, state, access.device, f"work {ident}", in_place=True)
    rt.wake()


def flush(
    rt: Owner, state: DataState, device: int | None, what: Any, in_place: bool = False
) -> None:
    """Combine the pending reductions of ``state`` into its instance at
    ``device`` (``None``: where the first partial result is), once the tasks
    reducing are ended. Partial results from outside the calling thread's open
    scopes are combined at the root level, unless ``in_place``.

    Waiting for the tasks reducing releases the lock: meanwhile another thread may
    combine them and begin new reductions (with another operation, say). Those
    are combined too, so that on return nothing is pending (the lock held)."""
    me = _thread()
    while True:
        pending = state.pending
        if pending is None:
            return
        if not pending.partials and not pending.holders:
            state.pending = None  # reductions begun, then undone
            return
        while pending.holders:
            for holder, thread in pending.holders.items():
                if thread == me:
                    raise ScopeError(
                        f"{what} needs the reductions into logical data "
                        f"{state.label} combined, but {holder._label()} (started, "
                        "not yet ended on this thread) reduces into it; end that "
                        "task first"
                    )
            holder, thread = next(iter(pending.holders.items()))
            rt.block(thread, what, state, holder)
        rt.wait_for_conflicts([(state, WRITE)], what)
        if state.pending is not pending:
            continue  # another thread combined them
        if in_place:
            combine(rt, state, pending, device, what)
        else:
            with rt.mode.root_level():
                combine(rt, state, pending, device, what)
        return


def combine(
    rt: Owner, state: DataState, pending: Reduction, device: int | None, what: Any
) -> None:
    """Combine ``pending`` into ``state``: per device, its partial results into
    the first of them; then each device's into the instance at ``device``, where
    the data's current value is brought first (the identity if it has none)."""
    pending.combining = True
    rt.combining.append(state)
    try:
        _combine_into(rt, state, pending, device, what)
    finally:
        rt.combining.remove(state)


def _combine_into(
    rt: Owner, state: DataState, pending: Reduction, device: int | None, what: Any
) -> None:
    op = pending.op
    dtype = state.dtype
    assert dtype is not None
    backend = rt.backend
    pools = rt.current_pools()
    if device is None:
        device = pending.partials[0][0].device if pending.partials else HOST
    # 1. On each other device, its partial results into the first of them.
    _combine_per_device(rt, state, pending, device)
    # 2. The memory: the instance at ``device``, and there a copy of each other
    #    device's result (all allocated before anything is enqueued).
    heads = pending.partials
    target = state.instance(device)
    source = state.valid_source(device) if target.state is INVALID else None
    prerequisites = [
        *state.tracker.prerequisites(WRITE),
        *target.ready.values(),
        *(source.ready.values() if source is not None else ()),
        *(event for _, event in heads),
    ]
    stream = rt.stream_on(pools, device, prerequisites)
    try:
        moved, scratch = _allocate_for_combining(
            rt, state, heads, target, device, stream, what
        )
    except OutOfMemoryError:
        if device == HOST:
            raise
        # The device is full (of these partial results, maybe): combine on the
        # host, from where the next reader imports the value.
        _combine_into(rt, state, pending, HOST, what)
        return
    # 3. The work, in stream order.
    mode = rt.mode
    recording = mode.recording()
    if recording:
        mode.combining(state, device if source is None else source.device)
    accumulator = target if scratch is None else scratch
    assert accumulator.allocation is not None
    if source is not None:
        rt.copy_instance(state, accumulator, source, stream, None)
    elif target.state is INVALID:  # never written: start from identity
        backend.fill(accumulator.allocation.ptr, state.nbytes, op.pattern(dtype), stream)
    elif scratch is not None:
        rt.copy_instance(state, scratch, target, stream, None)
    _combine_heads(
        rt,
        state,
        pending,
        accumulator,
        moved[1:] if scratch is not None else moved,
        device,
        stream,
    )
    if scratch is not None:
        rt.copy_instance(state, target, scratch, stream, None)
    event = backend.record(stream)
    state.released(target, WRITE, event)
    if recording:
        mode.wrote(state, target)
    for instance in [instance for instance, _ in heads] + moved:
        free_private(rt, instance, state.nbytes, stream)
    state.pending = None
    rt.wake()


def _allocate_for_combining(
    rt: Owner,
    state: DataState,
    heads: list[tuple[Instance, Any]],
    target: Instance,
    device: int,
    stream: Stream,
    what: Any,
) -> tuple[list[Instance], Instance | None]:
    """The memory :func:`_combine_into` needs at ``device``, all allocated before
    anything is enqueued: ``target``'s, a dense scratch instance when ``target`` is
    a strided user buffer, and a copy of each other device's result. Returns the
    private instances (the scratch first) and the scratch. On ``OutOfMemoryError``
    the private ones are freed before it propagates."""
    moved: list[Instance] = []
    scratch: Instance | None = None
    try:
        if target.allocation is None:
            rt.allocate(state, target, stream, None, None, what)
        assert target.allocation is not None
        if target.allocation.strides is not None:  # a strided user buffer: combine
            scratch = Instance(device)  # densely, then copy it back
            rt.allocate(state, scratch, stream, None, None, what, private=True)
            moved.append(scratch)
        for instance, _ in heads:
            if instance.device != device:
                copy = Instance(device)
                rt.allocate(state, copy, stream, None, None, what, private=True)
                moved.append(copy)
    except OutOfMemoryError:
        for copy in moved:
            free_private(rt, copy, state.nbytes, stream)
        raise
    return moved, scratch


def _combine_heads(
    rt: Owner,
    state: DataState,
    pending: Reduction,
    accumulator: Instance,
    copies: list[Instance],
    device: int,
    stream: Stream,
) -> None:
    """Combine every partial result of ``pending`` into ``accumulator`` on
    ``stream``; another device's result is first moved into the next of ``copies``."""
    dtype = state.dtype
    assert dtype is not None and accumulator.allocation is not None
    count = state.nbytes // dtype.itemsize
    spare = iter(copies)
    for instance, _ in pending.partials:
        if instance.device != device:  # another device's result, moved first
            copy = next(spare)
            rt.copy_instance(state, copy, instance, stream, None)
            instance = copy
        assert instance.allocation is not None
        rt.backend.combine(
            accumulator.allocation.ptr,
            instance.allocation.ptr,
            count,
            dtype,
            pending.op.name,
            stream,
        )


def _combine_per_device(
    rt: Owner, state: DataState, pending: Reduction, device: int
) -> None:
    """On every device but ``device`` holding several partial results, combine them
    into the first; ``pending`` then holds that one only (a failure later loses
    nothing)."""
    op = pending.op
    dtype = state.dtype
    assert dtype is not None
    count = state.nbytes // dtype.itemsize
    groups: dict[int, list[tuple[Instance, Event]]] = {}
    for instance, event in pending.partials:
        groups.setdefault(instance.device, []).append((instance, event))
    for place, items in groups.items():
        if place == device or len(items) == 1:
            continue
        stream = rt.stream_on(rt.current_pools(), place, [event for _, event in items])
        first = items[0][0]
        assert first.allocation is not None
        for instance, _ in items[1:]:
            assert instance.allocation is not None
            rt.backend.combine(
                first.allocation.ptr,
                instance.allocation.ptr,
                count,
                dtype,
                op.name,
                stream,
            )
        done = rt.backend.record(stream)
        for instance, _ in items[1:]:
            free_private(rt, instance, state.nbytes, stream)
        pending.partials = [
            entry for entry in pending.partials if entry[0].device != place
        ] + [(first, done)]


def free_private(rt: Owner, instance: Instance, nbytes: int, stream: Stream) -> None:
    """Free a private instance (a partial result, a moved copy) in stream order."""
    allocation = instance.allocation
    if allocation is not None:
        rt.backend.free(allocation, stream)
        rt.memory.release_private(instance.device, nbytes)
        instance.allocation = None
