"""Reliability regressions: scope bodies that never run, views and handles that outlive
their task or context, deeply nested scopes, and errors of device work."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from helpers.bodies import _run, add_to

import stflow as stf
import stflow.emulated  # stf.emulated.launch (a submodule: imported, not lazy)
from stflow.errors import ScopeError


def _fill(sctx, ld, value):
    with sctx.task(ld.write()) as t:
        _run(t, lambda xp, a: a.fill(value), 0)


# -- a body that never runs has no effect at all -----------------------------------------


def test_a_write_in_repeat_zero_leaves_the_data_alone(backend):
    X = np.arange(4.0)
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)
        with sctx.repeat(0):
            _fill(sctx, x, 7.0)
    np.testing.assert_array_equal(X, np.arange(4.0))


def test_repeat_zero_inside_a_graph_scope_and_after_device_work(backend):
    X = np.arange(4.0)
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)
        with sctx.task(x.rw()) as t:  # on the device: host copy stale
            add_to(t, 0, None, 1.0)
        with sctx.graph_scope():
            with sctx.repeat(0):
                _fill(sctx, x, 7.0)
            with sctx.task(x.rw()) as t:
                add_to(t, 0, None, 10.0)
    np.testing.assert_array_equal(X, np.arange(4.0) + 11.0)


def test_a_host_read_in_repeat_zero_in_a_while_loop_keeps_the_device_write(backend):
    X = np.zeros(4)
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)
        counter = sctx.logical_data(np.array([2], dtype=np.int64))
        with sctx.task(x.rw()) as t:  # the only valid copy: on a device
            add_to(t, 0, None, 5.0)
        with sctx.while_loop() as loop:
            with sctx.repeat(0):
                with sctx.task(stf.exec_place.host(), x.read(stf.data_place.host())):
                    pass
            with sctx.task(counter.rw()) as t:
                _run(t, lambda xp, a: a.__isub__(1), 0)
            loop.continue_while(counter > 0)
    np.testing.assert_array_equal(X, np.full(4, 5.0))


# -- views and handles outlive nothing ----------------------------------------------------


def test_views_of_an_ended_task_refuse_every_use(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        with ctx.task(x.rw()) as t:
            view = t.get_arg_cai(0)
            copied = copy.copy(view)
        for stale in (view, copied):
            if backend == "emulated":
                with pytest.raises(ScopeError, match="after the task ended"):
                    np.asarray(stale)
                with pytest.raises(ScopeError, match="after the task ended"):
                    stf.emulated.launch(t.stream_ptr(), lambda a: None, stale)
            else:
                with pytest.raises(ScopeError, match="after the task ended"):
                    stale.__cuda_array_interface__  # noqa: B018


def test_views_contexts_and_data_refuse_pickle_and_copy(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        with ctx.task(x.rw()) as t:
            view = t.get_arg_cai(0)
            with pytest.raises(TypeError, match="cannot be pickled"):
                pickle.dumps(view)
            with pytest.raises(TypeError, match="cannot be pickled"):
                pickle.dumps(t)
        for thing in (ctx, x, x.rw()):
            with pytest.raises(TypeError, match="cannot be pickled"):
                pickle.dumps(thing)
        for thing in (ctx, x):
            with pytest.raises(TypeError, match="cannot be copied"):
                copy.copy(thing)
            with pytest.raises(TypeError, match="cannot be copied"):
                copy.deepcopy(thing)
        assert copy.copy(x.rw()).ld is x  # a dependency is a value


# -- deep nesting ---------------------------------------------------------------------------


def test_deeply_nested_repeats_run_or_fail_loudly(backend):
    X = np.zeros(2)
    depth = 1200
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)
        scopes = [sctx.repeat(1) for _ in range(depth)]
        for scope in scopes:
            scope.__enter__()
        with sctx.task(x.rw()) as t:
            add_to(t, 0, None, 1.0)
        for scope in reversed(scopes):
            scope.__exit__(None, None, None)
    np.testing.assert_array_equal(X, np.ones(2))


def test_an_error_of_device_work_in_nested_scopes_reaches_finalize(backend):
    X = np.zeros(3)
    with pytest.raises(BaseException) as caught:
        with stf.stackable_context(backend=backend) as sctx:
            x = sctx.logical_data(X)
            with sctx.repeat(2):
                with sctx.repeat(3):
                    with sctx.task(x.rw()) as t:
                        _run(t, _fail, 0)
    errors = [caught.value]  # the oldest; one per call (API I-7)
    while sctx.pending_errors():
        with pytest.raises(ValueError) as later:
            sctx.check_errors()
        errors.append(later.value)
    assert all("body failed on purpose" in str(e) for e in errors)


def _fail(xp, a):
    raise ValueError("body failed on purpose")
