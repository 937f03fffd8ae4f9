"""Tasks touching data on another device, or in host memory, from a device kernel."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow.testing import cupy_array, cupy_stream

STEPS = {
    "dev0 then dev1": ([(0, None), (1, None)], 2),
    "dev0 writes at dev1": ([(0, 1)], 1),
    "dev1 writes at dev0": ([(1, 0)], 1),
    "host writes at dev1": ([("host", 1)], 1),
    "host, dev1, host": ([("host", None), (1, None), ("host", None)], 3),
    "dev1 at dev0, then dev0": ([(1, 0), (0, None)], 2),
    "dev0 at dev1, then dev1": ([(0, 1), (1, None)], 2),
    "dev0 at host": ([(0, "host")], 1),
}


@pytest.mark.parametrize("name", list(STEPS))
def test_kernels_reach_peer_and_host_instances(cuda, cupy, name):
    if cuda.device_count < 2:
        pytest.skip("needs two devices")
    steps, expected = STEPS[name]
    X = np.zeros(1000)
    with stf.context(backend="cuda") as ctx:
        x = ctx.logical_data(X)
        for where, at in steps:
            place = (
                stf.exec_place.host() if where == "host" else stf.exec_place.device(where)
            )
            dplace = (
                None
                if at is None
                else stf.data_place.host()
                if at == "host"
                else stf.data_place.device(at)
            )
            with ctx.task(place, x.rw(dplace)) as t:
                with cupy_stream(t.stream_ptr()):
                    view = cupy_array(t.get_arg_cai(0))
                    view += 1.0
        np.testing.assert_array_equal(ctx.wait(x), np.full(1000, float(expected)))
    np.testing.assert_array_equal(X, np.full(1000, float(expected)))


def test_cupy_task_writes_data_on_a_peer_device(cuda, cupy):
    if cuda.device_count < 2:
        pytest.skip("needs two devices")
    from stflow.interop.cupy import cupy_task

    Y = np.zeros(256)
    with stf.context(backend="cuda") as ctx:
        y = ctx.logical_data(Y)
        with cupy_task(ctx, stf.exec_place.device(0), y.rw(stf.data_place.device(1))) as (
            a,
        ):
            a += 2.0  # a kernel on device 0 writing device 1
    np.testing.assert_array_equal(Y, np.full(256, 2.0))


def test_two_contexts_share_the_page_locking_of_one_array(cuda, cupy):
    X = np.ones(1 << 16)
    first = stf.context(backend="cuda")
    second = stf.context(backend="cuda")
    a, b = first.logical_data(X), second.logical_data(X)
    assert cuda.is_pinned(X.ctypes.data, X.nbytes)
    first.wait(a)
    first.finalize()
    assert cuda.is_pinned(X.ctypes.data, X.nbytes)  # still registered for `second`
    with second.task(stf.exec_place.host(), b.rw()) as t:  # kernel on the host instance
        with cupy_stream(t.stream_ptr()):
            view = cupy_array(t.get_arg_cai(0))
            view += 1.0
    second.finalize()
    cuda.settle_host_registrations()  # unregistering is deferred
    assert not cuda.is_pinned(X.ctypes.data, X.nbytes)
    np.testing.assert_array_equal(X, np.full(1 << 16, 2.0))
