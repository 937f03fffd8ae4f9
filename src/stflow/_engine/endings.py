"""The synchronisation points: ``fence``, ``wait`` on one data, and the end of a
runtime (``quiesce``, ``finalize``, ``tear_down``).

Functions of a :class:`~stflow._engine.runtime.Runtime` (its methods of the same names call
them), apart from the hot path: each runs once per synchronisation point, takes the
runtime's lock itself where it says so, and blocks outside it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._core.access import READ
from .._core.coherence import DataState, Instance
from .._core.deps import merge_events
from .._core.errors import ScopeError
from ..backends._base import HOST, Allocation, Stream, callback_state, poison
from . import eviction as eviction
from . import reductions as reductions

if TYPE_CHECKING:
    from .._core.errors import ErrorLog
    from .._core.plan import Plan
    from .._core.streams import StreamPools
    from .._instruments.seam import Instruments
    from ..backends._base import Event

__all__ = ["Owner", "fence", "finalize", "quiesce", "tear_down", "wait"]


class Owner(eviction.Owner, Protocol):
    """What the synchronisation points use of the runtime (``_runtime.Runtime``),
    besides what eviction (and reductions) do."""

    lock: Any
    """The runtime's re-entrant lock."""
    errors: ErrorLog
    instruments: Instruments
    root_pools: StreamPools
    fence_stream: Stream | None
    caller_stream: Stream | None
    releases: list[Any]
    """Retired data whose frees are in flight (``done``: their event)."""
    plans: dict[tuple, Plan]
    closing: bool
    finalized: bool

    def check_submit(self, what: Any) -> None:
        """Refuse work from a host callback or on a finalized runtime."""

    def drain_retired(self) -> None:
        """Write back and free the data whose handles were collected."""

    def release_completed(self) -> None:
        """Release the buffers of retired data whose work has completed."""

    def order_after(self, stream: Stream, events: list[Event]) -> None:
        """Make ``stream`` wait for ``events``."""

    def outstanding_events(self) -> list[Event]:
        """Events after which everything submitted so far has completed."""

    def writeback(self, state: DataState) -> None:
        """Bring the user's buffer of ``state`` up to date."""

    def _await_no_started(self) -> None:
        """Wait until no task is started."""


def _boundary(rt: Owner, what: str) -> None:
    """The start of a synchronisation point ``what`` (lock held): refused after
    finalize, the mode told (graph mode closes its epoch; ``rt.mode.resume()``
    begins the next one), collected data retired."""
    rt.check_submit(what)
    rt.mode.boundary(what)
    rt.drain_retired()


def fence(rt: Owner) -> int:
    """A stream that completes once everything submitted so far has completed."""
    with rt.lock:
        _boundary(rt, "fence()")
        stream = rt.fence_stream
        if stream is None:
            stream = rt.fence_stream = rt.root_pools.new_stream(
                max(rt.backend.current_device(), 0)
            )
        rt.order_after(stream, merge_events(rt.outstanding_events()))
        rt.instruments.fence()
        rt.mode.resume()
    return int(stream.handle)  # never raises deferred errors


def wait(
    rt: Owner, state: DataState, shape: tuple[int, ...], dtype: np.dtype, label: str
) -> np.ndarray:
    """Block until the data of ``state`` can be read; return a host copy."""
    event = None
    with rt.lock:
        _boundary(rt, "wait()")
        if state.writing is not None:
            rt.wait_for_conflicts([(state, READ)], "wait()")
        if state.pending is not None:
            reductions.flush(rt, state, None, "wait()")
        result: np.ndarray = np.empty(shape, dtype)
        source = state.valid_source()
        if source is None:
            poison(result.reshape(-1).view(np.uint8), dtype)
        elif state.nbytes:
            prerequisites = [*state.tracker.prerequisites(READ), *source.ready.values()]
            target = Instance(
                HOST,
                Allocation(
                    result.__array_interface__["data"][0],
                    state.nbytes,
                    HOST,
                    dtype,
                    result,
                ),
            )
            event = rt.copy_into(state, target, source, prerequisites, label, keep=False)
        retiring = [entry.done for entry in rt.releases]
        rt.mode.resume()
    backend = rt.backend
    if event is not None:
        backend.synchronize(event)
    for done in retiring:  # collected data is written back by now
        backend.synchronize(done)
    if retiring:
        with rt.lock:
            rt.release_completed()
    rt.errors.raise_pending("wait()")
    return result


def quiesce(rt: Owner) -> None:
    """Close the runtime to new work, then wait until no work of another thread
    is held (the lock must be held)."""
    me = threading.get_ident()
    for holder, thread in rt.started.items():
        if thread == me:
            raise ScopeError(
                f"finalize() while {holder._label()} is started but "
                "not ended; end the task first"
            )
    rt.mode.quiesce()  # other threads' recordings close
    rt.closing = True  # submissions waiting on a conflict give up
    rt._await_no_started()


def finalize(rt: Owner) -> None:
    """Complete all work, write results back, free everything (idempotent)."""
    with rt.lock:
        if rt.finalized:
            return
        if callback_state.active:
            raise ScopeError(
                "finalize() called from a host callback or launched function"
            )
        rt.mode.check_finalize()
        quiesce(rt)
        rt.mode.close()
        rt.drain_retired()
        for state in rt.data.states.values():
            rt.writeback(state)
        backend = rt.backend
        caller = rt.caller_stream
        events = merge_events(rt.outstanding_events())
        if caller is not None:
            # No ordering state on a stream the runtime does not own: plain waits.
            for event in events:
                backend.wait(caller, event)
    if caller is None:
        for event in events:
            backend.synchronize(event)
    with rt.lock:
        tear_down(rt, caller)
    for failure in rt.instruments.finalized():
        rt.errors.capture(failure)
    rt.errors.raise_pending("finalize()")


def tear_down(rt: Owner, stream: Stream | None) -> None:
    """The end of :func:`finalize` (or of an abandoned context): free every
    instance the runtime allocated (stream-ordered on ``stream``; ``None`` once
    the work has completed), forget all data, plans and streams, and mark the
    runtime finalized. The lock must be held."""
    backend = rt.backend
    for state in rt.data.states.values():
        for instance in state.instances.values():
            if instance.allocation is not None and not instance.is_reference:
                backend.free(instance.allocation, stream)
            instance.allocation = None
        state.instances.clear()
        state.reference = None
    rt.data.clear()
    rt.memory.clear()
    rt.releases.clear()
    rt.plans.clear()
    rt.root_pools.destroy()
    rt.fence_stream = None
    rt.mode.finalized()
    rt.finalized = True
