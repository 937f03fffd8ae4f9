"""Capabilities the runtime calls unconditionally (``backends/_base.py``, the block
"declared capabilities"), and the view protocol (``_views.ViewLifetime``): what was
probed by name before issue 28 (see ``tests/unit/test_contract.py``)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import stflow as stf
import stflow.emulated  # a submodule: imported, not lazy
from stflow.backends import get_backend
from stflow.backends._base import Backend
from stflow.errors import BackendUnavailableError, ScopeError
from stflow.interop._common import recorded_into_a_graph, task_label


@pytest.mark.parametrize("name", ["emulated", "null"])
def test_backends_without_driver_contexts_renew_none(name):
    assert get_backend(name).revalidate_contexts() is False


def test_a_backend_without_python_device_work_names_the_remedy():
    """The contract's defaults, which the CUDA backend keeps (the null backend runs
    Python device work, so its stream serves here)."""
    null = get_backend("null")
    stream = null.create_stream(0)
    try:
        with pytest.raises(
            BackendUnavailableError, match="cannot run Python callables.*ctx.cuda_kernel"
        ):
            Backend.launch_callable(
                null, stream, print, (), "work launched from task 'x'"
            )
        with pytest.raises(BackendUnavailableError, match="cudaGraphSetConditional"):
            Backend.set_loop_condition(null, 1, 0)
    finally:
        null.destroy_stream(stream)


def test_set_conditional_refuses_a_handle_that_is_no_loop():
    with pytest.raises(ValueError, match="not a live loop condition handle"):
        stf.emulated.set_conditional(0x7FFF_0001, 1)


def test_launched_work_names_its_task_and_its_function():
    def broken(a):
        raise ZeroDivisionError("in launched work")

    with pytest.raises(ZeroDivisionError) as caught:
        with stf.context(backend="emulated") as ctx:
            x = ctx.logical_data(np.ones(4), name="x")
            with ctx.task(x.rw()) as t:
                t.set_symbol("axpy")
                stf.emulated.launch(t.stream_ptr(), broken, t.get_arg_cai(0))
    assert any(
        "raised by work launched from task 'axpy', test_launched_work_names_"
        "its_task_and_its_function.<locals>.broken()" in note
        for note in caught.value.__notes__
    )


def test_launch_from_stream_ordered_work_is_refused():
    refused = []

    def inner():
        try:
            stf.emulated.launch(handle, print)
        except ScopeError as exc:
            refused.append(str(exc))

    with stf.context(backend="emulated") as ctx:
        x = ctx.logical_data(np.ones(4))
        with ctx.task(x.rw()) as t:
            handle = int(t.stream_ptr())
            stf.emulated.launch(t.stream_ptr(), inner)
    assert refused and "from work running in stream order" in refused[0]


def test_views_say_whether_their_host_access_was_refused():
    with stf.context(backend="emulated") as ctx:
        x = ctx.logical_data(np.ones(4))
        with ctx.task(x.rw()) as t:
            assert not recorded_into_a_graph(t.get_arg_cai(0))
            assert task_label(t) == t._label()
    with stf.context(backend="emulated", use_graph=True) as ctx:
        x = ctx.logical_data(np.ones(4))
        y = ctx.logical_data(np.ones(4))
        with ctx.task(ctx.bundle(a=x, b=y).rw()) as t:
            fields = t.get(0)
            assert recorded_into_a_graph(fields.a) and recorded_into_a_graph(fields.b)
            assert not recorded_into_a_graph(fields)  # a bundle's named tuple
            assert not recorded_into_a_graph(np.ones(2))  # not a task view


def test_views_of_an_ended_task_are_invalid():
    with stf.context(backend="emulated") as ctx:
        x = ctx.logical_data(np.ones(4))
        with ctx.task(x.rw()) as t:
            view = t.get_arg_cai(0)
        with pytest.raises(ScopeError, match="used after the task ended"):
            np.asarray(view)


def test_a_context_that_never_started_is_collected_quietly():
    ctx = stf.context.__new__(stf.context)
    assert repr(ctx) == "context(handle=0, borrowed=False)"
    del ctx
    gc.collect()  # an error in __del__ would fail the test (warnings)


def test_wait_on_data_never_written_gives_the_poison_pattern():
    with stf.context(backend="emulated") as ctx:
        floats = ctx.logical_data_empty((3,), np.float32)
        ints = ctx.logical_data_empty((2,), np.int16)
        assert np.isnan(ctx.wait(floats)).all()
        assert (ctx.wait(ints).view(np.uint8) == 0xA5).all()
