"""Stand-ins for the pure layers (``_deps``, ``_coherence``, ``_streams``, ``_plan``):
real streams, events and allocations of the backend contract, with no backend behind
them (a compiled build checks the types of what it is given)."""

from __future__ import annotations

import itertools

import numpy as np

from stflow.backends._base import HOST, Allocation, Event, Stream

_handles = itertools.count(0x1000, 0x10)
_addresses = itertools.count(0x10000, 0x1000)


class FakeStream(Stream):
    """A stream that numbers its own events."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__(next(_handles), 0)
        self.name = name

    def record(self) -> Event:
        self.recorded += 1
        event = self.last_event = Event(self, self.recorded)
        return event

    def __repr__(self) -> str:
        return self.name


def buffer(device: int = HOST, nbytes: int = 64) -> Allocation:
    """An allocation record at a made-up address (nothing is allocated)."""
    return Allocation(next(_addresses), nbytes, device, np.dtype(np.uint8))


def never(event: Event) -> bool:
    """``completed`` for plans: nothing has completed."""
    return False


def always(event: Event) -> bool:
    """``completed`` for plans: everything has completed."""
    return True
