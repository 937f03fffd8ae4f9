"""Properties of the emulated backend itself."""

from __future__ import annotations

import ctypes
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


def test_an_event_is_a_position_in_its_stream():
    """Records are not stream operations: an event completes when the work enqueued
    before it has run, and an event of an idle stream is complete at once."""
    import threading

    backend = get_backend()
    stream = backend.create_stream(0)
    assert backend.query(backend.record(stream))  # nothing queued
    go = threading.Event()
    backend.enqueue_call(stream, lambda: go.wait(10.0))
    before = backend.record(stream)
    backend.enqueue_call(stream, lambda: None)
    after = backend.record(stream)
    assert not backend.query(before) and not backend.query(after)
    assert backend.pending_calls(stream)
    go.set()
    backend.synchronize(after)
    assert backend.query(before) and backend.query(after)
    assert not backend.pending_calls(stream)
    other = backend.create_stream(0)
    backend.wait(other, after)  # complete: nothing to wait for
    assert not other.queue


def test_the_read_guard_is_armed_only_when_the_body_reaches_the_data(monkeypatch):
    """A task whose body takes no view, address or stream of its data takes no
    fingerprints; one that does is checked."""
    from stflow.backends import _emulated_guard
    from stflow.errors import AccessModeError

    taken = []
    fingerprints = _emulated_guard._fingerprints
    monkeypatch.setattr(
        _emulated_guard,
        "_fingerprints",
        lambda entries: taken.append(1) or fingerprints(entries),
    )
    ctx = stf.context(backend="emulated")
    x, y = ctx.logical_data(np.arange(4.0)), ctx.logical_data(np.zeros(4))
    for _ in range(3):
        with ctx.task(x.read(), y.rw()):
            pass
    ctx.fence()
    assert taken == []
    with ctx.task(x.read(), y.rw()) as t:
        t.stream_ptr()
    with ctx.task(x.read(), y.rw()) as t:
        np.asarray(t.get_arg_cai(1))[:] = 1.0
    ctx.fence()
    assert len(taken) == 2
    with pytest.raises(AccessModeError, match="task 'writer' declared read"):
        with ctx.task(x.read(), symbol="writer") as t:
            address = t.get_arg(0)
            np.ctypeslib.as_array((ctypes.c_double * 4).from_address(address))[:] = -1
    ctx.finalize()


def test_run_body_arrays_are_fresh_views_and_read_only_for_reads():
    """t.run arrays are views of arrays kept per allocation: a body reshaping one or
    asking for write access to a read() one changes nothing for the next task."""
    seen = []

    def body(xp, a, b):
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a.flags.writeable = True  # its base is read-only too
        b += a
        seen.append((a.shape, b.flags.writeable))
        a.shape = (2, 2)  # the next task's array is not reshaped

    with stf.context(backend="emulated") as ctx:
        x, y = ctx.logical_data(np.arange(4.0)), ctx.logical_data(np.zeros(4))
        for _ in range(3):
            with ctx.task(x.read(), y.rw()) as t:
                t.run(body)
        assert ctx.wait(y).tolist() == [0.0, 3.0, 6.0, 9.0]
    assert seen == [((4,), True)] * 3
