"""Coherence planning of _coherence.py, with stand-in events (no backend)."""

from __future__ import annotations

from stflow._coherence import INVALID, MODIFIED, SHARED, DataState
from stflow._deps import READ, WRITE

from test_deps import FakeStream

HOST, DEV0, DEV1 = -1, 0, 1
RW = READ | WRITE


def registered():
    state = DataState(nbytes=64)
    state.set_reference(HOST, allocation="user buffer")
    return state


def test_reference_instance_starts_modified_and_needs_no_copy():
    state = registered()
    instance, source, prerequisites = state.plan_access(READ, HOST)
    assert instance is state.reference and instance.state is MODIFIED
    assert source is None and prerequisites == []


def test_reading_elsewhere_copies_from_the_valid_instance():
    state = registered()
    s = FakeStream("s")
    instance, source, _ = state.plan_access(READ, DEV0)
    assert instance.state is INVALID and instance.allocation is None
    assert source is state.reference
    copy_done = s.record()
    state.copied(instance, source, copy_done)
    assert instance.state is SHARED and state.reference.state is SHARED
    assert instance.ready == {s: copy_done}


def test_a_concurrent_reader_of_a_fresh_copy_waits_for_that_copy():
    state = registered()
    s = FakeStream("s")
    instance, source, _ = state.plan_access(READ, DEV0)
    copy_done = s.record()
    state.copied(instance, source, copy_done)
    again, source2, prerequisites = state.plan_access(READ, DEV0)
    assert again is instance and source2 is None
    assert prerequisites == [copy_done]


def test_write_only_access_does_not_copy():
    state = registered()
    instance, source, _ = state.plan_access(WRITE, DEV1)
    assert source is None


def test_a_write_invalidates_every_other_instance():
    state = registered()
    s = FakeStream("s")
    dev0, source, _ = state.plan_access(READ, DEV0)
    state.copied(dev0, source, s.record())
    dev1, _, _ = state.plan_access(RW, DEV1)
    end = s.record()
    state.released(dev1, RW, end)
    assert dev1.state is MODIFIED and dev1.ready == {}
    assert dev0.state is INVALID and state.reference.state is INVALID
    assert state.tracker.writer == {s: end}


def test_copy_source_prefers_the_modified_instance():
    state = registered()
    s = FakeStream("s")
    dev0, _, _ = state.plan_access(WRITE, DEV0)
    state.released(dev0, WRITE, s.record())
    _, source, _ = state.plan_access(READ, DEV1)
    assert source is dev0


def test_writeback_copies_into_the_stale_reference_after_the_writer():
    state = registered()
    s = FakeStream("s")
    dev0, _, _ = state.plan_access(RW, DEV0)
    end = s.record()
    state.released(dev0, RW, end)
    reference, source, prerequisites = state.writeback_plan()
    assert reference is state.reference and source is dev0
    assert prerequisites == [end]


def test_no_writeback_when_the_reference_is_current_or_absent():
    assert registered().writeback_plan() is None
    state = DataState(nbytes=8)                     # logical_data_empty: no user buffer
    s = FakeStream("s")
    dev0, _, _ = state.plan_access(WRITE, DEV0)
    state.released(dev0, WRITE, s.record())
    assert state.writeback_plan() is None


def test_never_written_data_has_no_source():
    state = DataState(nbytes=8)
    instance, source, prerequisites = state.plan_access(READ, DEV0)
    assert source is None and instance.state is INVALID and prerequisites == []


def test_completed_copies_stop_ordering_later_readers():
    state = registered()
    s = FakeStream("s")
    instance, source, _ = state.plan_access(READ, DEV0)
    copy_done = s.record()
    state.copied(instance, source, copy_done)
    _, _, pending = state.plan_access(READ, DEV0, completed=lambda event: False)
    assert pending == [copy_done]
    _, _, done = state.plan_access(READ, DEV0, completed=lambda event: True)
    assert done == [] and instance.ready == {}
