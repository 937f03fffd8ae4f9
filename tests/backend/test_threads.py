"""Contexts shared by host threads: graph mode's epochs, and scopes per thread.

Every test runs its threads under a watchdog (``helpers.threads.run_threads``): a hang
fails with the stacks of all threads.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from helpers.bodies import _run, add_to

import stflow as stf
from stflow.errors import ScopeError
from stflow.testing import run_threads

MODES = ["stream", "graph"]


def _context(backend, mode):
    return stf.context(backend=backend, use_graph=mode == "graph")


# -- graph mode's epochs, shared by threads ----------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_threads_incrementing_their_own_data_lose_nothing(backend, mode):
    """Issue 11: 8 threads x 100 increments in one graph-mode context, with fences."""
    arrays = [np.zeros(4) for _ in range(8)]
    with _context(backend, mode) as ctx:
        data = [ctx.logical_data(a) for a in arrays]

        def worker(i):
            def run():
                for k in range(100):
                    with ctx.task(data[i].rw()) as t:
                        add_to(t, 0, None, 1.0)
                    if k % 25 == i:
                        ctx.fence()
                    if k % 40 == i:
                        assert ctx.wait(data[i])[0] == k + 1

            return run

        run_threads([worker(i) for i in range(8)])
    for a in arrays:
        np.testing.assert_array_equal(a, np.full(4, 100.0))


def test_a_fence_waits_for_the_tasks_other_threads_started(backend):
    X = np.zeros(4)
    started = threading.Event()
    fenced = threading.Event()
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(X)

        def holder():
            with ctx.task(x.rw()) as t:
                started.set()
                time.sleep(0.2)
                assert not fenced.is_set(), "fence() returned while a task was started"
                add_to(t, 0, None, 1.0)

        def fencer():
            assert started.wait(10)
            ctx.fence()
            fenced.set()
            np.testing.assert_array_equal(ctx.wait(x), np.ones(4))

        run_threads([holder, fencer])
    np.testing.assert_array_equal(X, np.ones(4))


@pytest.mark.parametrize("call", ["fence", "wait"])
def test_a_sync_point_inside_a_task_body_in_graph_mode_is_refused(backend, call):
    X = np.zeros(4)
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(X)
        y = ctx.logical_data(np.zeros(2))
        with ctx.task(x.rw()) as t:
            add_to(t, 0, None, 1.0)
            with pytest.raises(ScopeError, match="end the task first"):
                ctx.fence() if call == "fence" else ctx.wait(y)
            add_to(t, 0, None, 1.0)
    np.testing.assert_array_equal(X, np.full(4, 2.0))


@pytest.mark.parametrize("mode", MODES)
def test_tasks_nested_in_a_body_keep_the_body_in_order(backend, mode):
    """A task submitted inside another task's body, depending on work of the outer
    task's stream: the outer body's later work stays after its earlier work."""
    rng = np.random.default_rng(7)
    n = 6
    arrays = [np.zeros(3) for _ in range(n)]
    expect = [np.zeros(3) for _ in range(n)]
    with _context(backend, mode) as ctx:
        data = [ctx.logical_data(a) for a in arrays]
        for _ in range(40):
            if rng.random() < 0.5:
                a, b = rng.choice(n, 2, replace=False)
                with ctx.task(data[a].rw(), data[b].read()) as t:
                    add_to(t, 0, 1, 1.0)
                expect[a] += expect[b]
            i, j, k = rng.choice(n, 3, replace=False)
            with ctx.task(data[i].rw()) as t:
                add_to(t, 0, None, 1.0)
                with ctx.task(data[j].rw(), data[k].read()) as inner:
                    add_to(inner, 0, 1, 1.0)
                add_to(t, 0, None, 100.0)
                _run(t, lambda xp, v: v.__imul__(2.0), 0)
            expect[j] += expect[k]
            expect[i] = (expect[i] + 101.0) * 2.0
    for got, want in zip(arrays, expect):
        np.testing.assert_array_equal(got, want)


# -- stackable contexts: scopes are per thread ---------------------------------------------


def test_every_newly_arriving_thread_waits_for_a_body_started_alone(backend):
    """Graph mode: the first thread's body, started while it submitted alone, shares
    its capture with the prologue's events; not only the second thread but also a
    third one arriving meanwhile must wait for that body to end (a third thread used
    to end the capture from under it: 'ended by another thread')."""
    X, Y, Z, W = np.zeros(4), np.full(4, 2.0), np.zeros(4), np.zeros(4)
    started, second_waits = threading.Event(), threading.Event()
    with stf.context(backend=backend, use_graph=True) as ctx:
        x, y = ctx.logical_data(X), ctx.logical_data(Y)
        z, w = ctx.logical_data(Z), ctx.logical_data(W)
        dev0 = stf.exec_place.device(0)

        def first():  # copies x and y to device 0, then a long body
            with ctx.task(dev0, x.rw(), y.read()) as t:
                started.set()
                assert second_waits.wait(10)
                time.sleep(0.2)  # the third thread arrives meanwhile
                add_to(t, 0, 1, 1.0)

        def second():  # arrives first among the others
            assert started.wait(10)
            with ctx.task(w.rw()) as t:
                add_to(t, 0, None, 1.0)

        def third():  # reads y at device 0: after the first's copy
            assert started.wait(10)
            time.sleep(0.05)
            second_waits.set()
            with ctx.task(dev0, y.read(), z.rw()) as t:
                add_to(t, 1, 0, 1.0)

        run_threads([first, second, third])
    np.testing.assert_array_equal(X, np.full(4, 2.0))
    np.testing.assert_array_equal(Z, np.full(4, 2.0))
    np.testing.assert_array_equal(W, np.ones(4))


def test_another_threads_root_work_is_not_recorded_into_my_scope(backend):
    A, B = np.zeros(4), np.zeros(4)
    b_done = threading.Event()
    in_scope = threading.Event()
    with stf.stackable_context(backend=backend) as sctx:
        a, b = sctx.logical_data(A), sctx.logical_data(B)

        def scoped():
            with pytest.raises(RuntimeError, match="abandon"):
                with sctx.graph_scope():
                    with sctx.task(a.rw()) as t:
                        add_to(t, 0, None, 1.0)
                    in_scope.set()
                    assert b_done.wait(10), "the root thread was held by my scope"
                    raise RuntimeError("abandon the scope")

        def root():
            assert in_scope.wait(10)
            for _ in range(3):
                with sctx.task(b.rw()) as t:
                    add_to(t, 0, None, 1.0)
            sctx.fence()  # this thread is at the root: allowed
            b_done.set()

        run_threads([scoped, root])
    np.testing.assert_array_equal(A, np.zeros(4))  # the scope was discarded
    np.testing.assert_array_equal(B, np.full(4, 3.0))  # the root work was not


def test_two_threads_record_scopes_of_their_own_at_once(backend):
    arrays = [np.zeros(4), np.zeros(4)]
    both_open = threading.Barrier(2, timeout=10)
    with stf.stackable_context(backend=backend) as sctx:
        data = [sctx.logical_data(a) for a in arrays]

        def worker(i):
            def run():
                with sctx.graph_scope():
                    both_open.wait()
                    with sctx.repeat(3):
                        with sctx.task(data[i].rw()) as t:
                            add_to(t, 0, None, float(i + 1))
                    both_open.wait()
                sctx.push()
                with sctx.task(data[i].rw()) as t:
                    add_to(t, 0, None, 10.0)
                sctx.pop()

            return run

        run_threads([worker(0), worker(1)])
    np.testing.assert_array_equal(arrays[0], np.full(4, 13.0))
    np.testing.assert_array_equal(arrays[1], np.full(4, 16.0))


def test_root_work_on_data_of_another_threads_open_scope_waits_until_it_closes(backend):
    X = np.zeros(4)
    touched = threading.Event()
    closed = threading.Event()
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)

        def scoped():
            with sctx.graph_scope():
                with sctx.task(x.rw()) as t:
                    add_to(t, 0, None, 1.0)
                touched.set()
                time.sleep(0.2)
                with sctx.task(x.rw()) as t:
                    add_to(t, 0, None, 1.0)
                closed.set()  # just before the scope launches

        def root():
            assert touched.wait(10)
            with sctx.task(x.rw()) as t:
                assert closed.is_set(), "root work started inside another thread's scope"
                _run(t, lambda xp, v: v.__imul__(10.0), 0)

        run_threads([scoped, root])
    np.testing.assert_array_equal(X, np.full(4, 20.0))


def test_threads_waiting_for_each_others_scopes_get_an_error_not_a_hang(backend):
    X, Y = np.zeros(2), np.zeros(2)
    ready = threading.Barrier(2, timeout=10)
    outcomes = {}
    with stf.stackable_context(backend=backend) as sctx:
        x, y = sctx.logical_data(X), sctx.logical_data(Y)

        def worker(name, first, second):
            def run():
                try:
                    with sctx.graph_scope():
                        with sctx.task(first.rw()) as t:
                            add_to(t, 0, None, 1.0)
                        ready.wait()
                        with sctx.task(second.rw()) as t:
                            add_to(t, 0, None, 1.0)
                    outcomes[name] = "done"
                except ScopeError as exc:
                    assert "would wait forever" in str(exc)
                    outcomes[name] = "refused"

            return run

        run_threads([worker("a", x, y), worker("b", y, x)])
    assert sorted(outcomes.values()) == ["done", "refused"]
    np.testing.assert_array_equal(X + Y, np.full(2, 2.0))  # one scope ran, entirely


def test_finalize_waits_for_the_scopes_other_threads_have_open(backend):
    X = np.zeros(4)
    opened = threading.Event()
    sctx = stf.stackable_context(backend=backend)
    x = sctx.logical_data(X)

    def scoped():
        with sctx.graph_scope():
            opened.set()
            time.sleep(0.2)
            with sctx.task(x.rw()) as t:
                add_to(t, 0, None, 5.0)

    def finalizer():
        assert opened.wait(10)
        sctx.finalize()

    run_threads([scoped, finalizer])
    np.testing.assert_array_equal(X, np.full(4, 5.0))


def test_push_and_pop_are_per_thread(backend):
    entered = threading.Event()
    with stf.stackable_context(backend=backend) as sctx:

        def pusher():
            sctx.push()
            entered.set()
            time.sleep(0.05)
            sctx.pop()

        def other():
            assert entered.wait(10)
            with pytest.raises(ScopeError, match="pop\\(\\) without a matching push"):
                sctx.pop()

        run_threads([pusher, other])


def test_scopes_of_several_threads_read_read_only_data_at_once(backend):
    S = np.arange(4.0)
    outs = [np.zeros(4), np.zeros(4)]
    both_read = threading.Barrier(2, timeout=10)
    with stf.stackable_context(backend=backend) as sctx:
        s = sctx.logical_data(S)
        s.set_read_only()
        data = [sctx.logical_data(o) for o in outs]

        def worker(i, discard):
            def run():
                try:
                    with sctx.graph_scope():
                        with sctx.task(data[i].rw(), s.read()) as t:
                            add_to(t, 0, 1, 1.0)
                        both_read.wait()  # both scopes hold a read of s now
                        if discard:
                            raise KeyError("discarded")
                except KeyError:
                    pass

            return run

        run_threads([worker(0, False), worker(1, True)])
        with sctx.task(data[1].rw(), s.read()) as t:  # after a discarded reader
            add_to(t, 0, 1, 2.0)
    np.testing.assert_array_equal(outs[0], S)
    np.testing.assert_array_equal(outs[1], 2.0 * S)


# -- registration against retirement ----------------------------------------------------


def test_registration_is_one_step_against_another_threads_retirement(
    backend, monkeypatch
):
    """Issue 24: registering (scan the byte ranges, then insert) ran outside the
    runtime's lock, so another thread retiring collected data (removing its range)
    between the two shifted the scan onto a range past the new buffer: a spurious
    BufferOverlapError. The retirement here falls right after the scan's bisection:
    it must wait until the registration is done."""
    import stflow._engine.registry as registry

    if stf.__compiled__:
        pytest.skip(
            "compiled, _registry does not look its bisect module up at run "
            "time: the pause cannot be patched in"
        )
    base = np.zeros(30)
    scanning, retired = threading.Event(), threading.Event()
    me = []
    real = registry.bisect

    class Bisect:  # the registering thread's scan pauses
        insort = staticmethod(real.insort)

        @staticmethod
        def bisect_left(ranges, key):
            index = real.bisect_left(ranges, key)
            if me and threading.get_ident() == me[0] and len(key) == 1:
                me.clear()
                scanning.set()
                retired.wait(0.3)  # long enough for a retirement not locked out
            return index

    monkeypatch.setattr(registry, "bisect", Bisect)
    with stf.context(backend=backend) as ctx:
        low = [ctx.logical_data(base[0:10])]  # retired meanwhile
        high = ctx.logical_data(base[20:30])  # past the new buffer
        other = ctx.logical_data(np.zeros(4))
        made = []

        def register():
            me.append(threading.get_ident())
            made.append(ctx.logical_data(base[10:20]))

        def retire():
            assert scanning.wait(10)
            low.clear()  # collected: its range goes at the next task
            with ctx.task(other.rw()) as t:
                add_to(t, 0, None, 1.0)
            retired.set()

        run_threads([register, retire])
        with ctx.task(made[0].rw(), high.rw()) as t:
            add_to(t, 0, None, 2.0)
            add_to(t, 1, None, 3.0)
    np.testing.assert_array_equal(base, np.repeat([0.0, 2.0, 3.0], 10))


def test_threads_registering_and_collecting_data_see_no_false_overlap(backend):
    """Issue 24: 8 threads registering data (all arrays alive) with tasks, host
    callbacks, collections and fences in between."""
    import gc
    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often: a tight interleaving
    try:
        kept = [[] for _ in range(8)]
        with stf.context(backend=backend) as ctx:

            def worker(i):
                def run():
                    for k in range(15):
                        array = np.full(8 + k % 5, float(i))
                        kept[i].append(array)
                        ld = ctx.logical_data(array)
                        with ctx.task(ld.rw()) as t:
                            add_to(t, 0, None, 1.0)
                        if k % 3 == 0:
                            ctx.host_launch(ld.read(), fn=lambda a: None)
                        del ld  # collected: retired at a later submission
                        if k % 8 == i:
                            gc.collect()
                        if k % 10 == 0:
                            ctx.fence()

                return run

            run_threads([worker(i) for i in range(8)])
    finally:
        sys.setswitchinterval(interval)
    for i, arrays in enumerate(kept):
        for array in arrays:
            np.testing.assert_array_equal(array, np.full(array.shape, i + 1.0))


@pytest.mark.parametrize("op", ["sum", "max"])
def test_root_reductions_into_data_of_another_threads_open_scope_wait(backend, op):
    """Issue 24 (found by the threaded differential): a reduction was not held off
    data another thread's open scope had touched, as every other access is, and
    joined or combined the scope's reduction (a sum's contribution lost)."""
    X = np.zeros(4)
    reduced, order = threading.Event(), []
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)

        def scoped():
            with sctx.graph_scope():
                with sctx.task(x.reduce("sum")) as t:
                    _run(t, lambda xp, a: a.fill(1.0), 0)
                reduced.set()
                time.sleep(0.3)  # the other thread's reduction waits
                order.append("scope closed")

        def root():
            assert reduced.wait(10)
            with sctx.task(x.reduce(op)) as t:
                order.append("root reduces")
                _run(t, lambda xp, a: a.fill(2.0 if op == "sum" else -5.0), 0)

        run_threads([scoped, root])
    assert order == ["scope closed", "root reduces"]
    np.testing.assert_array_equal(X, np.full(4, 3.0 if op == "sum" else 1.0))


def test_root_work_that_waited_is_admitted_again(backend):
    """Issue 24 (found by the threaded differential): root-level work that waited
    for held data (or for reductions to combine) went ahead once it was released,
    even when another thread's scope had touched its other data meanwhile; it must
    wait for that scope to close, as it would have had it come later."""
    X, Y = np.zeros(4), np.zeros(4)
    holding, touched, order = threading.Event(), threading.Event(), []
    with stf.stackable_context(backend=backend) as sctx:
        x, y = sctx.logical_data(X), sctx.logical_data(Y)
        runtime = sctx._runtime

        def holder():  # holds y until the scope has touched x
            with sctx.task(y.rw()) as t:
                holding.set()
                assert touched.wait(10)
                add_to(t, 0, None, 1.0)

        def root():  # waits for y; x is free when it starts
            assert holding.wait(10)
            with sctx.task(x.rw(), y.read()) as t:
                order.append("root")
                add_to(t, 0, 1, 10.0)

        def scoped():
            assert holding.wait(10)
            deadline = time.monotonic() + 10
            while True:  # until the root task waits for y
                with runtime.lock:
                    if runtime.waiters:
                        break
                assert time.monotonic() < deadline
                time.sleep(0.005)
            with sctx.graph_scope():
                with sctx.task(x.rw()) as t:
                    add_to(t, 0, None, 1.0)
                touched.set()
                time.sleep(0.3)  # the root task must not go ahead meanwhile
                order.append("scope closed")

        run_threads([holder, root, scoped])
    assert order == ["scope closed", "root"]
    np.testing.assert_array_equal(X, np.full(4, 11.0))
    np.testing.assert_array_equal(Y, np.ones(4))
