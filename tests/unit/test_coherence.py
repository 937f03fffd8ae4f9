"""Coherence of _core/coherence.py, with stand-in events (no backend)."""

from __future__ import annotations

from helpers.standins import FakeStream, buffer

from stflow._core.access import READ, RW, WRITE
from stflow._core.coherence import INVALID, MODIFIED, SHARED, DataState

HOST, DEV0, DEV1 = -1, 0, 1


def registered() -> DataState:
    state = DataState(1, nbytes=64, dtype=None)
    state.set_reference(HOST, allocation=buffer())
    return state


def test_reference_instance_starts_modified():
    state = registered()
    assert state.reference.state is MODIFIED and state.reference.is_reference
    assert state.valid_source() is state.reference


def test_instances_are_created_once_invalid_and_without_memory():
    state = registered()
    dev0 = state.instance(DEV0)
    assert state.instance(DEV0) is dev0
    assert dev0.state is INVALID and dev0.allocation is None and dev0.ready == {}


def test_a_copy_makes_target_and_modified_source_shared():
    state = registered()
    s = FakeStream("s")
    dev0 = state.instance(DEV0)
    copy_done = s.record()
    state.copied(dev0, state.reference, copy_done)
    assert dev0.state is SHARED and state.reference.state is SHARED
    assert dev0.ready == {s: copy_done}


def test_a_write_invalidates_every_other_instance():
    state = registered()
    s = FakeStream("s")
    dev0, dev1 = state.instance(DEV0), state.instance(DEV1)
    state.copied(dev0, state.reference, s.record())
    end = s.record()
    state.released(dev1, RW, end)
    assert dev1.state is MODIFIED and dev1.ready == {}
    assert dev0.state is INVALID and dev0.ready == {}
    assert state.reference.state is INVALID
    assert state.tracker.writer is end


def test_writing_a_modified_instance_again_changes_no_instance():
    state = registered()
    s = FakeStream("s")
    dev0 = state.instance(DEV0)
    state.released(dev0, WRITE, s.record())
    ready = dev0.ready
    for _ in range(3):
        state.released(dev0, RW, s.record())
    assert dev0.state is MODIFIED and dev0.ready is ready and not ready
    assert state.reference.state is INVALID


def test_copy_source_prefers_modified_then_device_memory():
    state = registered()
    s = FakeStream("s")
    dev0 = state.instance(DEV0)
    state.released(dev0, WRITE, s.record())
    assert state.valid_source(DEV1) is dev0
    host = state.reference
    state.copied(host, dev0, s.record())  # now both shared
    assert state.valid_source(DEV1) is dev0  # device memory before the host
    assert state.valid_source(DEV0) is host  # never the target itself


def test_writeback_copies_into_the_stale_reference_after_the_writer():
    state = registered()
    s = FakeStream("s")
    dev0 = state.instance(DEV0)
    end = s.record()
    state.released(dev0, RW, end)
    reference, source, prerequisites = state.writeback_plan()
    assert reference is state.reference and source is dev0
    assert prerequisites == [end]


def test_no_writeback_when_the_reference_is_current_or_absent():
    assert registered().writeback_plan() is None
    state = DataState(2, nbytes=8, dtype=None)  # logical_data_empty: no user buffer
    s = FakeStream("s")
    state.released(state.instance(DEV0), WRITE, s.record())
    assert state.writeback_plan() is None


def test_never_written_data_has_no_source():
    state = DataState(3, nbytes=8, dtype=None)
    state.instance(DEV0)
    assert state.valid_source() is None


def test_restore_goes_back_to_a_snapshot():
    state = registered()
    s = FakeStream("s")
    before = state.snapshot()
    reader = s.record()
    state.tracker.release(READ, reader)
    dev0 = state.instance(DEV0)  # created after the snapshot
    state.released(dev0, WRITE, s.record())
    state.restore(before)
    assert state.tracker.writer is None and state.tracker.readers == {}
    assert state.reference.state is MODIFIED and dev0.state is INVALID
