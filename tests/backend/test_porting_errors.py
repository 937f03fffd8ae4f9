"""Porting parity (issue 24): deferred errors name the work that failed, and the tuple
of ``t.views()`` refuses to be converted to an array as a whole."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow.emulated import launch


def _fail(*arrays):
    raise ValueError("boom")


def _deferred(ctx):
    with pytest.raises(ValueError, match="boom") as caught:
        ctx.finalize()
    return "\n".join(getattr(caught.value, "__notes__", []))


@pytest.mark.parametrize("scoped", [False, True], ids=["stream", "graph_scope"])
def test_launched_work_that_fails_names_its_task(scoped):
    ctx = stf.stackable_context(backend="emulated")
    ld = ctx.logical_data(np.zeros(4))
    if scoped:
        ctx.push()
    with ctx.task(ld.rw(), symbol="bad") as t:
        launch(t.stream_ptr(), _fail, *t.views())
    if scoped:
        ctx.pop()
    assert "raised by work launched from task 'bad'" in _deferred(ctx)


def test_run_bodies_that_fail_name_their_task():
    ctx = stf.context(backend="emulated")
    ld = ctx.logical_data(np.zeros(4))
    with ctx.task(ld.rw(), symbol="bad") as t:
        t.run(lambda xp, x: _fail(x))
    assert "task 'bad'" in _deferred(ctx)


def test_kernels_that_fail_name_their_cuda_kernel():
    ctx = stf.context(backend="emulated")
    ld = ctx.logical_data(np.zeros(4))
    with ctx.cuda_kernel(ld.rw(), symbol="bad") as k:
        k.launch(_fail, 1, 1, (k.get_arg(0),))
    assert "raised by a kernel launched from cuda_kernel 'bad'" in _deferred(ctx)


def test_host_callbacks_that_fail_name_their_host_launch():
    ctx = stf.context(backend="emulated")
    ld = ctx.logical_data(np.zeros(4))
    ctx.host_launch(ld.read(), fn=_fail, symbol="bad")
    assert "raised by host_launch 'bad'" in _deferred(ctx)


def test_unnamed_tasks_are_named_by_number():
    ctx = stf.context(backend="emulated")
    ld = ctx.logical_data(np.zeros(4))
    with ctx.task(ld.rw()) as t:
        launch(t.stream_ptr(), _fail, *t.views())
    assert "raised by work launched from task #" in _deferred(ctx)


def test_fence_does_not_raise_deferred_errors_as_documented():
    ctx = stf.context(backend="emulated")
    ld = ctx.logical_data(np.zeros(4))
    ctx.host_launch(ld.read(), fn=_fail, symbol="bad")
    ctx.fence()  # never raises (as the reference)
    assert "host_launch 'bad'" in _deferred(ctx)


def _array_libraries():
    yield "numpy.asarray", np.asarray
    yield "numpy.array", np.array
    try:
        import torch
    except ImportError:
        return
    yield "torch.as_tensor", torch.as_tensor
    yield "torch.tensor", torch.tensor
    yield "torch.from_dlpack", torch.from_dlpack


@pytest.mark.parametrize(
    "name, convert",
    list(_array_libraries()),
    ids=[name for name, _ in _array_libraries()],
)
def test_the_views_tuple_refuses_conversion_to_an_array(backend, name, convert):
    x, y = np.zeros(4), np.zeros(4)
    with stf.context(backend=backend) as ctx:
        lx, ly = ctx.logical_data(x), ctx.logical_data(y)
        with ctx.task(lx.rw(), ly.rw()) as t:
            with pytest.raises(TypeError, match="index it"):
                convert(t.views())
            with pytest.raises(TypeError, match="index it"):
                convert(t.args_cai())  # the same tuple for 2+ views
            views = t.views()
            assert isinstance(views, tuple) and len(views) == 2
            first, second = views  # unpacking and indexing still work
            assert views[0] is first


def test_every_array_protocol_of_the_views_tuple_raises_type_error():
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(np.zeros(4))
        with ctx.task(ld.rw()) as t:
            views = t.views()
            for name in ("__array_interface__", "__cuda_array_interface__"):
                with pytest.raises(TypeError, match="one per dependency"):
                    getattr(views, name)
            for call in (views.__array__, views.__dlpack__, views.__dlpack_device__):
                with pytest.raises(TypeError, match="numpy.asarray"):
                    call()


def test_writes_through_an_indexed_view_reach_the_data():
    x = np.zeros(4)
    with stf.context(backend="emulated") as ctx:
        lx = ctx.logical_data(x)
        with ctx.task(lx.rw()) as t:
            (view,) = t.views()
            np.asarray(view)[:] = 7.0
    assert x.tolist() == [7.0] * 4


def test_an_emulated_view_says_why_it_has_no_cuda_array_interface():
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(np.zeros(4))
        with ctx.task(ld.rw()) as t:
            (view,) = t.views()
            assert not hasattr(view, "__cuda_array_interface__")  # probes stay false
            with pytest.raises(AttributeError, match="emulated backend") as caught:
                view.__cuda_array_interface__
            assert "numpy.asarray(view)" in str(caught.value)
            assert type(view).__name__ == "EmulatedView"  # as the docs say
            assert repr(view).startswith("EmulatedView(")
            assert np.asarray(view).ctypes.data == view.ptr  # zero-copy still
