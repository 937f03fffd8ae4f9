"""Planning (_core/plan.py): resolution and acquisition over data states and stand-in
streams, without a backend."""

from __future__ import annotations

import pytest
from helpers.standins import FakeStream, always, buffer, never

from stflow._core.access import READ, RW, WRITE
from stflow._core.coherence import INVALID, MODIFIED, DataState
from stflow._core.errors import AccessModeError, PlaceError
from stflow._core.plan import acquire, held, hold, release, remember, resolve, retarget
from stflow._core.streams import Pool

HOST, MANAGED, AFFINE = -1, -2, -3


def registered(key: int = 1) -> DataState:
    state = DataState(key, nbytes=64, dtype=None)
    state.set_reference(HOST, allocation=buffer())
    return state


def decide(plan, pool, completed, tick=1):
    """acquire() then retarget() on the chosen stream: the runtime's two steps."""
    stream = acquire(plan, pool, completed, tick)
    if stream is not None:
        retarget(plan, stream)
    return stream


def pool_of(name: str, size: int = 2) -> Pool:
    return Pool([FakeStream(f"{name}{i}") for i in range(size)])


def test_resolution_places_accesses_at_the_affine_or_given_place():
    x, y, z = registered(1), registered(2), registered(3)
    plan = resolve(
        [(x, RW, None), (y, READ, HOST), (z, READ, AFFINE)], 1, 1, 2, False, "t"
    )
    assert [a.device for a in plan.accesses] == [1, HOST, 1]
    assert plan.per_dependency is plan.accesses and plan.device == 1
    assert plan.accesses[1].instance is y.reference


def test_resolution_merges_repeated_data_at_one_place():
    x, y = registered(1), registered(2)
    plan = resolve(
        [(x, READ, None), (y, READ, HOST), (x, WRITE, None), (y, READ, 1)],
        0,
        0,
        2,
        False,
        "t",
    )
    assert [(a.state, a.mode, a.device) for a in plan.accesses] == [
        (x, RW, 0),
        (y, READ, HOST),
        (y, READ, 1),
    ]
    assert plan.per_dependency[0] is plan.per_dependency[2] is plan.accesses[0]
    assert plan.per_dependency[3] is plan.accesses[2]


def test_resolution_refuses_a_written_data_at_two_places():
    x = registered()
    with pytest.raises(AccessModeError, match="accesses logical data #1 at two places"):
        resolve([(x, RW, 0), (x, READ, 1)], 0, 0, 2, False, "task 't'")


def test_resolution_checks_places():
    x = registered()
    with pytest.raises(PlaceError, match=r"data_place\.device\(5\) does not exist"):
        resolve([(x, READ, 5)], 0, 0, 2, False, "t")
    with pytest.raises(PlaceError, match="is not host-accessible"):
        resolve([(x, READ, 0)], HOST, HOST, 2, True, "host_launch")
    plan = resolve([(x, READ, MANAGED)], HOST, HOST, 2, True, "host_launch")
    assert plan.accesses[0].device == MANAGED


def test_tokens_have_no_instance():
    token = DataState(9, 0, None, is_token=True)
    plan = resolve([(token, RW, 0)], 0, 0, 2, False, "t")
    assert plan.accesses[0].instance is None and plan.accesses[0].device == HOST


def test_first_read_elsewhere_moves_a_copy_then_the_steady_state_moves_nothing():
    x = registered()
    pool = pool_of("p")
    plan = resolve([(x, RW, 0)], 0, 0, 2, False, "t")
    stream = decide(plan, pool, never, 1)
    assert plan.moves == [(plan.accesses[0], x.reference)]
    assert plan.waits == () and plan.first is None
    copy_done = stream.record()
    x.copied(plan.accesses[0].instance, x.reference, copy_done)
    release(plan, stream.record(), None)
    assert plan.accesses[0].instance.state is MODIFIED
    assert x.reference.state is INVALID
    for _ in range(3):  # a chain: same stream, nothing to do
        again = decide(plan, pool, never, 1)
        assert again is stream and plan.moves is None and plan.waits == ()
        assert plan.skipped == 1
        release(plan, stream.record(), None)


def test_a_write_only_access_allocates_without_copying():
    x = registered()
    plan = resolve([(x, WRITE, 1)], 1, 1, 2, False, "t")
    decide(plan, pool_of("p"), never, 1)
    assert plan.moves == [(plan.accesses[0], None)]


def test_readers_of_a_fresh_copy_wait_for_it_until_it_completed():
    x = registered()
    copier = FakeStream("copier")
    dev0 = x.instance(0)
    dev0.allocation = buffer(0)
    copy_done = copier.record()
    x.copied(dev0, x.reference, copy_done)
    plan = resolve([(x, READ, 0)], 0, 0, 2, False, "t")
    pool = pool_of("p")
    stream = decide(plan, pool, never, 1)
    assert plan.waits == [copy_done] and stream in pool.streams
    decide(plan, pool, always, 1)  # completed copies order nothing
    assert plan.waits == () and dev0.ready == {}


def test_a_writer_waits_for_every_reader_on_other_streams():
    x = registered()
    x.instance(0).allocation, x.instance(1).allocation = buffer(0), buffer(1)
    a, b = FakeStream("a"), FakeStream("b")
    x.released(x.instance(0), WRITE, a.record())
    reader = b.record()
    x.tracker.release(READ, reader)
    writer_first = x.tracker.writer
    plan = resolve([(x, RW, 0)], 0, 0, 2, False, "t")
    pool = Pool([a, FakeStream("a2")])
    stream = decide(plan, pool, never, 1)
    assert stream is a  # the last writer's stream
    assert plan.first is writer_first and plan.others == [reader]
    assert plan.waits == [reader] and plan.skipped == 1
    decide(plan, pool, never, 1)  # the wait is remembered: none again
    assert plan.waits == [] and plan.skipped == 2


def test_acquire_decides_no_waits_so_the_caller_can_decide_again():
    """acquire() names a stream without deciding its waits (which needs_wait would
    remember): graph mode may give the work another stream (one whose task body is
    being captured is left alone), eviction may change the prerequisites; the caller
    retargets once, for the stream the work runs on."""
    x = registered()
    x.instance(0).allocation, x.instance(1).allocation = buffer(0), buffer(1)
    a, b, c = FakeStream("a"), FakeStream("b"), FakeStream("c")
    x.released(x.instance(0), WRITE, a.record())
    reader = b.record()
    x.tracker.release(READ, reader)
    plan = resolve([(x, RW, 0)], 0, 0, 2, False, "t")
    assert acquire(plan, Pool([a, c]), never, 1) is a
    assert acquire(plan, Pool([a, c]), never, 2) is a  # deciding again is free
    assert a.waited == {}
    retarget(plan, c)
    assert plan.stream is c and set(plan.waits) == {x.tracker.writer, reader}
    decide(plan, Pool([a, c]), never, 3)
    assert plan.stream is a and plan.waits == [reader]  # a still waits for b


def test_plan_cache_starts_over_when_full():
    cache = {}
    plan = resolve([(registered(), READ, None)], 0, 0, 1, False, "t")
    remember(cache, (1,), plan, limit=2)
    remember(cache, (2,), plan, limit=2)
    assert len(cache) == 2 and cache.get((1,)) is plan
    remember(cache, (3,), plan, limit=2)
    assert cache == {(3,): plan}


def test_invalid_instances_with_memory_only_copy():
    x = registered()
    dev0 = x.instance(0)
    dev0.allocation = buffer(0)
    assert dev0.state is INVALID
    plan = resolve([(x, READ, 0)], 0, 0, 2, False, "t")
    decide(plan, pool_of("p"), never, 1)
    assert plan.moves == [(plan.accesses[0], x.reference)]


def test_started_work_holds_its_data_until_released():
    x, y = registered(1), registered(2)
    reader = resolve([(x, READ, HOST)], HOST, HOST, 2, False, "r")
    writer = resolve([(x, RW, HOST), (y, READ, HOST)], HOST, HOST, 2, False, "w")
    other_reader = resolve([(x, READ, HOST)], HOST, HOST, 2, False, "r2")
    hold(reader, "task r")
    assert not held(other_reader)  # readers share
    assert held(writer)  # a writer waits for the reader
    s = FakeStream("s")
    release(reader, s.record(), "task r")
    assert not held(writer)
    hold(writer, "task w")
    assert held(other_reader) and x.writing == "task w" and y.reading == 1
    release(writer, s.record(), "task w")
    assert x.writing is None and y.reading == 0 and not held(other_reader)
