"""Ordering rules of _core/deps.py, with stand-in streams and events (no backend)."""

from __future__ import annotations

from helpers.standins import FakeStream

from stflow._core.access import READ, RW, WRITE
from stflow._core.deps import AccessTracker, merge_events, needs_wait


def test_read_after_write_waits_for_the_writer_only():
    a, b = FakeStream("a"), FakeStream("b")
    tracker = AccessTracker()
    w = a.record()
    tracker.release(WRITE, w)
    assert tracker.prerequisites(READ) == [w]
    r = b.record()
    tracker.release(READ, r)
    assert tracker.prerequisites(READ) == [w]  # readers do not order readers


def test_write_after_read_waits_for_writer_and_every_reader():
    a, b, c = FakeStream("a"), FakeStream("b"), FakeStream("c")
    tracker = AccessTracker()
    w = a.record()
    tracker.release(RW, w)
    r1, r2 = b.record(), c.record()
    tracker.release(READ, r1)
    tracker.release(READ, r2)
    assert tracker.prerequisites(WRITE) == [w, r1, r2]  # the writer first
    assert tracker.prerequisites(RW) == [w, r1, r2]


def test_a_write_becomes_the_only_prerequisite_and_forgets_readers():
    a, b = FakeStream("a"), FakeStream("b")
    tracker = AccessTracker()
    tracker.release(READ, b.record())
    w = a.record()
    tracker.release(WRITE, w)
    assert tracker.readers == {} and tracker.writer is w
    assert tracker.prerequisites(RW) == [w]
    assert tracker.events() == [w]


def test_a_steady_write_chain_allocates_no_new_containers():
    a, b = FakeStream("a"), FakeStream("b")
    tracker = AccessTracker()
    readers = tracker.readers
    tracker.release(READ, b.record())
    for _ in range(3):
        tracker.release(RW, a.record())
    assert tracker.readers is readers and not readers


def test_readers_keep_only_the_newest_event_per_stream():
    b = FakeStream("b")
    tracker = AccessTracker()
    first, second = b.record(), b.record()
    tracker.release(READ, first)
    tracker.release(READ, second)
    tracker.release(READ, first)  # an older event never replaces a newer one
    assert tracker.readers == {b: second}


def test_nothing_to_wait_for_before_the_first_access():
    tracker = AccessTracker()
    assert tracker.prerequisites(RW) == [] and tracker.events() == []


def test_merge_keeps_the_newest_event_of_each_stream():
    a, b = FakeStream("a"), FakeStream("b")
    a1, a2, b1 = a.record(), a.record(), b.record()
    assert merge_events([a1, b1, a2, a1]) == [a2, b1]


def test_no_wait_on_own_stream_and_no_repeated_wait():
    a, b = FakeStream("a"), FakeStream("b")
    a1, a2 = a.record(), a.record()
    assert not needs_wait(a, a1)  # stream order already holds
    assert needs_wait(b, a1)
    assert not needs_wait(b, a1)  # already waited
    assert needs_wait(b, a2)  # a newer event of a needs a new wait
    assert not needs_wait(b, a1)  # older than one already waited for
    assert b.waited == {a: 2}
