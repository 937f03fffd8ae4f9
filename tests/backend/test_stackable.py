"""stackable_context: graph scopes, push/pop, while_loop/repeat, launchable graphs."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow.errors import AccessModeError, ContextMismatchError, ScopeError
from tests.helpers.bodies import _run, add_to


@pytest.fixture
def sctx(backend):
    ctx = stf.stackable_context(backend=backend)
    yield ctx
    if not ctx._runtime.finalized:
        ctx._runtime.mode.scopes.discard_all()
        ctx.finalize()


def _increment(sctx, ld, by=1.0, place=None):
    args = (ld.rw(),) if place is None else (place, ld.rw())
    with sctx.task(*args) as t:
        add_to(t, 0, None, by)


def _decrement_counter(sctx, counter):
    with sctx.task(counter.rw()) as t:
        _run(t, lambda xp, a: a.__isub__(1), 0)


# -- graph scopes -----------------------------------------------------------------


def test_graph_scope_runs_its_work_in_order_with_the_root(sctx):
    X = np.zeros(8)
    x = sctx.logical_data(X)
    _increment(sctx, x)
    with sctx.graph_scope():
        _increment(sctx, x, 2.0)
        _increment(
            sctx, x, 3.0, stf.exec_place.device(sctx._runtime.backend.device_count - 1)
        )
    _increment(sctx, x, 10.0)
    sctx.finalize()
    np.testing.assert_array_equal(X, 16.0)


def test_a_graph_scope_that_raises_runs_nothing(sctx):
    X = np.ones(4)
    x = sctx.logical_data(X)
    with pytest.raises(KeyError):
        with sctx.graph_scope():
            _increment(sctx, x, 5.0)
            raise KeyError("boom")
    _increment(sctx, x, 1.0)
    sctx.finalize()
    np.testing.assert_array_equal(X, 2.0)


def test_nested_graph_scopes_and_push_pop(sctx):
    X = np.zeros(3)
    x = sctx.logical_data(X)
    sctx.push()
    with sctx.graph_scope():
        _increment(sctx, x)
        with sctx.graph_scope():
            _increment(sctx, x)
    sctx.pop()
    sctx.finalize()
    np.testing.assert_array_equal(X, 2.0)


def test_pop_without_push_and_out_of_order(sctx):
    with pytest.raises(ScopeError, match="without a matching push"):
        sctx.pop()
    sctx.push()
    guard = sctx.graph_scope()
    guard.__enter__()
    with pytest.raises(ScopeError, match="still open"):
        sctx.pop()
    guard.__exit__(None, None, None)
    sctx.pop()


def test_fence_and_finalize_refuse_open_scopes(sctx):
    x = sctx.logical_data(np.zeros(2))
    sctx.push()
    _increment(sctx, x)
    with pytest.raises(ScopeError, match="root level"):
        sctx.fence()
    with pytest.raises(ScopeError, match="1 scope"):
        sctx.finalize()
    sctx.pop()  # still usable
    sctx.fence()
    sctx.finalize()


def test_host_launch_at_the_root_and_in_a_graph_scope_not_in_loops(sctx):
    X = np.zeros(2)
    x = sctx.logical_data(X)
    seen = []
    with sctx.graph_scope():
        sctx.host_launch(x.read(), fn=lambda a: seen.append(a.copy()))
    with sctx.repeat(2):
        with pytest.raises(ScopeError, match="host_launch"):
            sctx.host_launch(x.read(), fn=print)
        _increment(sctx, x)
    sctx.host_launch(x.read(), fn=lambda a: seen.append(a.copy()))
    sctx.finalize()
    assert [list(a) for a in seen] == [[0.0, 0.0], [2.0, 2.0]]


# -- loops ---------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 4])
def test_repeat_runs_the_body_count_times(sctx, count):
    X = np.zeros(5)
    x = sctx.logical_data(X)
    with sctx.repeat(count):
        _increment(sctx, x)
    sctx.finalize()
    np.testing.assert_array_equal(X, float(count))


def test_repeat_checks_count(sctx):
    with pytest.raises(ValueError, match="non-negative") as info:
        sctx.repeat(-1)
    assert isinstance(info.value, OverflowError)  # as the reference's size_t
    for bad in (2.0, True, "3"):
        with pytest.raises(TypeError, match="int"):
            sctx.repeat(bad)


@pytest.mark.parametrize("start, iterations", [(5, 5), (0, 1), (-3, 1)])
def test_while_loop_runs_at_least_once_then_while_the_condition_holds(
    sctx, start, iterations
):
    N = np.array([start], dtype=np.int64)
    X = np.zeros(4)
    n, x = sctx.logical_data(N), sctx.logical_data(X)
    with sctx.while_loop() as loop:
        _increment(sctx, x)
        _decrement_counter(sctx, n)
        loop.continue_while(n > 0)
    sctx.finalize()
    np.testing.assert_array_equal(X, float(iterations))
    assert N[0] == start - iterations


def test_while_loop_three_argument_form_and_combined_conditions(sctx):
    N = np.array([10], dtype=np.int32)
    R = np.array([100.0], dtype=np.float32)
    n, r = sctx.logical_data(N), sctx.logical_data(R)
    with sctx.while_loop() as loop:
        _decrement_counter(sctx, n)
        with sctx.task(r.rw()) as t:
            _run(t, lambda xp, a: a.__imul__(0.5), 0)
        loop.continue_while((n > 0) & ~(r <= 1.0))  # stops when r <= 1
    with sctx.while_loop() as loop:
        _decrement_counter(sctx, n)
        loop.continue_while(n, ">", 0)
    sctx.finalize()
    assert R[0] == pytest.approx(100.0 / 128)
    assert N[0] == 0


def test_nested_loops(sctx):
    X = np.zeros(3)
    N = np.array([0], dtype=np.int64)
    x, n = sctx.logical_data(X), sctx.logical_data(N)
    with sctx.repeat(3):
        with sctx.task(n.write()) as t:
            _run(t, lambda xp, a: a.fill(2), 0)
        with sctx.while_loop() as loop:
            with sctx.repeat(2):
                _increment(sctx, x)
            _decrement_counter(sctx, n)
            loop.continue_while(n > 0)
    sctx.finalize()
    np.testing.assert_array_equal(X, 12.0)


def test_loop_over_two_devices(sctx, backend):
    last = sctx._runtime.backend.device_count - 1
    if last == 0:
        pytest.skip("needs two devices")
    X = np.arange(6.0)
    x = sctx.logical_data(X)

    def body():
        with sctx.repeat(3):
            _increment(sctx, x, 1.0, stf.exec_place.device(last))
            with sctx.task(stf.exec_place.device(0), x.rw()) as t:
                _run(t, lambda xp, a: a.__imul__(2.0), 0)

    if backend == "cuda":  # a conditional node's body is on one device
        with pytest.raises(ScopeError, match="device"):
            body()
        sctx.finalize()
        np.testing.assert_array_equal(X, np.arange(6.0))  # discarded
        return
    body()
    sctx.finalize()
    expected = np.arange(6.0)
    for _ in range(3):
        expected = (expected + 1) * 2
    np.testing.assert_array_equal(X, expected)


def test_loop_on_another_device_than_the_first(sctx):
    last = sctx._runtime.backend.device_count - 1
    X = np.arange(4.0)
    x = sctx.logical_data(X)
    with sctx.repeat(2):
        _increment(sctx, x, 1.0, stf.exec_place.device(last))
    sctx.finalize()
    np.testing.assert_array_equal(X, np.arange(4.0) + 2)


def test_while_body_without_continue_while_is_an_error_and_runs_nothing(sctx):
    X = np.zeros(2)
    x = sctx.logical_data(X)
    with pytest.raises(ScopeError, match="continue_while"):
        with sctx.while_loop():
            _increment(sctx, x)
    sctx.finalize()
    np.testing.assert_array_equal(X, 0.0)


def test_continue_while_misuse(sctx, backend):
    n = sctx.logical_data(np.array([3], dtype=np.int64))
    other = stf.stackable_context(backend=backend)
    m = other.logical_data(np.array([1.0]))
    with pytest.raises(ScopeError, match="twice"):
        with sctx.while_loop() as loop:
            _decrement_counter(sctx, n)
            loop.continue_while(n > 0)
            loop.continue_while(n > 0)
    with sctx.while_loop() as loop:
        _decrement_counter(sctx, n)
        with pytest.raises(ValueError, match="arguments"):
            loop.continue_while(n, ">")
        with pytest.raises(TypeError, match="condition"):
            loop.continue_while(True)
        with pytest.raises(ContextMismatchError):
            loop.continue_while(m > 0)
        loop.continue_while(n > 0)
    with pytest.raises(ScopeError, match="only valid inside"):
        loop.continue_while(n > 0)
    other.finalize()


def test_cond_handle_lets_device_code_set_the_condition(sctx, backend):
    if backend != "emulated":
        pytest.skip("custom condition code is device code on CUDA (see test_gpu_graphs)")
    from stflow.emulated import launch, set_conditional

    N = np.array([4], dtype=np.int64)
    n = sctx.logical_data(N)
    with sctx.while_loop() as loop:
        handle = loop.cond_handle
        with loop.condition_task(n.rw()) as t:

            def step(a):
                a -= 1
                set_conditional(handle, a[0] > 0)

            launch(t.stream_ptr(), step, t.get_arg_cai(0))
    sctx.finalize()
    assert N[0] == 0


# -- data ---------------------------------------------------------------------------


def test_read_only_data_and_push(sctx):
    x = sctx.logical_data(np.ones(3))
    with pytest.raises(ScopeError, match="no scope"):
        x.push(stf.AccessMode.READ)
    x.set_read_only()
    assert x.readonly
    with pytest.raises(AccessModeError):
        x.rw()
    sctx.push()
    with pytest.raises(AccessModeError):
        x.push(stf.AccessMode.RW)
    x.push(stf.AccessMode.READ, stf.data_place.device(0))
    sctx.pop()


def test_tasks_take_only_stackable_data_of_their_context(sctx, backend):
    with stf.context(backend=backend) as plain:
        ld = plain.logical_data(np.zeros(2))
        with pytest.raises(TypeError, match="stackable"):
            sctx.task(ld.rw())
    other = stf.stackable_context(backend=backend)
    foreign = other.logical_data(np.zeros(2))
    with pytest.raises(ContextMismatchError):
        sctx.task(foreign.rw())
    t = sctx.task()
    with pytest.raises(ContextMismatchError):
        t.add_dep(foreign.read())
    other.finalize()


def test_cond_expressions(sctx):
    f = sctx.logical_data(np.zeros(1, dtype=np.float32))
    i = sctx.logical_data(np.zeros(1, dtype=np.int64))
    leaf = f > 0.5
    assert (leaf._op, leaf._threshold, leaf._negate) == (">", 0.5, False)
    assert repr(leaf).startswith("cond(") and repr(~leaf).startswith("~cond(")
    reflected = 0.5 < f
    assert reflected._op == ">" and reflected._ld is f
    both = (f > 1) & (i <= 3) & (f < 9)
    assert both._combiner == "all" and len(both._terms) == 3
    flipped = ~both
    assert flipped._combiner == "any" and all(t._negate for t in flipped._terms)
    assert ((f > 1) | (i > 2))._combiner == "any"
    with pytest.raises(NotImplementedError):
        ((f > 1) & (i > 1)) | (f > 2)
    with pytest.raises(ValueError, match="at most 8"):
        terms = f > 0
        for k in range(8):
            terms = terms & (f > k)
    with pytest.raises(TypeError):
        bool(f > 1)
    with pytest.raises(TypeError):
        (f > 1) and (i > 1)
    with pytest.raises(TypeError):
        f > i
    with pytest.raises(TypeError):
        f > "1"
    with pytest.raises(TypeError):
        (f > 1) & 3
    with pytest.raises(ValueError, match="dtype"):
        sctx.logical_data(np.zeros(1, dtype=np.int16)) > 1
    with pytest.raises(ValueError, match="op"):
        stf.cond(f, "==", 1)
    with pytest.raises(TypeError):
        stf.cond(np.zeros(1), ">", 1)
    assert f == f and f != i and hash(f) == hash(f)
    assert repr(f).startswith("stackable_logical_data(shape=(1,)")


# -- launchable graphs -----------------------------------------------------------------


def test_launchable_graph_scope_runs_exactly_as_often_as_launched(sctx):
    X, Y = np.zeros(4), np.zeros(2)
    x, y = sctx.logical_data(X), sctx.logical_data(Y)
    with sctx.launchable_graph_scope() as lg:
        _increment(sctx, x)
        for _ in range(5):
            lg.launch()
        assert all(isinstance(v, int) for v in (lg.graph, lg.exec_graph, lg.stream))
    with pytest.raises(RuntimeError, match="reset"):
        lg.launch()
    with sctx.launchable_graph_scope() as lg2:
        _increment(sctx, y)  # never launched: y unchanged
    _increment(sctx, y, 3.0)
    sctx.finalize()
    np.testing.assert_array_equal(X, 5.0)
    np.testing.assert_array_equal(Y, 3.0)
    assert not lg2.valid


def test_live_launchables_of_one_topology_have_executables_of_their_own(sctx):
    """Two launchable graphs of the same topology alive at once hold two executables
    (one executable launched twice at once would serialise the replays); once one is
    reset, its executable serves the next graph of that topology."""
    x, y, z = (sctx.logical_data(np.zeros(4)) for _ in range(3))

    def launchable(ld):
        sctx.push()
        _increment(sctx, ld)
        graph = sctx.pop_prologue_shared()
        graph.launch()
        return graph

    first, second = launchable(x), launchable(y)
    assert first.exec_graph != second.exec_graph
    recorder = sctx._runtime.mode.scopes.recorder
    instantiated = recorder.graph_instantiations
    reused = first.exec_graph
    first.reset()
    real = recorder.real  # wait for the launches: the reset graph has run
    real.synchronize(real.record(recorder.launch_stream()))
    third = launchable(z)
    assert recorder.graph_instantiations == instantiated  # the reset one's, updated
    assert third.exec_graph == reused != second.exec_graph
    second.reset()
    third.reset()
    sctx.finalize()


def test_launchable_graph_scope_is_root_only(sctx):
    sctx.push()
    with pytest.raises(ScopeError, match="root level"):
        sctx.launchable_graph_scope()
    sctx.pop()


def test_pop_prologue_shared(sctx):
    X = np.zeros(3)
    x = sctx.logical_data(X)
    with pytest.raises(ScopeError):
        sctx.pop_prologue_shared()
    sctx.push()
    _increment(sctx, x, 2.0)
    lg = sctx.pop_prologue_shared()
    alias = lg
    lg.launch()
    alias.launch()
    with pytest.raises(ScopeError, match="launchable"):
        sctx.finalize()
    with pytest.raises(ScopeError, match="launchable graph"):
        _increment(sctx, x)  # the data is held by the graph
    lg.reset()
    lg.reset()  # idempotent
    assert not alias.valid
    sctx.finalize()
    np.testing.assert_array_equal(X, 4.0)
    empty = stf.LaunchableGraph()
    assert not empty.valid
    with pytest.raises(RuntimeError):
        empty.launch()


# -- task_graph --------------------------------------------------------------------------


def test_task_graph_records_once_and_launches_many_times(backend):
    g = stf.task_graph(backend=backend)
    X = np.zeros(4)
    x = g.context.logical_data(X)
    with pytest.raises(RuntimeError, match="not yet recorded"):
        g.launch()
    with pytest.raises(ScopeError, match="task"):
        g.context.task(x.rw())
    with g:
        with g.context.task(x.rw()) as t:
            add_to(t, 0, None, 1.5)
    with pytest.raises(RuntimeError, match="records once"):
        g.__enter__()
    for _ in range(10):
        g.launch()
    assert isinstance(g.exec_graph, int)
    g.finalize()
    g.finalize()
    np.testing.assert_array_equal(X, 15.0)
    with pytest.raises(RuntimeError, match="finalized"):
        g.launch()


def test_task_graph_failed_recording(backend):
    g = stf.TaskGraph(backend=backend)
    X = np.ones(2)
    x = g.context.logical_data(X)
    with pytest.raises(ZeroDivisionError):
        with g:
            with g.context.task(x.rw()) as t:
                add_to(t, 0, None, 1.0)
            1 / 0
    with pytest.raises(RuntimeError, match="failed"):
        g.launch()
    g.reset()
    g.finalize()
    np.testing.assert_array_equal(X, 1.0)


class _Boom(Exception):
    pass


def test_an_exception_with_pushed_scopes_open_still_writes_the_root_back(backend):
    """Issue 24: a with block that raises while push() scopes are open discards them
    (with a warning) and finalizes the root level: its results reach the user's
    arrays, the scopes' work does not, and the user's exception propagates."""
    X, Y = np.zeros(4), np.zeros(4)
    with pytest.warns(UserWarning, match=r"raised _Boom with 2 open scope\(s\)"):
        with pytest.raises(_Boom):
            with stf.stackable_context(backend=backend) as sctx:
                x, y = sctx.logical_data(X), sctx.logical_data(Y)
                _increment(sctx, x, 1.0)  # root: kept
                sctx.push()
                _increment(sctx, x, 10.0)  # in scopes: discarded
                sctx.push()
                _increment(sctx, y, 5.0)
                raise _Boom
    np.testing.assert_array_equal(X, np.ones(4))
    np.testing.assert_array_equal(Y, np.zeros(4))


def test_an_exception_with_a_launchable_graph_alive_still_writes_the_root_back(backend):
    X, Y = np.zeros(3), np.zeros(3)
    with pytest.warns(UserWarning, match=r"1 launchable graph\(s\) not reset"):
        with pytest.raises(_Boom):
            with stf.stackable_context(backend=backend) as sctx:
                x, y = sctx.logical_data(X), sctx.logical_data(Y)
                _increment(sctx, y, 3.0)
                sctx.push()
                _increment(sctx, x, 2.0)
                lg = sctx.pop_prologue_shared()
                lg.launch()
                lg.launch()
                raise _Boom
    np.testing.assert_array_equal(X, np.full(3, 4.0))  # two launches ran
    np.testing.assert_array_equal(Y, np.full(3, 3.0))


def test_no_exception_and_a_scope_open_is_still_an_error(backend):
    sctx = stf.stackable_context(backend=backend)
    X = np.zeros(2)
    with pytest.raises(ScopeError, match="still open"):
        with sctx:
            x = sctx.logical_data(X)
            _increment(sctx, x, 1.0)
            sctx.push()
    sctx.pop()
    sctx.finalize()
    np.testing.assert_array_equal(X, np.ones(2))
