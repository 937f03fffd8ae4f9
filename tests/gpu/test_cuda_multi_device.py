"""Several devices on the CUDA backend (skipped on machines with one GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.gpu import cupy_stream, sync

import stflow as stf
from stflow.backends._base import HOST


@pytest.fixture
def two(cuda):
    if cuda.device_count < 2:
        pytest.skip("needs two CUDA devices")
    yield cuda
    cuda.set_current_device(0)


def test_current_device_and_streams_per_device(two):
    two.set_current_device(1)
    assert two.current_device() == 1
    host_stream = two.create_stream(HOST)
    assert host_stream.ordinal == 1
    two.set_current_device(0)
    stream = two.create_stream(1)
    assert stream.ordinal == 1 and stream.device == 1
    sync(two, stream)
    sync(two, host_stream)
    two.destroy_stream(stream)
    two.destroy_stream(host_stream)


def test_allocation_on_another_device_than_the_stream(two):
    stream = two.create_stream(0)
    allocation = two.allocate(1, 1 << 20, stream, np.dtype(np.uint8))
    assert two.locate(allocation.ptr) == 1
    two.fill(allocation.ptr, 1 << 20, b"\x05", stream)
    out = np.zeros(1 << 20, np.uint8)
    two.copy(out.ctypes.data, allocation.ptr, out.nbytes, stream)
    sync(two, stream)
    assert (out == 5).all()
    two.free(allocation, stream)
    two.destroy_stream(stream)


def test_peer_copy_and_cross_device_wait(two):
    first, second = two.create_stream(0), two.create_stream(1)
    a = two.allocate(0, 4 << 20, first, np.dtype(np.uint8))
    b = two.allocate(1, 4 << 20, second, np.dtype(np.uint8))
    two.fill(a.ptr, 4 << 20, b"\x11", first)
    two.wait(second, two.record(first))  # an event of device 0
    two.copy(b.ptr, a.ptr, 4 << 20, second)
    out = np.zeros(4 << 20, np.uint8)
    two.copy(out.ctypes.data, b.ptr, out.nbytes, second)
    sync(two, second)
    assert (out == 0x11).all()
    two.free(a, first)
    two.free(b, second)
    two.destroy_stream(first)
    two.destroy_stream(second)


def test_foreign_stream_of_device_one(two, cupy):
    with cupy.cuda.Device(1):
        foreign = cupy.cuda.Stream(non_blocking=True)
    wrapped = two.stream_from_handle(foreign.ptr)
    assert wrapped.device == 1 and wrapped.ordinal == 1
    two.synchronize(two.record(wrapped))


def test_chain_across_devices_with_cupy(two, cupy):
    data = np.zeros(1000)
    with stf.context(backend="cuda") as ctx:
        ld = ctx.logical_data(data)
        for step in range(6):
            device = step % 2
            with ctx.task(stf.exec_place.device(device), ld.rw()) as t:
                with cupy.cuda.Device(device), cupy_stream(t.stream_ptr()):
                    view = cupy.asarray(t.get_arg_cai(0))
                    assert view.device.id == device
                    view += 1
            ctx.host_launch(ld.rw(), fn=lambda a: a.__imul__(2))
    expected = 0.0
    for _ in range(6):
        expected = (expected + 1) * 2
    np.testing.assert_array_equal(data, np.full(1000, expected))
