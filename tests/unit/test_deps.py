"""Ordering rules of _deps.py, with stand-in streams and events (no backend)."""

from __future__ import annotations

from stflow._deps import (READ, WRITE, AccessTracker, choose_stream, merge_events,
                          needs_wait)


class FakeStream:
    def __init__(self, name):
        self.name = name
        self.waited = {}
        self.recorded = 0

    def record(self):
        self.recorded += 1
        return FakeEvent(self, self.recorded)

    def __repr__(self):
        return self.name


class FakeEvent:
    def __init__(self, stream, seq):
        self.stream = stream
        self.seq = seq

    def __repr__(self):
        return f"{self.stream.name}#{self.seq}"


RW = READ | WRITE


def test_read_after_write_waits_for_the_writer_only():
    a, b = FakeStream("a"), FakeStream("b")
    tracker = AccessTracker()
    w = a.record()
    tracker.release(WRITE, w)
    assert tracker.prerequisites(READ) == [w]
    r = b.record()
    tracker.release(READ, r)
    assert tracker.prerequisites(READ) == [w]          # readers do not order readers


def test_write_after_read_waits_for_writer_and_every_reader():
    a, b, c = FakeStream("a"), FakeStream("b"), FakeStream("c")
    tracker = AccessTracker()
    w = a.record()
    tracker.release(RW, w)
    r1, r2 = b.record(), c.record()
    tracker.release(READ, r1)
    tracker.release(READ, r2)
    assert set(tracker.prerequisites(WRITE)) == {w, r1, r2}
    assert set(tracker.prerequisites(RW)) == {w, r1, r2}


def test_a_write_becomes_the_only_prerequisite_and_forgets_readers():
    a, b = FakeStream("a"), FakeStream("b")
    tracker = AccessTracker()
    tracker.release(READ, b.record())
    w = a.record()
    tracker.release(WRITE, w)
    assert tracker.readers == {}
    assert tracker.prerequisites(RW) == [w]
    assert tracker.all_events() == [w]


def test_readers_keep_only_the_newest_event_per_stream():
    b = FakeStream("b")
    tracker = AccessTracker()
    first, second = b.record(), b.record()
    tracker.release(READ, first)
    tracker.release(READ, second)
    tracker.release(READ, first)          # an older event never replaces a newer one
    assert tracker.readers == {b: second}


def test_merge_keeps_the_newest_event_of_each_stream():
    a, b = FakeStream("a"), FakeStream("b")
    a1, a2, b1 = a.record(), a.record(), b.record()
    assert set(merge_events([a1, b1, a2, a1])) == {a2, b1}


def test_no_wait_on_own_stream_and_no_repeated_wait():
    a, b = FakeStream("a"), FakeStream("b")
    a1, a2 = a.record(), a.record()
    assert not needs_wait(a, a1)           # stream order already holds
    assert needs_wait(b, a1)
    assert not needs_wait(b, a1)           # already waited
    assert needs_wait(b, a2)               # a newer event of a needs a new wait
    assert not needs_wait(b, a1)           # older than one already waited for
    assert b.waited == {a: 2}


def test_choose_stream_prefers_a_prerequisite_stream_in_the_pool():
    pool = [FakeStream("p0"), FakeStream("p1"), FakeStream("p2")]
    other = FakeStream("elsewhere")
    e_other, e_p2 = other.record(), pool[2].record()
    stream, following = choose_stream(pool, set(pool), [e_other, e_p2], 0)
    assert stream is pool[2] and following == 0


def test_choose_stream_round_robin_without_prerequisites_in_the_pool():
    pool = [FakeStream("p0"), FakeStream("p1")]
    chosen = []
    position = 0
    for _ in range(4):
        stream, position = choose_stream(pool, set(pool), [FakeStream("x").record()],
                                         position)
        chosen.append(stream)
    assert chosen == [pool[0], pool[1], pool[0], pool[1]]
