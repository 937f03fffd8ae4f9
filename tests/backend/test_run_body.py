"""task.run(fn): one body for every backend, in stream order, in every mode."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import stflow as stf


@pytest.mark.parametrize("use_graph", [False, True], ids=["streams", "graph"])
def test_a_body_runs_in_stream_order_on_every_backend(backend, use_graph):
    X, Y = np.ones(8), np.full(8, 3.0)
    with stf.context(backend=backend, use_graph=use_graph) as ctx:
        x, y = ctx.logical_data(X), ctx.logical_data(Y)
        with ctx.task(x.rw(), y.read()) as t:
            t.run(lambda xp, a, b: a.__iadd__(2 * b))  # every dependency
        with ctx.task(y.read(), x.rw(), ctx.token().rw()) as t:
            t.run(lambda xp, a: a.__imul__(xp.float64(10)), 1)  # only dependency 1
    np.testing.assert_array_equal(X, np.full(8, 70.0))


def test_loops_of_a_stackable_context(backend):
    X = np.zeros(4)
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)
        with sctx.repeat(3):
            with sctx.task(x.rw()) as t:
                t.run(lambda xp, a: a.__iadd__(1.0))
    np.testing.assert_array_equal(X, np.full(4, 3.0))


def test_a_non_callable_is_refused(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(2))
        with ctx.task(x.rw()) as t:
            with pytest.raises(TypeError, match="callable"):
                t.run(3)


def test_a_body_behind_an_enqueued_body_sees_its_results(backend):
    """A ``t.run`` body is enqueued in stream order; a later task whose body reads
    its data from the host (views, addresses) first waits for it (the emulated
    backend's promise: on CUDA a body touches its data on the device)."""
    if backend != "emulated":
        pytest.skip("host views of task data are the emulated backend's")
    X = np.zeros(16)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        for _ in range(5):
            with ctx.task(x.rw()) as t:
                t.run(lambda xp, a: a.__iadd__(1.0))
        with ctx.task(stf.exec_place.host(), x.rw()) as t:
            (view,) = t.views()
            host = np.asarray(view)
            assert (host == 5.0).all()  # the five bodies ran before the view
            host *= 2.0
    np.testing.assert_array_equal(X, np.full(16, 10.0))


def test_a_body_in_stream_order_writing_read_data_is_caught():
    """The emulated backend's read guard holds for bodies it does not wait for: the
    fingerprints are taken in stream order, before the body."""
    from stflow.errors import AccessModeError

    ctx = stf.context(backend="emulated")
    x, y = ctx.logical_data(np.zeros(8)), ctx.logical_data(np.ones(8))
    with ctx.task(x.rw()) as t:
        t.run(lambda xp, a: a.__iadd__(1.0))  # pending when the next task starts

    def sneaky(xp, a, b):
        b += a
        ctypes.c_double.from_address(a.ctypes.data).value = 7.0  # past read-only

    with ctx.task(x.read(), y.rw(), symbol="sneaky") as t:
        t.run(sneaky)
    with pytest.raises(AccessModeError, match="task 'sneaky' declared read"):
        ctx.finalize()


def test_a_reduction_body_and_chosen_arguments(backend):
    """A body of a ``reduce`` dependency gets its private instance; chosen argument
    indices give those arguments only, and a token among them is refused."""
    from stflow.errors import TokenArgumentError

    with stf.context(backend=backend) as ctx:
        total = ctx.logical_data(np.zeros(4))
        for k in range(5):
            with ctx.task(total.reduce("sum")) as t:
                t.run(lambda xp, a, k=k: a.__iadd__(float(k)))
        x, token = ctx.logical_data(np.ones(4)), ctx.token()
        with ctx.task(token.rw(), x.rw(), total.read()) as t:
            t.run(lambda xp, a, b: a.__iadd__(b), 1, 2)
            with pytest.raises(TokenArgumentError):
                t.run(lambda xp, a: None, 0)
        np.testing.assert_array_equal(ctx.wait(total), np.full(4, 10.0))
        np.testing.assert_array_equal(ctx.wait(x), np.full(4, 11.0))
