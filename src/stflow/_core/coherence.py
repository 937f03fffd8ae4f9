"""Coherence: where the bytes of a logical data are, and which copy is current.

Pure Python; nothing here talks to a device. The planner (``_core/plan.py``) asks this
module *what* an access needs (:meth:`DataState.valid_source`) and reports back what
was done (:meth:`DataState.copied`, :meth:`DataState.released`).

The model
---------
A logical data has at most one :class:`Instance` per data place (host, managed, or a
device ordinal). An instance has a :class:`Coherence` state:

``INVALID``
    its buffer (if allocated) holds stale bytes;
``SHARED``
    it holds the current value, and so may others;
``MODIFIED``
    it is the only instance holding the current value (so every other one is
    invalid, and nothing is being copied into it).

For an access ``(mode, place)``:

1. the instance at ``place`` is created if needed (its buffer is allocated lazily by
   the runtime, in stream order on the task's stream);
2. if the mode reads and the instance is invalid, the current value is copied from a
   valid instance (preferably the modified one), ordered after the last writer and
   after that instance's own readiness;
3. the task waits for the ordering prerequisites (``_deps.AccessTracker``) plus the
   readiness of the instances it touches: the *ready* events of an instance are the
   copies into it since the last write;
4. when the task ends, a write makes its instance ``MODIFIED`` and every other
   instance ``INVALID`` (buffers are kept for reuse).

The user's buffer, when there is one, is the *reference instance*: it is never freed,
and when it is invalid at the end its content is written back from a valid instance.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .access import READ, WRITE
from .deps import AccessTracker, newest_per_stream

if TYPE_CHECKING:
    import numpy as np

    from ..backends._base import Allocation, Event, Stream

__all__ = [
    "Coherence",
    "DataState",
    "INVALID",
    "Instance",
    "MODIFIED",
    "SHARED",
    "Snapshot",
]


class Coherence(enum.Enum):
    """The state of one instance."""

    INVALID = "invalid"
    SHARED = "shared"
    MODIFIED = "modified"


INVALID: Final = Coherence.INVALID
SHARED: Final = Coherence.SHARED
MODIFIED: Final = Coherence.MODIFIED


class Instance:
    """One copy of a logical data at one place.

    Attributes
    ----------
    device : int
        The place: a device ordinal, or ``HOST`` / ``MANAGED`` (``USER_PAGEABLE`` for
        a user buffer that could not be page-locked).
    allocation : Allocation or None
        The backend allocation; ``None`` until first used.
    state : Coherence
    ready : dict
        stream -> event of the copies into this instance since the last write.
    is_reference : bool
        True for the user's own buffer (never freed by the runtime).
    last_use : int
        When work last used it (the runtime's acquisition count): eviction takes the
        least recently used first.
    """

    __slots__ = ("device", "allocation", "state", "ready", "is_reference", "last_use")

    def __init__(
        self,
        device: int,
        allocation: Allocation | None = None,
        state: Coherence = INVALID,
        is_reference: bool = False,
    ) -> None:
        self.device = device
        self.allocation = allocation
        self.state = state
        self.ready: dict[Stream, Event] = {}
        self.is_reference = is_reference
        self.last_use = 0

    def __repr__(self) -> str:
        reference = " reference" if self.is_reference else ""
        return f"<Instance device={self.device} {self.state.value}{reference}>"


class Snapshot:
    """The ordering and instance states of a :class:`DataState` at one moment."""

    __slots__ = ("writer", "readers", "instances")

    def __init__(self, state: DataState) -> None:
        tracker = state.tracker
        self.writer = tracker.writer
        self.readers = dict(tracker.readers)
        self.instances = {
            device: (instance.state, dict(instance.ready))
            for device, instance in state.instances.items()
        }


class DataState:
    """The ordering and coherence state of one logical data.

    Attributes
    ----------
    key : int
        Unique in the process (never reused).
    label : str
        How messages name the data.
    nbytes : int
    dtype : numpy.dtype or None
        ``None`` for a token.
    shape : tuple of int
        The C-order shape (``()`` for a token), for layouts that need it.
    is_token : bool
        A token has no bytes and no instances; it only orders.
    tracker : AccessTracker
        Last writer and readers (ordering).
    instances : dict
        place -> :class:`Instance`.
    reference : Instance or None
        The user's buffer, if the data was registered from one.
    writing : object or None
        The started, not yet ended work that writes this data.
    reading : int
        How many started, not yet ended accesses read it.
    pin : object
        The page-locking the reference instance uses, if any.
    scope : object or None
        In a stackable context: the open top-level scope whose recording touched the
        data; other threads' work on it waits until it closes.
    readonly : bool
        No access may write it (its logical data is read-only): scopes of any thread
        may read it at once.
    pending : Reduction or None
        Partial results of reductions not combined into the data yet
        (``_core/reduce.py``): any other access combines them first.
    """

    __slots__ = (
        "key",
        "label",
        "nbytes",
        "dtype",
        "shape",
        "is_token",
        "tracker",
        "instances",
        "reference",
        "writing",
        "reading",
        "pin",
        "scope",
        "readonly",
        "pending",
    )

    def __init__(
        self,
        key: int,
        nbytes: int,
        dtype: np.dtype | None,
        is_token: bool = False,
        shape: tuple[int, ...] = (),
    ) -> None:
        self.key = key
        self.label = f"#{key}"
        self.nbytes = nbytes
        self.dtype = dtype
        self.shape = shape
        self.is_token = is_token
        self.tracker = AccessTracker()
        self.instances: dict[int, Instance] = {}
        self.reference: Instance | None = None
        self.writing: Any = None
        self.reading = 0
        self.pin: Any = None
        self.scope: Any = None
        self.readonly = False
        self.pending: Any = None

    def __repr__(self) -> str:
        return f"<DataState {self.label} {list(self.instances.values())}>"

    def set_reference(self, device: int, allocation: Allocation) -> Instance:
        """Register the user's buffer at ``device`` as the current value."""
        instance = Instance(device, allocation, MODIFIED, is_reference=True)
        self.instances[device] = instance
        self.reference = instance
        return instance

    def instance(self, device: int) -> Instance:
        """The instance at ``device``, created invalid (without memory) if new."""
        instance = self.instances.get(device)
        if instance is None:
            instance = self.instances[device] = Instance(device)
        return instance

    def valid_source(self, target: int | None = None) -> Instance | None:
        """A valid instance to copy from (``None`` if the data was never written).

        Prefers the modified instance, then device memory, then any valid one.
        """
        fallback = None
        for device, instance in self.instances.items():
            if instance.state is INVALID or device == target:
                continue
            if instance.state is MODIFIED:
                return instance
            if fallback is None or (device >= 0 > fallback.device):
                fallback = instance
        return fallback

    def copied(self, instance: Instance, source: Instance, event: Event) -> None:
        """Record that ``source`` was copied into ``instance``, complete at ``event``."""
        instance.state = SHARED
        ready = instance.ready
        if ready:
            ready.clear()
        ready[event.stream] = event
        if source.state is MODIFIED:
            source.state = SHARED

    def released(self, instance: Instance | None, mode: int, event: Event) -> None:
        """Record that an access with ``mode`` to ``instance`` ends at ``event``."""
        self.tracker.release(mode, event)
        if mode & WRITE and instance is not None and instance.state is not MODIFIED:
            self.written(instance)

    def written(self, instance: Instance) -> None:
        """``instance`` was written: it holds the only current value.

        (Writing a ``MODIFIED`` instance again changes nothing: it is the only valid
        one already, so callers may skip the call.)
        """
        for other in self.instances.values():
            if other.state is not INVALID:
                other.state = INVALID
                if other.ready:
                    other.ready.clear()
        instance.state = MODIFIED

    def uses(self) -> list[Event]:
        """Events after which every use of the data so far has completed: its
        ordering events and the readiness of every instance (copies in flight)."""
        events = self.tracker.events()
        for instance in self.instances.values():
            events.extend(instance.ready.values())
        return events

    def substitute(self, stand_in: Callable[[Event], Event]) -> None:
        """Replace every event the state holds (ordering and instance readiness) by
        ``stand_in(event)`` (see ``AccessTracker.substitute``)."""
        self.tracker.substitute(stand_in)
        for instance in self.instances.values():
            if instance.ready:
                instance.ready = newest_per_stream(map(stand_in, instance.ready.values()))

    def snapshot(self) -> Snapshot:
        """The ordering and instance states now, for :meth:`restore`."""
        return Snapshot(self)

    def restore(self, snapshot: Snapshot) -> None:
        """Go back to the states of ``snapshot``; instances created since are
        invalid (their buffers are kept)."""
        tracker = self.tracker
        tracker.writer = snapshot.writer
        tracker.readers = dict(snapshot.readers)
        for device, instance in self.instances.items():
            state, ready = snapshot.instances.get(device, (INVALID, {}))
            instance.state = state
            instance.ready = dict(ready)

    def writeback_plan(self) -> tuple[Instance, Instance, list[Event]] | None:
        """The copy that brings the reference instance up to date, if one is needed.

        Returns
        -------
        (reference, source, prerequisites) or None
        """
        reference = self.reference
        if reference is None or reference.state is not INVALID:
            return None
        source = self.valid_source(reference.device)
        if source is None:
            return None
        prerequisites = self.tracker.prerequisites(READ)
        prerequisites.extend(source.ready.values())
        return reference, source, prerequisites
