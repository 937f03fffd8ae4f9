"""Properties of the emulated backend itself."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import stflow as stf
from stflow.backends.emulated import get_backend
from stflow.emulated import launch
from stflow.errors import ScopeError


def test_device_memory_is_separate_and_poisoned():
    backend = get_backend()
    allocation = backend.allocate(0, 32, None, np.dtype(np.float64))
    assert backend.locate(allocation.ptr) == 0
    assert backend.locate(allocation.ptr + 31) == 0
    assert backend.locate(np.zeros(4).ctypes.data) == -1
    array = backend.host_array(allocation, (4,), np.dtype(np.float64), False)
    assert np.isnan(array).all()
    array[:] = 1.0
    backend.free(allocation, None)
    assert np.isnan(array).all()  # freed memory is poisoned again


def test_launched_work_runs_in_stream_order_and_errors_are_deferred():
    order = []
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(np.zeros(3))
        with ctx.task(ld.rw()) as t:
            (view,) = [t.get_arg_cai(0)]
            launch(t.stream_ptr(), lambda a: order.append(("first", a.copy())), view)
            launch(t.stream_ptr(), lambda a: a.fill(2.0), view)
            launch(t.stream_ptr(), lambda: order.append("second"))
            launch(t.stream_ptr(), lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            ctx.wait(ld)
        assert ctx.wait(ld).tolist() == [2.0] * 3
    assert order[0][0] == "first" and order[1] == "second"


def test_views_expose_the_array_interface_and_expire():
    with stf.context(backend="emulated") as ctx:
        a, b = ctx.logical_data(np.arange(3.0)), ctx.logical_data(np.zeros(3))
        with ctx.task(a.read(), b.rw()) as t:
            read_view, write_view = t.args_cai()
            assert not hasattr(read_view, "__cuda_array_interface__")
            assert read_view["data"][1] is True and write_view["data"][1] is False
            assert read_view.__dlpack_device__() == (1, 0)
            with pytest.raises(ValueError):
                np.asarray(read_view)[0] = 5.0  # read() views are read-only
            np.asarray(write_view)[:] = np.asarray(read_view) + 1
            np.testing.assert_array_equal(np.from_dlpack(write_view), [1, 2, 3])
        with pytest.raises(ScopeError, match="after the task ended"):
            np.asarray(write_view)
        np.testing.assert_array_equal(ctx.wait(b), [1.0, 2.0, 3.0])


def test_launch_validates_its_arguments():
    with pytest.raises(TypeError, match="callable"):
        launch(0, 42)
    with pytest.raises(ValueError, match="not a stream of the emulated backend"):
        launch(0x7, print)


def test_host_callback_cannot_submit_work():
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(np.zeros(1))
        ctx.host_launch(ld.rw(), fn=lambda a: ctx.task(ld.read()))
        with pytest.raises(ScopeError, match="host callback"):
            ctx.wait(ld)


@pytest.mark.parametrize("value, ok", [("3", True), ("0", False), ("x", False)])
def test_device_count_from_the_environment(value, ok):
    code = (
        "import stflow as stf\n"
        "with stf.context(backend='emulated') as ctx:\n"
        "    print(ctx._runtime.backend.device_count)\n"
    )
    env = {"STFLOW_EMULATED_DEVICES": value, "PATH": ""}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **env},
    )
    if ok:
        assert result.stdout.strip() == value
    else:
        assert result.returncode != 0 and "STFLOW_EMULATED_DEVICES" in result.stderr


def test_seed_from_the_environment_is_used():
    code = "from stflow.backends.emulated import get_backend\nprint(get_backend().seed)\n"
    env = {**__import__("os").environ, "STFLOW_EMULATION_SEED": "1234"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert result.stdout.strip() == "1234"


def test_arrays_from_views_outlive_the_context_safely():
    import gc

    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data_empty((1 << 16,), np.float64)
        with ctx.task(stf.exec_place.device(0), ld.write()) as t:
            kept = np.asarray(t.get_arg_cai(0))
            kept[:] = 1.0
    gc.collect()
    churn = [np.full(1 << 16, 7.0) for _ in range(20)]
    assert np.isnan(kept).all() and len(churn) == 20  # poisoned, never released


def test_place_factories_do_not_emit_the_fallback_notice():
    code = (
        "import warnings, numpy as np, stflow as stf\n"
        "warnings.simplefilter('error')\n"
        "ctx = stf.context(backend='emulated')\n"
        "print(stf.exec_place.device(1).device_id)\n"
        "ctx.finalize()\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "STFLOW_BACKEND"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"
