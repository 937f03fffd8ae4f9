"""The CUDA backend against the backend contract: devices, memory, copies, fills,
events and host callbacks, checked at the driver level."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers.gpu import launch_spin, sync

from stflow.backends._base import HOST, MANAGED, callback_state
from stflow.errors import CudaError, PlaceError, ScopeError

PLACES = {"device": 0, "host": HOST, "managed": MANAGED}


def _buffer(cuda, place, nbytes, stream):
    """(address, keepalive) of ``nbytes`` at a place; "pageable" is a NumPy array."""
    if place == "pageable":
        array = np.zeros(nbytes, np.uint8)
        return array.ctypes.data, array
    allocation = cuda.allocate(PLACES[place], nbytes, stream, np.dtype(np.uint8))
    return allocation.ptr, allocation


def _release(cuda, keep, stream):
    if not isinstance(keep, np.ndarray):
        cuda.free(keep, stream)


# -- devices -----------------------------------------------------------------------
def test_describe_names_the_devices(cuda):
    assert cuda.name == "cuda"
    assert cuda.bodies_wait_on_host is False
    assert cuda.device_count >= 1
    text = cuda.describe()
    assert text.startswith(f"cuda backend, {cuda.device_count} device(s): ")
    assert "sm_" in text and "GiB" in text


def test_get_backend_is_a_singleton_and_machine_init_is_idempotent(cuda):
    import stflow as stf
    from stflow.backends import get_backend

    assert get_backend("cuda") is cuda
    stf.machine_init()
    cuda.machine_init()


def test_current_device_round_trip(cuda):
    cuda.set_current_device(0)
    assert cuda.current_device() == 0
    with pytest.raises(PlaceError, match="does not exist"):
        cuda.set_current_device(cuda.device_count)


# -- memory ------------------------------------------------------------------------
@pytest.mark.parametrize("place", ["device", "host", "managed"])
@pytest.mark.parametrize("nbytes", [1, 4096, 3 << 20])
def test_allocate_and_locate(cuda, stream, place, nbytes):
    allocation = cuda.allocate(PLACES[place], nbytes, stream, np.dtype(np.float32))
    try:
        assert allocation.ptr and allocation.nbytes == nbytes
        assert allocation.device == PLACES[place]
        assert cuda.locate(allocation.ptr) == PLACES[place]
        assert cuda.locate(allocation.ptr + nbytes - 1) == PLACES[place]
    finally:
        cuda.free(allocation, stream)
        cuda.free(allocation, stream)  # a second free does nothing


@pytest.mark.parametrize("place", ["device", "host", "managed"])
def test_own_allocations_are_classified_without_the_driver(
    cuda, stream, place, monkeypatch
):
    """The kind of a buffer the backend allocated is remembered by base address (a
    copy between its own buffers asks the driver nothing) and forgotten at free."""
    from stflow.backends import _cuda_driver as _cu

    allocation = cuda.allocate(PLACES[place], 4096, stream, np.dtype(np.uint8))
    ptr = allocation.ptr
    from_driver = cuda.pointer_kind(ptr + 1)  # not a base: asks the driver
    asked = []
    real = _cu.driver.cuPointerGetAttributes
    monkeypatch.setattr(
        _cu.driver,
        "cuPointerGetAttributes",
        lambda *args: asked.append(args) or real(*args),
    )
    assert cuda.pointer_kind(ptr) == from_driver and not asked
    cuda.free(allocation, stream)
    sync(cuda, stream)
    cuda.pointer_kind(ptr)  # freed: the driver answers
    assert len(asked) == 1


@pytest.mark.parametrize("place", ["device", "host", "managed"])
def test_zero_byte_allocation(cuda, stream, place):
    allocation = cuda.allocate(PLACES[place], 0, stream, np.dtype(np.uint8))
    assert allocation.ptr == 0 and allocation.nbytes == 0
    cuda.free(allocation, stream)
    cuda.copy(allocation.ptr, allocation.ptr, 0, stream)
    cuda.fill(allocation.ptr, 0, b"\x01\x02", stream)


def test_device_allocation_without_a_stream_is_usable_at_once(cuda, stream):
    allocation = cuda.allocate(0, 1 << 20, None, np.dtype(np.uint8))
    cuda.fill(allocation.ptr, 1 << 20, b"\x07", stream)
    out = np.zeros(1 << 20, np.uint8)
    cuda.copy(out.ctypes.data, allocation.ptr, out.nbytes, stream)
    sync(cuda, stream)
    assert (out == 7).all()
    cuda.free(allocation, None)


def test_locate_pageable_and_registered_host_memory(cuda):
    small = np.zeros(16)
    assert cuda.locate(small.ctypes.data) == HOST
    assert cuda.register_host(np.zeros(0)) is None  # nothing to page-lock
    big = np.zeros(1 << 18)  # 2 MiB
    token = cuda.register_host(big)
    try:
        assert token is not None
        assert cuda.locate(big.ctypes.data) == HOST
        assert cuda.register_host(big) == token  # shared, counted
        cuda.unregister_host(token)
        assert cuda.is_pinned(big.ctypes.data, big.nbytes)  # one user left
    finally:
        cuda.unregister_host(token)
    cuda.settle_host_registrations()  # the last one is deferred
    assert not cuda.is_pinned(big.ctypes.data, big.nbytes)
    cuda.unregister_host(None)


def test_unregistering_is_deferred_and_registering_again_waits_for_it(cuda):
    big = np.zeros(64 << 17)  # 64 MiB, never touched: populated
    token = cuda.register_host(big)
    assert token is not None and cuda.is_pinned(big.ctypes.data, big.nbytes)
    cuda.unregister_host(token)  # returns before the driver call
    again = cuda.register_host(big)  # waits, then registers anew
    assert again == token and cuda.is_pinned(big.ctypes.data, big.nbytes)
    cuda.unregister_host(again)
    cuda.settle_host_registrations()
    assert not cuda.is_pinned(big.ctypes.data, big.nbytes)
    assert not big.any()  # populating wrote nothing


def test_register_host_refusal_is_not_an_error(cuda):
    data = np.frombuffer(bytes(2 << 20), np.uint8)  # read-only pages
    token = cuda.register_host(data)
    cuda.unregister_host(token)


def test_out_of_memory_is_a_memory_error_and_a_cuda_error(cuda):
    with pytest.raises(MemoryError) as info:
        cuda.allocate(0, 1 << 48, None, np.dtype(np.uint8))
    assert isinstance(info.value, CudaError)
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert info.value.code == 2
    assert "device 0" in str(info.value)


def test_place_allocator_uses_the_cuda_backend(cuda_by_default):
    cuda = cuda_by_default
    import stflow as stf

    ptr = stf.data_place.device(0).allocate(4096)
    try:
        assert cuda.locate(ptr) == 0
    finally:
        stf.data_place.device(0).deallocate(ptr, 4096)
    ptr = stf.data_place.managed().allocate(4096)
    assert cuda.locate(ptr) == MANAGED
    stf.data_place.managed().deallocate(ptr, 4096)
    assert stf.data_place.host().allocate(0) == 0


# -- copies ------------------------------------------------------------------------
DIRECTIONS = ["pageable", "host", "managed", "device"]


@pytest.mark.parametrize("source", DIRECTIONS)
@pytest.mark.parametrize("target", DIRECTIONS)
def test_copy_every_direction(cuda, stream, source, target):
    nbytes = (1 << 20) + 3
    expected = np.random.default_rng(7).integers(0, 256, nbytes, dtype=np.uint8)
    src, src_keep = _buffer(cuda, source, nbytes, stream)
    dst, dst_keep = _buffer(cuda, target, nbytes, stream)
    out = np.zeros(nbytes, np.uint8)
    try:
        cuda.copy(src, expected.ctypes.data, nbytes, stream)
        cuda.copy(dst, src, nbytes, stream)
        cuda.copy(out.ctypes.data, dst, nbytes, stream)
        sync(cuda, stream)
        np.testing.assert_array_equal(out, expected)
    finally:
        _release(cuda, src_keep, stream)
        _release(cuda, dst_keep, stream)


@pytest.mark.parametrize("target", ["device", "host", "managed", "pageable"])
def test_copy_from_pageable_memory_reads_it_in_stream_order(cuda, stream, cupy, target):
    """The driver would read a pageable source at call time; stflow must not."""
    flag = cuda.allocate(0, 4, stream, np.dtype(np.int32))
    source = np.zeros(1000, np.int64)
    launch_spin(stream.handle, flag.ptr, 1)  # keeps the stream busy
    cuda.launch_host_func(stream, lambda: source.fill(5))  # runs after the kernel
    dst, keep = _buffer(cuda, target, source.nbytes, stream)
    out = np.zeros(1000, np.int64)
    cuda.copy(dst, source.ctypes.data, source.nbytes, stream)
    cuda.copy(out.ctypes.data, dst, source.nbytes, stream)
    sync(cuda, stream)
    assert (out == 5).all()
    _release(cuda, keep, stream)
    cuda.free(flag, stream)


@pytest.mark.parametrize(
    "source, target",
    [
        ("device", "pageable"),
        ("host", "host"),
        ("pageable", "device"),
        ("host", "pageable"),
    ],
)
def test_copies_never_block_the_host(cuda, stream, cupy, source, target):
    import time

    flag = cuda.allocate(0, 4, stream, np.dtype(np.int32))
    src, src_keep = _buffer(cuda, source, 4096, stream)
    dst, dst_keep = _buffer(cuda, target, 4096, stream)
    cuda.fill(src, 4096, b"\x2a", stream)  # pageable: a host callback
    launch_spin(stream.handle, flag.ptr, 1)
    start = time.perf_counter()
    cuda.copy(dst, src, 4096, stream)
    elapsed = time.perf_counter() - start
    out = np.zeros(4096, np.uint8)
    cuda.copy(out.ctypes.data, dst, 4096, stream)
    sync(cuda, stream)
    assert elapsed < 0.02, f"copy blocked the host for {elapsed * 1e3:.0f} ms"
    assert (out == 42).all()
    _release(cuda, src_keep, stream)
    _release(cuda, dst_keep, stream)
    cuda.free(flag, stream)


# -- fills -------------------------------------------------------------------------
FILLS = [
    (np.int8, -3),
    (np.uint8, 0),
    (np.float16, 1.5),
    (np.int16, 0x0101),  # a 2-byte value of one repeated byte
    (np.float32, 2.5),
    (np.int32, -123456),
    (np.float64, 1.0),
    (np.int64, -2),
    (np.complex64, 1 - 2j),
    (np.complex128, 1.5 + 2.5j),  # 16 bytes
    (np.dtype([("a", "u1"), ("b", "<i2")]), (1, -2)),  # 3 bytes
    (np.dtype([("x", "<f8", (3,))]), ([1.0, 2.0, 3.0],)),  # 24 bytes
    (np.dtype([("x", "<i4", (25,))]), (list(range(25)),)),  # 100 bytes
]


@pytest.mark.parametrize("place", ["device", "host", "managed", "pageable"])
@pytest.mark.parametrize(
    "dtype, value",
    FILLS,
    ids=[f"{np.dtype(d).itemsize}B-{np.dtype(d).str}" for d, _ in FILLS],
)
def test_fill_patterns(cuda, stream, place, dtype, value):
    dtype = np.dtype(dtype)
    element = np.array(value, dtype)
    for count in (1, 1000, (4 << 20) // dtype.itemsize + 1):
        nbytes = count * dtype.itemsize
        ptr, keep = _buffer(cuda, place, nbytes + 8, stream)
        try:
            cuda.fill(ptr, nbytes + 8, b"\xee", stream)  # canary after the data
            cuda.fill(ptr, nbytes, element.tobytes(), stream)
            out = np.empty(count, dtype)
            tail = np.zeros(8, np.uint8)
            cuda.copy(out.ctypes.data, ptr, nbytes, stream)
            cuda.copy(tail.ctypes.data, ptr + nbytes, 8, stream)
            sync(cuda, stream)
            assert (out == element).all(), (count, out[:3])
            assert (tail == 0xEE).all(), "fill wrote past its end"
        finally:
            _release(cuda, keep, stream)


def test_fill_at_unaligned_address(cuda, stream):
    allocation = cuda.allocate(0, 4097, stream, np.dtype(np.uint8))
    pattern = np.float32(3.25).tobytes()
    cuda.fill(allocation.ptr + 1, 4096, pattern, stream)
    out = np.empty(4096, np.uint8)
    cuda.copy(out.ctypes.data, allocation.ptr + 1, 4096, stream)
    sync(cuda, stream)
    assert (out.view(np.float32) == np.float32(3.25)).all()
    cuda.free(allocation, stream)


def test_fill_rejects_a_partial_pattern(cuda, stream):
    with pytest.raises(ValueError, match="whole number"):
        cuda.fill(1 << 12, 10, b"\x01\x02\x03\x04", stream)


# -- streams and events ------------------------------------------------------------
def test_record_counts_and_pools_events(cuda, stream):
    first = cuda.record(stream)
    second = cuda.record(stream)
    assert (first.seq, second.seq) == (1, 2)
    assert stream.recorded == 2 and stream.last_event is second
    assert first.handle is not second.handle
    handle = second.handle
    stream.last_event = None
    del second  # collected: its handle is reusable
    assert any(h is handle for h in stream.events)
    sync(cuda, stream)
    assert cuda.query(first)
    third = cuda.record(stream)
    assert third.seq == 4  # sync() recorded the third event


def test_wait_orders_a_copy_after_a_long_kernel(cuda, stream, cupy):
    other = cuda.create_stream(0)
    flag = cuda.allocate(0, 4, stream, np.dtype(np.int32))
    cuda.fill(flag.ptr, 4, np.int32(-1).tobytes(), stream)
    launch_spin(stream.handle, flag.ptr, 42)
    done = cuda.record(stream)
    assert not cuda.query(done), "the spin kernel should still be running"
    cuda.wait(other, done)
    out = np.zeros(1, np.int32)
    cuda.copy(out.ctypes.data, flag.ptr, 4, other)
    sync(cuda, other)
    assert out[0] == 42
    assert cuda.query(done)
    cuda.free(flag, other)
    cuda.destroy_stream(other)


def test_stream_from_handle(cuda, stream, cupy):
    assert cuda.stream_from_handle(stream.handle) is stream
    legacy = cuda.stream_from_handle(0)
    assert legacy is cuda.stream_from_handle(0) and legacy.handle == 0
    foreign = cupy.cuda.Stream(non_blocking=True)
    wrapped = cuda.stream_from_handle(foreign.ptr)
    assert wrapped is cuda.stream_from_handle(foreign.ptr)
    assert wrapped.handle == foreign.ptr and wrapped.device == 0
    event = cuda.record(wrapped)
    cuda.wait(stream, event)
    cuda.synchronize(event)
    cuda.destroy_stream(wrapped)  # not owned: left alone
    foreign.synchronize()


def test_destroyed_streams_are_reused(cuda):
    first = cuda.create_stream(0)
    handle = first.handle
    cuda.destroy_stream(first)
    second = cuda.create_stream(0)
    assert second.handle == handle and second is not first
    assert second.recorded == 0
    cuda.destroy_stream(second)


def test_host_streams_live_on_the_current_device(cuda):
    stream = cuda.create_stream(HOST)
    assert stream.device == HOST and stream.ordinal == cuda.current_device()
    sync(cuda, stream)
    cuda.destroy_stream(stream)


@pytest.mark.parametrize("handle", [1, 2])
def test_synchronize_producer_of_default_streams(cuda, handle):
    cuda.synchronize_producer(handle)


def test_synchronize_producer_waits_for_the_producer(cuda, cupy):
    producer = cupy.cuda.Stream(non_blocking=True)
    flag = cupy.full(1, -1, dtype=cupy.int32)
    launch_spin(producer.ptr, flag.data.ptr, 9)
    cuda.synchronize_producer(producer.ptr)
    assert producer.done
    assert int(flag.get()[0]) == 9


def test_timestamps_share_the_host_clock(cuda, stream, cupy):
    import time

    flag = cuda.allocate(0, 4, stream, np.dtype(np.int32))
    before = cuda.timestamp(None)
    first = cuda.timestamp(stream)
    launch_spin(stream.handle, flag.ptr, 1)
    second = cuda.timestamp(stream)
    sync(cuda, stream)
    after = time.perf_counter()
    times = [cuda.timestamp_seconds(s) for s in (before, first, second)]
    assert times[0] - 0.001 <= times[1] <= times[2] <= after + 0.001
    assert times[2] - times[1] > 0.02, "the spin kernel lies between the stamps"
    cuda.free(flag, stream)


# -- host callbacks ----------------------------------------------------------------
def test_host_callbacks_run_in_stream_order(cuda, stream, cupy):
    pinned = cuda.allocate(HOST, 4, stream, np.dtype(np.int32))
    view = cuda.host_array(pinned, (1,), np.dtype(np.int32), readonly=True)
    cuda.fill(pinned.ptr, 4, np.int32(0).tobytes(), stream)
    launch_spin(stream.handle, pinned.ptr, 5)
    seen = []
    threads = set()
    # Host nodes of graphs that earlier tests recorded are kept until those graphs
    # are released (collected): only this test's callables are checked.
    earlier = set(cuda._host_funcs)
    for i in range(3):

        def callback(i=i):
            seen.append((i, int(view[0]), callback_state.active))
            threads.add(threading.get_ident())

        cuda.launch_host_func(stream, callback)
    sync(cuda, stream)
    assert seen == [(0, 5, True), (1, 5, True), (2, 5, True)]
    assert threading.get_ident() not in threads
    assert callback_state.active is False
    assert not set(cuda._host_funcs) - earlier, "callables must be dropped once they ran"
    cuda.free(pinned, stream)


def test_host_callback_exception_goes_to_the_error_sink(cuda, stream):
    errors = []
    stream.error_sink = errors.append

    def callback():
        raise KeyError("boom")

    cuda.launch_host_func(stream, callback)
    sync(cuda, stream)
    assert len(errors) == 1 and isinstance(errors[0], KeyError)


def test_host_callback_cannot_block_on_the_device(cuda, stream):
    errors = []
    stream.error_sink = errors.append
    event = cuda.record(stream)
    cuda.launch_host_func(stream, lambda: cuda.synchronize(event))
    sync(cuda, stream)
    assert len(errors) == 1 and isinstance(errors[0], ScopeError)


# -- views -------------------------------------------------------------------------
def test_task_view_is_a_cuda_array_interface(cuda, stream, cupy):
    allocation = cuda.allocate(0, 80, stream, np.dtype(np.float64))
    cuda.fill(allocation.ptr, 80, np.float64(2.0).tobytes(), stream)
    sync(cuda, stream)
    view = cuda.task_view(allocation, 16, (2, 3), np.dtype(np.float64), readonly=True)
    interface = view.__cuda_array_interface__
    # API I-34: the view of a read() dependency advertises writable memory, as the
    # reference's does (PyTorch refuses read-only CUDA Array Interface objects).
    assert interface["data"] == (allocation.ptr + 16, False)
    assert view.read_only_access
    assert interface["shape"] == (2, 3) and interface["stream"] is None
    assert float(cupy.asarray(view).sum()) == 12.0
    cuda.free(allocation, stream)
