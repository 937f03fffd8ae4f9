"""Coherence: where the bytes of a logical data are, and which copy is current.

Pure Python; nothing here talks to a device. The runtime asks this module *what* to do
(:meth:`DataState.plan_access`) and reports back what it did
(:meth:`DataState.copied`, :meth:`DataState.released`).

The model
---------
A logical data has at most one :class:`Instance` per data place (host, managed, or a
device ordinal). An instance has a state:

``invalid``
    its buffer (if allocated) holds stale bytes;
``shared``
    it holds the current value, and so may others;
``modified``
    it is the only instance holding the current value.

For an access ``(mode, place)``:

1. the instance at ``place`` is created if needed (its buffer is allocated lazily by
   the runtime, in stream order on the task's stream);
2. if the mode reads and the instance is invalid, the current value is copied from a
   valid instance (preferably the modified one), ordered after the last writer and
   after that instance's own readiness;
3. the task waits for the ordering prerequisites (``_deps.AccessTracker``) plus the
   readiness of the instances it touches: the *ready* events of an instance are the
   copies into it since the last write;
4. when the task ends, a write makes its instance ``modified`` and every other
   instance ``invalid`` (buffers are kept for reuse).

The user's buffer, when there is one, is the *reference instance*: it is never freed,
and when it is invalid at the end its content is written back from a valid instance.
"""

from __future__ import annotations

from typing import Any, Callable

from ._deps import READ, WRITE, AccessTracker

__all__ = ["INVALID", "MODIFIED", "SHARED", "DataState", "Instance"]

INVALID = "invalid"
SHARED = "shared"
MODIFIED = "modified"


class Instance:
    """One copy of a logical data at one place.

    Attributes
    ----------
    device : int
        The place: a device ordinal, or ``HOST`` / ``MANAGED``.
    allocation : object or None
        The backend allocation; ``None`` until first used.
    state : str
        ``INVALID``, ``SHARED`` or ``MODIFIED``.
    ready : dict
        stream -> event of the copies into this instance since the last write.
    is_reference : bool
        True for the user's own buffer (never freed by the runtime).
    """

    __slots__ = ("device", "allocation", "state", "ready", "is_reference")

    def __init__(self, device: int, allocation: Any = None, state: str = INVALID,
                 is_reference: bool = False) -> None:
        self.device = device
        self.allocation = allocation
        self.state = state
        self.ready: dict[Any, Any] = {}
        self.is_reference = is_reference

    def __repr__(self) -> str:
        ref = " reference" if self.is_reference else ""
        return f"<Instance device={self.device} {self.state}{ref}>"


class DataState:
    """The ordering and coherence state of one logical data.

    Attributes
    ----------
    tracker : AccessTracker
        Last writer and readers (ordering).
    instances : dict
        place -> :class:`Instance`.
    reference : Instance or None
        The user's buffer, if the data was registered from one.
    active : dict
        Tasks between ``start()`` and ``end()`` that access this data -> their mode.
    """

    __slots__ = ("tracker", "instances", "reference", "active", "nbytes", "label", "pin")

    def __init__(self, nbytes: int) -> None:
        self.label = "data"
        self.pin: Any = None           # the page-locking this data uses, if any
        self.tracker = AccessTracker()
        self.instances: dict[int, Instance] = {}
        self.reference: Instance | None = None
        self.active: dict[Any, int] = {}
        self.nbytes = nbytes

    def set_reference(self, device: int, allocation: Any) -> Instance:
        """Register the user's buffer at ``device`` as the current value."""
        instance = Instance(device, allocation, MODIFIED, is_reference=True)
        self.instances[device] = instance
        self.reference = instance
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

    def plan_access(self, mode: int, device: int,
                    completed: Callable[[Any], bool] | None = None
                    ) -> tuple[Instance, Instance | None, list[Any]]:
        """What an access with ``mode`` at ``device`` needs.

        ``completed(event)``, when given, lets the plan forget copies into the
        instance that have already completed (they order nothing any more), so that
        later accesses stop carrying them.

        Returns
        -------
        (instance, source, prerequisites)
            The instance to use (created invalid if new), the instance to copy from
            (``None`` when no copy is needed) and the events to wait for first.
        """
        instance = self.instances.get(device)
        if instance is None:
            instance = self.instances[device] = Instance(device)
        prerequisites = self.tracker.prerequisites(mode)
        source = None
        if instance.state is INVALID:
            if mode & READ:
                source = self.valid_source(device)
                if source is not None and source.ready:
                    prerequisites.extend(source.ready.values())
        elif instance.ready:
            if completed is not None and all(map(completed, instance.ready.values())):
                instance.ready = {}
            else:
                prerequisites.extend(instance.ready.values())
        return instance, source, prerequisites

    def copied(self, instance: Instance, source: Instance, event: Any) -> None:
        """Record that ``source`` was copied into ``instance``, complete at ``event``."""
        instance.state = SHARED
        instance.ready = {event.stream: event}
        if source.state is MODIFIED:
            source.state = SHARED

    def released(self, instance: Instance | None, mode: int, event: Any) -> None:
        """Record that an access with ``mode`` to ``instance`` ends at ``event``."""
        self.tracker.release(mode, event)
        if mode & WRITE and instance is not None:
            for other in self.instances.values():
                if other is not instance and other.state is not INVALID:
                    other.state = INVALID
                    other.ready = {}
            instance.state = MODIFIED
            if instance.ready:
                instance.ready = {}

    def snapshot(self) -> tuple:
        """The ordering and instance states, for :meth:`restore` (graph scopes whose
        recording is discarded or never launched)."""
        tracker = self.tracker
        return (dict(tracker.writer), dict(tracker.readers),
                {device: (instance.state, dict(instance.ready))
                 for device, instance in self.instances.items()})

    def restore(self, snapshot: tuple) -> None:
        """Go back to the states of :meth:`snapshot`; instances created since are
        invalid (their buffers are kept)."""
        writer, readers, instances = snapshot
        self.tracker.writer = dict(writer)
        self.tracker.readers = dict(readers)
        for device, instance in self.instances.items():
            state, ready = instances.get(device, (INVALID, {}))
            instance.state = state
            instance.ready = dict(ready)

    def writeback_plan(self) -> tuple[Instance, Instance, list[Any]] | None:
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
