"""Stream choice (_core/streams.py): pure, with stand-in streams; and the pools of a level
on the null backend."""

from __future__ import annotations

from helpers.standins import FakeStream

from stflow._core.streams import STREAMS_PER_PLACE, Pool, StreamPools, choose_stream
from stflow.backends.null import NullBackend


def test_choose_stream_prefers_the_first_prerequisite_in_the_pool():
    pool = Pool([FakeStream("p0"), FakeStream("p1"), FakeStream("p2")])
    other = FakeStream("elsewhere")
    e_other, e_p2, e_p1 = (
        other.record(),
        pool.streams[2].record(),
        pool.streams[1].record(),
    )
    assert choose_stream(pool, e_p2, [e_p1]) is pool.streams[2]
    assert choose_stream(pool, e_other, [e_p1, e_p2]) is pool.streams[1]
    assert pool.next == 0  # no round-robin step was taken


def test_choose_stream_round_robin_without_prerequisites_in_the_pool():
    pool = Pool([FakeStream("p0"), FakeStream("p1")])
    outside = FakeStream("x")
    chosen = [choose_stream(pool, outside.record(), None) for _ in range(3)]
    chosen.append(choose_stream(pool, None, None))
    assert chosen == [pool.streams[0], pool.streams[1], pool.streams[0], pool.streams[1]]


def test_pools_are_made_on_first_use_and_destroyed_together():
    backend = NullBackend()
    failures = []
    pools = StreamPools(backend, failures.append)
    device_pool = pools.pool(1)
    assert pools.pool(1) is device_pool
    assert len(device_pool.streams) == STREAMS_PER_PLACE
    assert all(
        s.device == 1 and s.error_sink == failures.append for s in device_pool.streams
    )
    fence = pools.new_stream(0)
    assert len(pools.streams) == STREAMS_PER_PLACE + 1 and fence in pools.streams
    event = backend.record(fence)
    assert pools.last_events() == [event]
    pools.destroy()
    assert pools.streams == [] and pools.pools == {}
    assert backend.live_streams == 0


class WaitRecorder(NullBackend):
    def __init__(self) -> None:
        super().__init__()
        self.waits = []

    def wait(self, stream, event):
        self.waits.append((stream, event))


def test_new_streams_wait_for_the_entry_event_of_a_caller_stream():
    backend = WaitRecorder()
    caller = backend.stream_from_handle(0x77)
    entry = backend.record(caller)
    pools = StreamPools(backend, lambda exc: None, entry)
    stream = pools.new_stream(0)
    assert backend.waits == [(stream, entry)]
    assert caller.waited == {}  # nothing written on a foreign stream


def test_forget_order_drops_what_streams_remember():
    backend = NullBackend()
    pools = StreamPools(backend, lambda exc: None)
    a, b = pools.new_stream(0), pools.new_stream(0)
    b.waited[a] = 3
    pools.forget_order()
    assert b.waited == {}
