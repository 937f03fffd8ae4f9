"""The ``reduce`` access mode: private identity-initialised views, combined into the
data before any other access; reductions do not order against each other."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from helpers.bodies import _run

import stflow as stf
from stflow.errors import AccessModeError, ScopeError
from stflow.testing import run_threads

N = 16


def _fold(t, index, fn):
    """``fn(xp, view)`` on dependency ``index`` of ``t`` (in stream order)."""
    _run(t, fn, index)


@pytest.mark.parametrize(
    "op, ufunc, dtype, start, values",
    [
        ("sum", np.add, np.float64, 1.5, [1.0, 2.0, 3.0, 4.0]),
        ("prod", np.multiply, np.float32, 2.0, [2.0, 0.5, 4.0]),
        ("min", np.minimum, np.float64, 0.0, [3.0, -2.0, 5.0]),
        ("max", np.maximum, np.int32, -7, [3, -2, 5]),
        ("logical_and", np.logical_and, np.bool_, True, [True, True, False]),
        ("logical_or", np.logical_or, np.int64, 0, [0, 0, 3]),
        ("bitwise_and", np.bitwise_and, np.uint16, 0xFFFF, [0xF0F0, 0x3C3C]),
        ("bitwise_or", np.bitwise_or, np.int8, 1, [2, 4, 16]),
        ("bitwise_xor", np.bitwise_xor, np.int64, 5, [3, 3, 9]),
    ],
)
def test_every_operation_folds_its_contributions_into_the_data(
    backend, op, ufunc, dtype, start, values
):
    X = np.full(N, start, dtype=dtype)
    expected = X.copy()
    for value in values:
        expected = ufunc(expected, np.array(value, dtype=dtype)).astype(dtype)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        for k, value in enumerate(values):
            place = stf.exec_place.device(k % 2) if backend == "emulated" else None
            args = (place,) if place is not None else ()
            with ctx.task(*args, x.reduce(op if k % 2 else ufunc)) as t:
                _fold(
                    t,
                    0,
                    lambda xp, v, value=value: v.__setitem__(
                        Ellipsis,
                        ufunc(v, xp.asarray(value, dtype=v.dtype)).astype(v.dtype),
                    ),
                )
    np.testing.assert_array_equal(X, expected)


def test_a_reduction_view_holds_the_identity(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.full(N, 9.0))
        seen = {}
        for op in ("sum", "prod", "min", "max"):
            with ctx.task(x.reduce(op)) as t:
                _fold(t, 0, lambda xp, v, op=op: seen.__setitem__(op, float(v[0])))
        ctx.wait(x)
    assert seen == {"sum": 0.0, "prod": 1.0, "min": np.inf, "max": -np.inf}


def test_reductions_into_one_data_do_not_order_against_each_other(backend):
    """A task reducing into x starts while another one reducing into x is started
    (on the same thread): they hold nothing against each other."""
    X = np.zeros(N)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        with ctx.task(x.reduce()) as outer:
            with ctx.task(x.reduce()) as inner:
                _fold(inner, 0, lambda xp, v: v.__iadd__(1.0))
            _fold(outer, 0, lambda xp, v: v.__iadd__(10.0))
        with pytest.raises(ScopeError, match="reduces into it; end that task first"):
            with ctx.task(x.reduce()) as started:
                with ctx.task(x.read()):
                    pass
        del started
    np.testing.assert_array_equal(X, np.full(N, 11.0))


@pytest.mark.parametrize("mode", ["stream", "graph"])
def test_reductions_combine_before_reads_waits_and_write_back(backend, mode):
    X, Y = np.zeros(N), np.zeros(N)
    with stf.context(backend=backend, use_graph=mode == "graph") as ctx:
        x, y = ctx.logical_data(X), ctx.logical_data(Y)
        for k in range(6):
            with ctx.task(x.reduce("sum")) as t:
                _fold(t, 0, lambda xp, v, k=k: v.__iadd__(float(k)))
        with ctx.task(y.write(), x.read()) as t:  # reads the combined sum
            _run(t, lambda xp, out, inp: out.__setitem__(Ellipsis, inp * 2.0), 0, 1)
        with ctx.task(x.reduce("max")) as t:  # another op: sum first
            _fold(t, 0, lambda xp, v: v.__setitem__(Ellipsis, 100.0))
        np.testing.assert_array_equal(ctx.wait(x), np.full(N, 100.0))
        with ctx.task(x.reduce("sum")) as t:
            _fold(t, 0, lambda xp, v: v.__iadd__(1.0))
    np.testing.assert_array_equal(Y, np.full(N, 30.0))
    np.testing.assert_array_equal(X, np.full(N, 101.0))  # combined at finalize


def test_data_without_a_value_starts_from_the_identity(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data_empty((N,), np.float64)
        for _ in range(3):
            with ctx.task(x.reduce("sum")) as t:
                _fold(t, 0, lambda xp, v: v.__iadd__(2.0))
        np.testing.assert_array_equal(ctx.wait(x), np.full(N, 6.0))


def test_host_callbacks_reduce_too(backend):
    X = np.ones(N)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        for k in range(3):
            ctx.host_launch(
                x.reduce("prod"), fn=lambda v, k=k: v.__setitem__(Ellipsis, 2.0**k)
            )
        with ctx.task(x.reduce(np.multiply)) as t:
            _fold(t, 0, lambda xp, v: v.__setitem__(Ellipsis, 3.0))
    np.testing.assert_array_equal(X, np.full(N, 1.0 * 2.0 * 4.0 * 3.0))


def test_reductions_in_loops_and_scopes_count_every_iteration(backend):
    X = np.zeros(N)
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)
        counter = sctx.logical_data(np.array([3], dtype=np.int64))
        with sctx.task(x.reduce()) as t:  # at the root: 100
            _fold(t, 0, lambda xp, v: v.__iadd__(100.0))
        with sctx.repeat(5):
            with sctx.task(x.reduce()) as t:
                _fold(t, 0, lambda xp, v: v.__iadd__(1.0))
        with sctx.while_loop() as loop:
            with sctx.task(x.reduce()) as t:
                _fold(t, 0, lambda xp, v: v.__iadd__(10.0))
            with sctx.task(counter.rw()) as t:
                _fold(t, 0, lambda xp, c: c.__isub__(1))
            loop.continue_while(counter > 0)
        with sctx.graph_scope():
            with sctx.task(x.reduce("max")) as t:
                _fold(t, 0, lambda xp, v: v.__setitem__(Ellipsis, 50.0))
    np.testing.assert_array_equal(X, np.full(N, 135.0))


def test_threads_reducing_into_one_data(backend):
    X = np.zeros(N)
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)

        def worker(i):
            def run():
                for _ in range(20):
                    with ctx.task(x.reduce()) as t:
                        _fold(t, 0, lambda xp, v: v.__iadd__(float(i)))

            return run

        run_threads([worker(i) for i in range(4)])
    np.testing.assert_array_equal(X, np.full(N, 20.0 * (0 + 1 + 2 + 3)))


def test_a_read_from_another_thread_waits_for_started_reductions(backend):
    X = np.zeros(N)
    started = threading.Event()
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(X)
        seen = []

        def reducer():
            with ctx.task(x.reduce()) as t:
                started.set()
                threading.Event().wait(0.1)
                _fold(t, 0, lambda xp, v: v.__iadd__(7.0))

        def reader():
            assert started.wait(10)
            seen.append(ctx.wait(x)[0])

        run_threads([reducer, reader])
    assert seen == [7.0]


def test_reductions_under_a_tight_memory_budget(backend):
    nbytes = 8 * 1024
    X = np.zeros(1024)
    with stf.context(backend=backend, memory_budget=3 * nbytes) as ctx:
        x = ctx.logical_data(X)
        for k in range(8):  # more partial results than fit at once
            with ctx.task(stf.exec_place.device(0), x.reduce()) as t:
                _fold(t, 0, lambda xp, v, k=k: v.__iadd__(float(k)))
        np.testing.assert_array_equal(ctx.wait(x), np.full(1024, 28.0))


def test_misuse_of_reduce(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(N))
        frozen = np.zeros(N)
        frozen.setflags(write=False)
        ro = ctx.logical_data(frozen, name="ro")
        with pytest.raises(AccessModeError, match="token"):
            ctx.token().reduce()
        with pytest.raises(AccessModeError, match="read-only"):
            ro.reduce()
        with pytest.raises(TypeError, match="needs integer or bool data"):
            x.reduce("bitwise_or")
        with pytest.raises(ValueError, match="op must be one of"):
            x.reduce("average")
        with pytest.raises(ValueError, match="op must be one of"):
            x.reduce(np.subtract)
        with pytest.raises(AccessModeError, match="reduces into logical data"):
            with ctx.task(x.reduce(), x.read()):
                pass
        with pytest.raises(AccessModeError, match="reduces into logical data"):
            with ctx.task(x.reduce(), x.reduce("max")):
                pass
        assert stf.dep(x, stf.AccessMode.REDUCE).mode == stf.AccessMode.REDUCE
        assert stf.reduce(x, "max").mode == x.reduce(np.maximum).mode
        with ctx.task(x.reduce()) as t:  # the context still works
            _fold(t, 0, lambda xp, v: v.__iadd__(1.0))
        np.testing.assert_array_equal(ctx.wait(x), np.ones(N))


def _await_waiters(runtime, count):
    """Until ``count`` threads wait on the runtime's condition (a test hook)."""
    deadline = time.monotonic() + 10
    while True:
        with runtime.lock:
            if runtime.waiters >= count:
                return
        assert time.monotonic() < deadline, "the threads never waited"
        time.sleep(0.005)


@pytest.mark.parametrize("mode", ["stream", "stackable"])
def test_threads_waiting_to_combine_never_join_a_reduction_of_another_op(backend, mode):
    """Issue 24: a max and a min reduction both wait for a started sum to end; the
    first to run combines the sum and begins its own reduction, and the other must
    combine that one first, not join it (its identity combined with the other
    operation: min(1, 100, -100) = -100)."""
    X = np.zeros(N)
    started, release = threading.Event(), threading.Event()
    ctx = (
        stf.stackable_context(backend=backend)
        if mode == "stackable"
        else stf.context(backend=backend)
    )
    with ctx:
        x = ctx.logical_data(X)

        def summing():
            with ctx.task(x.reduce("sum")) as t:
                started.set()
                assert release.wait(10)
                _fold(t, 0, lambda xp, v: v.__setitem__(Ellipsis, 1.0))

        def other(op, value):
            def run():
                assert started.wait(10)
                with ctx.task(
                    stf.exec_place.device(1 % _devices(ctx)), x.reduce(op)
                ) as t:
                    _fold(t, 0, lambda xp, v: v.__setitem__(Ellipsis, value))

            return run

        def opener():  # once both wait for the sum: end it
            _await_waiters(ctx._runtime, 2)
            release.set()

        run_threads([summing, other("max", -100.0), other("min", 100.0), opener])
    np.testing.assert_array_equal(X, np.ones(N))  # neither max nor min changes 1


def _devices(ctx):
    return ctx._runtime.device_count


@pytest.mark.parametrize("mode", ["stream", "stackable"])
def test_threads_reducing_with_different_ops_keep_each_op(backend, mode):
    """Issue 24's reproducer: threads reducing with sum, prod (x 1) and max (-inf)
    end at the sum."""
    X = np.zeros(1)
    ctx = (
        stf.stackable_context(backend=backend)
        if mode == "stackable"
        else stf.context(backend=backend)
    )
    with ctx:
        x = ctx.logical_data(X)

        def worker(op, value):
            def run():
                for k in range(20):
                    with ctx.task(
                        stf.exec_place.device(k % _devices(ctx)), x.reduce(op)
                    ) as t:
                        _fold(t, 0, lambda xp, v: v.__setitem__(Ellipsis, value))

            return run

        run_threads([worker("sum", 1.0), worker("prod", 1.0), worker("max", -np.inf)])
    np.testing.assert_array_equal(X, [20.0])
