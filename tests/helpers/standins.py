"""Stand-in streams and events for the pure layers (``_deps``, ``_coherence``,
``_streams``, ``_plan``): exactly the attributes those modules read, no backend."""

from __future__ import annotations


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.waited: dict = {}
        self.recorded = 0

    def record(self) -> FakeEvent:
        self.recorded += 1
        return FakeEvent(self, self.recorded)

    def __repr__(self) -> str:
        return self.name


class FakeEvent:
    def __init__(self, stream: FakeStream, seq: int) -> None:
        self.stream = stream
        self.seq = seq

    def __repr__(self) -> str:
        return f"{self.stream.name}#{self.seq}"


def never(event: FakeEvent) -> bool:
    """``completed`` for plans: nothing has completed."""
    return False


def always(event: FakeEvent) -> bool:
    """``completed`` for plans: everything has completed."""
    return True
