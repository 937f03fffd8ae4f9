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
            place = stf.exec_place.host() if where == "host" else stf.exec_place.device(where)
            dplace = (None if at is None else stf.data_place.host() if at == "host"
                      else stf.data_place.device(at))
            with ctx.task(place, x.rw(dplace)) as t:
                with cupy_stream(t.stream_ptr()):
                    view = cupy_array(t.get_arg_cai(0))
                    view += 1.0
        np.testing.assert_array_equal(ctx.wait(x), np.full(1000, float(expected)))
    np.testing.assert_array_equal(X, np.full(1000, float(expected)))
