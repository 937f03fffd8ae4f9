"""The null backend: a complete, synchronous implementation of the backend contract."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow.backends import get_backend
from stflow.backends._base import HOST, Backend, callback_state
from stflow.backends.null import NullBackend
from stflow.errors import BackendUnavailableError, ScopeError


def test_it_is_selectable_by_name_and_implements_the_whole_contract():
    backend = get_backend("null")
    assert isinstance(backend, NullBackend) and isinstance(backend, Backend)
    assert not Backend.__abstractmethods__ - set(vars(NullBackend))
    with stf.context(backend="null") as ctx:
        assert ctx.backend == "null"


def test_operations_complete_when_enqueued():
    backend = NullBackend(devices=2)
    stream = backend.create_stream(1)
    source = backend.allocate(HOST, 32, None, np.dtype(np.float64))
    target = backend.allocate(1, 32, stream, np.dtype(np.float64))
    assert backend.locate(target.ptr) == 1 and backend.locate(source.ptr) == HOST
    host = backend.host_array(source, (4,), np.dtype(np.float64), False)
    host[:] = [1, 2, 3, 4]
    backend.copy(target.ptr, source.ptr, 32, stream)
    device = backend.host_array(target, (4,), np.dtype(np.float64), True)
    np.testing.assert_array_equal(device, [1, 2, 3, 4])  # no synchronisation needed
    backend.fill(target.ptr, 32, np.float64(7).tobytes(), stream)
    np.testing.assert_array_equal(device, [7, 7, 7, 7])
    event = backend.record(stream)
    assert backend.query(event) and stream.last_event is event and event.seq == 1
    backend.free(target, stream)
    assert np.isnan(device).all()  # freed memory is poisoned
    backend.destroy_stream(stream)


def test_device_work_runs_as_device_work_and_reports_failures_to_the_stream():
    backend = NullBackend()
    failures = []
    stream = backend.create_stream(0, failures.append)
    seen = []

    def fn():
        seen.append(callback_state.active)
        raise ValueError("in a callback")

    backend.launch_host_func(stream, fn)
    assert seen == [True] and not callback_state.active
    assert [str(f) for f in failures] == ["in a callback"]


def test_programs_give_the_sequential_results():
    data = np.arange(6.0)
    with stf.context(backend="null") as ctx:
        x = ctx.logical_data(data)
        y = ctx.logical_data_zeros((6,))
        for _ in range(3):
            with ctx.task(stf.exec_place.device(1), x.read(), y.rw()) as t:
                a, b = (np.asarray(v) for v in t.args_cai())
                b += a
        ctx.host_launch(y.rw(), fn=lambda b: b.__imul__(2))
        np.testing.assert_array_equal(ctx.wait(y), 6 * np.arange(6.0))
        stats = ctx.statistics()
    # x in; y from its fill (device 0) to device 1, to the host, into wait()'s array
    assert (
        stats.tasks,
        stats.copies_h2d,
        stats.copies_d2d,
        stats.copies_d2h,
        stats.copies_h2h,
    ) == (4, 1, 1, 1, 1)
    np.testing.assert_array_equal(data, np.arange(6.0))


def test_cuda_kernels_are_python_callables_and_work_cannot_be_submitted_from_them():
    data = np.zeros(4)
    with stf.context(backend="null") as ctx:
        x = ctx.logical_data(data)

        def kernel(array, value):
            array += value
            ctx.task(x.read()).start()  # submitting from device work

        with ctx.cuda_kernel(x.rw()) as k:
            k.launch(kernel, 1, 1, (k.get_arg(0), 2.5))
        with pytest.raises(ScopeError, match="host callback or launched function"):
            ctx.finalize()
    np.testing.assert_array_equal(data, np.full(4, 2.5))
    with stf.context(backend="null") as ctx:
        with ctx.cuda_kernel(ctx.logical_data_zeros((1,)).rw()) as k:
            with pytest.raises(BackendUnavailableError, match="needs the CUDA backend"):
                k.launch(0x1234, 1, 1, ())


def test_graph_mode_needs_graph_support():
    from stflow._handles.context import _graph_mode

    class Graphless(NullBackend):
        graphs = None

    with pytest.raises(BackendUnavailableError, match="null backend lacks"):
        _graph_mode(Graphless(), None, epochs=True)


def test_graph_mode_records_and_runs_the_graph_at_once_when_launched():
    data = np.zeros(4)
    with stf.context(backend="null", use_graph=True) as ctx:
        x = ctx.logical_data(data)
        y = ctx.logical_data_zeros((4,))
        for _ in range(3):
            with ctx.task(x.rw()) as t:
                t.run(lambda xp, a: a.__iadd__(1))
            with ctx.task(stf.exec_place.device(1), x.read(), y.rw()) as t:
                t.run(lambda xp, a, b: b.__iadd__(a))
            ctx.fence()
        np.testing.assert_array_equal(ctx.wait(y), np.full(4, 6.0))
        stats = ctx.statistics()
    np.testing.assert_array_equal(data, np.full(4, 3.0))
    assert stats.tasks == 7  # y's fill, then six
    assert stats.graph_instantiations + stats.graph_updates == 3


def test_a_body_touching_recorded_views_is_refused_and_work_captured_is_not_run():
    backend = NullBackend()
    graphs = backend.graphs
    stream = backend.create_stream(0)
    source = backend.allocate(HOST, 8, None, np.dtype(np.float64))
    target = backend.allocate(0, 8, stream, np.dtype(np.float64))
    backend.host_array(source, (1,), np.dtype(np.float64), False)[0] = 5.0
    graph = graphs.create_graph()
    graphs.begin_capture(stream, graph, [])
    backend.copy(target.ptr, source.ptr, 8, stream)
    backend.fill(source.ptr, 8, np.float64(1).tobytes(), stream)
    graphs.end_capture(stream)
    device = backend.host_array(target, (1,), np.dtype(np.float64), True)
    assert np.isnan(device[0])  # captured: nothing ran yet (fresh memory is poisoned)
    executable = graphs.instantiate(graph)
    graphs.destroy_graph(graph)  # the executable keeps what it runs
    graphs.launch(executable, stream)
    assert device[0] == 5.0
    assert backend.host_array(source, (1,), np.dtype(np.float64), True)[0] == 1.0


def test_task_run_bodies_run_in_stream_order():
    seen = []
    with stf.context(backend="null") as ctx:
        x = ctx.logical_data(np.arange(3.0))
        with ctx.task(x.rw()) as t:
            t.run(lambda xp, a: a.__imul__(2))
        with ctx.task(stf.exec_place.device(1), x.read()) as t:
            t.run(lambda xp, a: seen.append(a.copy()))
        with ctx.task(x.read()) as t:
            t.run(lambda xp, a: a.__iadd__(1))  # a read() array refuses writes
        with pytest.raises(ValueError, match="read-only") as raised:
            ctx.wait(x)  # device work's errors come at the next sync point
        assert "raised by work launched from task" in "".join(raised.value.__notes__)
        np.testing.assert_array_equal(ctx.wait(x), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(seen, [[0.0, 2.0, 4.0]])


def test_graph_mode_records_host_callbacks_kernels_loops_and_reductions():
    with stf.context(backend="null", use_graph=True) as ctx:
        x = ctx.logical_data(np.zeros(4))
        ctx.host_launch(x.rw(), fn=lambda a: a.__iadd__(1))

        def kernel(array, value):
            array += value

        with ctx.cuda_kernel(x.rw()) as k:
            k.launch(kernel, 1, 1, (k.get_arg(0), 2.0))
        total = ctx.logical_data(np.zeros(3))
        for k in range(4):
            with ctx.task(stf.exec_place.device(k % 2), total.reduce("sum")) as t:
                t.run(lambda xp, a, k=k: a.__iadd__(k))
        np.testing.assert_array_equal(ctx.wait(x), np.full(4, 3.0))
        np.testing.assert_array_equal(ctx.wait(total), np.full(3, 6.0))
    done, counter = np.zeros(1), np.array([5.0])
    with stf.stackable_context(backend="null") as sctx:
        x, c = sctx.logical_data(done), sctx.logical_data(counter)
        with sctx.while_loop() as loop:
            with sctx.task(x.rw(), c.rw()) as t:
                t.run(lambda xp, a, b: (a.__iadd__(1), b.__isub__(1)))
            loop.continue_while(c > 0)
    assert (done[0], counter[0]) == (5.0, 0.0)
