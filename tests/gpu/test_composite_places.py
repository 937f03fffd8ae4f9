"""Composite data places on CUDA: one virtual range whose chunks are physical memory
of the devices the mapper names (checked through the driver), written by the members
of a grid task on their own streams."""

from __future__ import annotations

import numpy as np

import stflow as stf
from stflow.testing import cupy_array, cupy_stream


def _chunk_devices(ptr: int, nbytes: int, chunk: int) -> list[int]:
    """The device holding each ``chunk`` of ``[ptr, ptr + nbytes)``, asked from the
    driver (``cuMemRetainAllocationHandle`` / ``cuMemGetAllocationPropertiesFromHandle``)."""
    from cuda.bindings import driver

    devices = []
    for offset in range(0, nbytes, chunk):
        err, handle = driver.cuMemRetainAllocationHandle(ptr + offset)
        assert not err, err
        try:
            err, prop = driver.cuMemGetAllocationPropertiesFromHandle(handle)
            assert not err, err
            devices.append(int(prop.location.id))
        finally:
            driver.cuMemRelease(handle)
    return devices


def test_each_chunk_lives_on_the_device_its_member_names(cuda, cupy):
    count = cuda.device_count
    granularity = cuda.composite_granularity(list(range(count)))
    grid = stf.exec_place_grid.create(
        [stf.exec_place.device(i % count) for i in range(4)],
        mapper=stf.partitions.cyclic(granularity),
    )
    X = np.arange(6 * granularity // 8, dtype=np.float64)  # 6 chunks
    with stf.context(backend="cuda") as ctx:
        x = ctx.logical_data(X)
        with ctx.task(grid, x.rw()) as t:
            view = t.get_arg_cai(0)
            ptr = view.ptr
            assert view.__cuda_array_interface__["data"][0] == ptr
            per_member = X.size // 6
            for chunk in range(6):
                member = chunk % 4
                with cupy_stream(t.get_stream_at_index(member)):
                    a = cupy_array(view)
                    a[chunk * per_member : (chunk + 1) * per_member] *= -1
            placed = _chunk_devices(ptr, X.nbytes, granularity)
    assert placed == [(chunk % 4) % count for chunk in range(6)]
    np.testing.assert_array_equal(X, -np.arange(X.size, dtype=np.float64))


def test_composite_data_moves_between_devices_and_host(cuda, cupy):
    count = cuda.device_count
    grid = stf.exec_place_grid.create(
        [stf.exec_place.device(i % count) for i in range(2)],
        mapper=stf.partitions.blocked(),
    )
    X = np.arange(1 << 20, dtype=np.float32)
    with stf.context(backend="cuda") as ctx:
        x = ctx.logical_data(X)
        for step in range(3):
            with ctx.task(grid, x.rw()) as t:
                with cupy_stream(t.get_stream_at_index(1)):
                    cupy_array(t.get_arg_cai(0))[:] += 1
            with ctx.task(stf.exec_place.device(step % count), x.rw()) as t:
                with cupy_stream(t.stream_ptr()):
                    cupy_array(t.get_arg_cai(0))[:] *= 2
    expected = np.arange(1 << 20, dtype=np.float32)
    for _ in range(3):
        expected = (expected + 1) * 2
    np.testing.assert_array_equal(X, expected)


def test_grid_tasks_in_graph_mode(cuda, cupy):
    count = cuda.device_count
    grid = stf.exec_place_grid.create(
        [stf.exec_place.device(i % count) for i in range(2)],
        mapper=stf.partitions.blocked(),
    )
    X = np.ones(4096)
    with stf.context(backend="cuda", use_graph=True) as ctx:
        x = ctx.logical_data(X)
        for _ in range(4):
            with ctx.task(grid, x.rw()) as t:
                with cupy_stream(t.get_stream_at_index(1)):
                    cupy_array(t.get_arg_cai(0))[:] *= 3
    np.testing.assert_array_equal(X, np.full(4096, 81.0))
