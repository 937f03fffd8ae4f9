"""Eviction under a device memory budget: working sets larger than the budget run
correctly, a task that cannot fit fails cleanly, and nothing is lost."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers.bodies import _run, add_to, fill_with

import stflow as stf
from stflow.errors import OutOfMemoryError
from stflow.testing import run_threads

N = 1000  # float64 elements: 8000 bytes per data
NBYTES = 8 * N


def _ring(ctx, arrays, rounds, device=0):
    """data[i] += data[i + 1], round after round, on ``device``."""
    data = [ctx.logical_data(a) for a in arrays]
    for _ in range(rounds):
        for i in range(len(data)):
            with ctx.task(
                stf.exec_place.device(device),
                data[i].rw(),
                data[(i + 1) % len(data)].read(),
            ) as t:
                add_to(t, 0, 1, 1.0)
    return data


def _ring_oracle(arrays, rounds):
    expected = [a.copy() for a in arrays]
    for _ in range(rounds):
        for i in range(len(expected)):
            expected[i] += expected[(i + 1) % len(expected)]
    return expected


@pytest.mark.parametrize("mode", ["stream", "graph"])
def test_a_working_set_of_one_and_a_half_budgets_completes(backend, mode):
    arrays = [np.full(N, float(i)) for i in range(6)]  # 48 kB
    expected = _ring_oracle(arrays, 3)
    with stf.context(
        backend=backend, use_graph=mode == "graph", memory_budget=4 * NBYTES
    ) as ctx:  # 32 kB
        _ring(ctx, arrays, 3)
        stats = ctx.statistics()
    for got, want in zip(arrays, expected):
        np.testing.assert_array_equal(got, want)
    assert stats.evictions > 0
    assert stats.evicted_bytes == stats.evictions * NBYTES
    assert stats.written_back_bytes > 0  # modified data went home first
    assert "evictions" in str(stats)


def test_stackable_contexts_evict_between_scopes(backend):
    arrays = [np.full(N, float(i)) for i in range(6)]
    expected = _ring_oracle(arrays, 2)
    with stf.stackable_context(backend=backend, memory_budget=f"{3 * NBYTES}B") as sctx:
        data = [sctx.logical_data(a) for a in arrays]
        for _ in range(2):
            for i in range(len(data)):
                with sctx.graph_scope():
                    with sctx.task(
                        stf.exec_place.device(0),
                        data[i].rw(),
                        data[(i + 1) % len(data)].read(),
                    ) as t:
                        add_to(t, 0, 1, 1.0)
        assert sctx.statistics().evictions > 0
    for got, want in zip(arrays, expected):
        np.testing.assert_array_equal(got, want)


def test_data_created_on_a_device_is_written_back_to_a_host_instance(backend):
    with stf.context(backend=backend, memory_budget=2 * NBYTES) as ctx:
        made = [
            ctx.logical_data_full((N,), float(i), where=stf.data_place.device(0))
            for i in range(4)
        ]  # no user buffer to go to
        for ld in made:
            with ctx.task(stf.exec_place.device(0), ld.rw()) as t:
                add_to(t, 0, None, 1.0)
        for i, ld in enumerate(made):
            np.testing.assert_array_equal(ctx.wait(ld), np.full(N, i + 1.0))
        assert ctx.statistics().evictions >= 2


def test_a_task_that_cannot_fit_raises_and_loses_nothing(backend):
    X, Y = np.arange(float(N)), np.ones(N)
    with stf.context(backend=backend, memory_budget=NBYTES + NBYTES // 2) as ctx:
        x, y = ctx.logical_data(X, name="x"), ctx.logical_data(Y, name="y")
        with ctx.task(stf.exec_place.device(0), x.rw()) as t:
            add_to(t, 0, None, 1.0)  # x only on device 0 now
        with pytest.raises(OutOfMemoryError) as caught:
            with ctx.task(
                stf.exec_place.device(0), x.rw(), y.read(), symbol="too_big"
            ) as t:
                raise AssertionError("the body must not run")
        message = str(caught.value)
        for part in ("too_big", "device 0", "'x'", "'y'", "15.6 KiB", "11.7 KiB"):
            assert part in message, (part, message)
        assert isinstance(caught.value, MemoryError)
        with ctx.task(stf.exec_place.device(0), x.rw()) as t:  # still usable
            add_to(t, 0, None, 1.0)
    np.testing.assert_array_equal(X, np.arange(float(N)) + 2.0)
    np.testing.assert_array_equal(Y, np.ones(N))


def test_instances_of_a_started_task_are_never_evicted(backend):
    A, B = np.zeros(N), np.zeros(N)
    started = threading.Event()
    tried = threading.Event()
    with stf.context(backend=backend, memory_budget=NBYTES + NBYTES // 2) as ctx:
        a, b = ctx.logical_data(A), ctx.logical_data(B)

        def holder():
            with ctx.task(stf.exec_place.device(0), a.rw()) as t:
                started.set()
                assert tried.wait(10)
                add_to(t, 0, None, 1.0)

        def other():
            assert started.wait(10)
            with pytest.raises(OutOfMemoryError, match="running tasks"):
                with ctx.task(stf.exec_place.device(0), b.rw()):
                    pass
            tried.set()

        run_threads([holder, other])
    np.testing.assert_array_equal(A, np.ones(N))


def test_per_device_budgets_and_the_environment_variable(backend, monkeypatch):
    with stf.context(backend=backend, memory_budget={0: "16KB"}) as ctx:
        budgets = ctx._runtime.memory.budgets
        assert budgets[0] == 16_000
    monkeypatch.setenv("STFLOW_DEVICE_MEMORY_BUDGET", "2KiB")
    with stf.context(backend=backend) as ctx:
        assert set(ctx._runtime.memory.budgets.values()) == {2048}
        x = ctx.logical_data(np.zeros(N))
        with pytest.raises(OutOfMemoryError, match="2.0 KiB"):
            with ctx.task(stf.exec_place.device(0), x.rw()):
                pass


@pytest.mark.parametrize(
    "budget, error",
    [
        ("lots", ValueError),
        (-1, ValueError),
        (1.5, TypeError),
        ({7: 10}, ValueError),
        ("12 parsecs", ValueError),
        (True, TypeError),
    ],
)
def test_bad_budgets_are_refused(backend, budget, error):
    with pytest.raises(error, match="memory_budget"):
        stf.context(backend=backend, memory_budget=budget)


@pytest.mark.parametrize(
    "budget", ["1" + "0" * 400, 2**63, "9223372036854775808", "16777216TiB"]
)
def test_budgets_beyond_any_device_name_the_limit(backend, budget):
    """Issue 24: a budget of 10**400 bytes raised OverflowError (from a float)."""
    with pytest.raises(ValueError, match=r"at most 9223372036854775807 bytes"):
        stf.context(backend=backend, memory_budget=budget)


def test_budgets_are_any_integer_and_texts_are_exact(backend, monkeypatch):
    """Issue 24: numpy.int64 budgets (and device keys) were refused."""
    with stf.context(backend=backend, memory_budget=np.int64(3 * NBYTES)) as ctx:
        assert set(ctx._runtime.memory.budgets.values()) == {3 * NBYTES}
    with stf.context(
        backend=backend, memory_budget={np.int32(0): np.uint16(4096)}
    ) as ctx:
        assert ctx._runtime.memory.budgets[0] == 4096
    with stf.context(backend=backend, memory_budget="9223372036854775807") as ctx:
        assert ctx._runtime.memory.budgets[0] == 2**63 - 1  # exact, no float
    monkeypatch.setenv("STFLOW_DEVICE_MEMORY_BUDGET", "1" + "0" * 30)
    with pytest.raises(ValueError, match="STFLOW_DEVICE_MEMORY_BUDGET.*at most"):
        stf.context(backend=backend)


def test_a_reduction_larger_than_the_budget_says_so(backend):
    """Issue 24: a reduction's private instance was not counted in the task's
    working set: 'needs 7.8 KiB more ... the rest belongs to running tasks'."""
    X = np.zeros(N)
    with stf.context(backend=backend, memory_budget=NBYTES // 2) as ctx:
        x = ctx.logical_data(X, name="x")
        with pytest.raises(OutOfMemoryError) as caught:
            with ctx.task(stf.exec_place.device(0), x.reduce("sum")):
                raise AssertionError("the body must not run")
        message = str(caught.value)
        for part in (
            "needs 7.8 KiB on device 0",
            "'x' 7.8 KiB (the partial result of its reduce('sum'))",
            "memory budget of 3.9 KiB",
        ):
            assert part in message, (part, message)
        with ctx.task(stf.exec_place.host(), x.reduce("sum")) as t:  # still usable
            add_to(t, 0, None, 2.0)
    np.testing.assert_array_equal(X, np.full(N, 2.0))


def test_room_taken_by_partial_results_is_named(backend):
    """Partial results of a started reduction cannot be evicted nor combined: a task
    that needs their room says they hold it."""
    X, Y = np.zeros(N), np.ones(N)
    with stf.context(backend=backend, memory_budget=NBYTES + NBYTES // 2) as ctx:
        x, y = ctx.logical_data(X, name="x"), ctx.logical_data(Y, name="y")
        reducing = ctx.task(stf.exec_place.device(0), x.reduce("max"))
        reducing.start()
        with pytest.raises(OutOfMemoryError) as caught:
            with ctx.task(stf.exec_place.device(0), y.rw()):
                raise AssertionError("the body must not run")
        assert (
            "partial results of reductions not combined yet (here: 'x' 1 x "
            "7.8 KiB)" in str(caught.value)
        ), str(caught.value)
        fill_with(reducing, 0, 5.0)  # the body: its partial result is 5
        reducing.end()
    np.testing.assert_array_equal(X, np.full(N, 5.0))


def test_read_only_copies_are_dropped_without_a_write_back(backend):
    arrays = [np.full(N, float(i)) for i in range(4)]
    for a in arrays:
        a.setflags(write=False)
    out = np.zeros(N)
    with stf.context(backend=backend, memory_budget=3 * NBYTES) as ctx:
        data = [ctx.logical_data(a) for a in arrays]
        o = ctx.logical_data(out)
        for _ in range(2):
            for d in data:
                with ctx.task(stf.exec_place.device(0), o.rw(), d.read()) as t:
                    _run(t, lambda xp, acc, v: acc.__iadd__(v), 0, 1)
        stats = ctx.statistics()
    np.testing.assert_array_equal(out, np.full(N, 2.0 * (0 + 1 + 2 + 3)))
    assert stats.evictions > 0
    # Only the accumulator is ever the sole valid copy.
    assert stats.written_back_bytes < stats.evictions * NBYTES


@pytest.mark.parametrize("mode", ["stream", "graph"])
def test_a_write_back_an_eviction_makes_is_ordered_before_the_task_that_needed_room(
    backend, mode
):
    """Room for a task is made before its prerequisites are decided: when the
    eviction writes back data the task itself writes elsewhere, the task's write
    comes after the write-back (it used to race with it)."""
    for _ in range(20):
        A, B = np.zeros(N), np.arange(float(N))
        with stf.context(
            backend=backend, use_graph=mode == "graph", memory_budget=NBYTES + NBYTES // 2
        ) as ctx:
            a, b = ctx.logical_data(A), ctx.logical_data(B)
            with ctx.task(stf.exec_place.device(0), a.rw()) as t:  # a only on device 0
                add_to(t, 0, None, 5.0)
            # b needs device 0: a is evicted, written back to A, which this task
            # overwrites with b + 1.
            with ctx.task(
                stf.exec_place.host(),
                a.write(stf.data_place.host()),
                b.read(stf.data_place.device(0)),
            ) as t:
                _run(t, lambda xp, out, inp: out.__setitem__(Ellipsis, inp + 1.0), 0, 1)
            assert ctx.statistics().written_back_bytes == NBYTES
        np.testing.assert_array_equal(A, np.arange(float(N)) + 1.0)
