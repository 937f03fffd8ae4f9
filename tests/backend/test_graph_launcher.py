"""Graph mode's epochs instantiated and launched on a thread of their own
(``STFLOW_GRAPH_LAUNCHER=thread``, ``stflow/_graph/launcher.py``): the launch stream
waits on a gate that the launcher's thread opens behind each epoch's graph."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers.bodies import add_to

import stflow as stf
import stflow._graph.scopes as scopes
from stflow.errors import CudaError


@pytest.fixture
def launcher_thread(monkeypatch):
    monkeypatch.setenv("STFLOW_GRAPH_LAUNCHER", "thread")
    monkeypatch.setattr(scopes, "EPOCH_TASKS", 4)


def _launcher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stflow-graph-launcher"]


def test_epochs_launch_from_the_thread_and_its_results_are_exact(
    backend, launcher_thread
):
    before = len(_launcher_threads())
    X = np.zeros(6)
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(X)
        launcher = ctx._runtime.mode.recorder.launcher
        assert launcher is not None
        for i in range(41):
            with ctx.task(x.rw()) as t:
                add_to(t, 0, None, float(i))
            if i == 22:  # a host wait between epochs
                np.testing.assert_array_equal(ctx.wait(x), np.full(6, sum(range(23))))
        assert len(_launcher_threads()) == before + 1
    np.testing.assert_array_equal(X, np.full(6, float(sum(range(41)))))
    assert launcher.launched >= 41 // 4
    assert len(_launcher_threads()) == before  # stopped at finalize()
    assert launcher.gate is None and launcher.stream is None


def test_epochs_of_one_topology_update_a_cached_executable(backend, launcher_thread):
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(np.zeros(4))
        recorder = ctx._runtime.mode.recorder
        for _ in range(6):  # six epochs of one topology, each retired before the next
            for _ in range(3):
                with ctx.task(x.rw()) as t:
                    add_to(t, 0, None, 1.0)
            ctx.wait(x)  # the epoch boundary: launched by the thread
            recorder.pending_events()  # retired: its executable back in the cache
        statistics = ctx.statistics()
        # the first epoch also copies x to the device: another topology
        assert statistics.graph_instantiations == 2
        assert statistics.graph_updates == 4
        assert ctx.wait(x)[0] == 18.0


def test_a_failure_on_the_launcher_thread_is_raised_and_nothing_hangs(
    backend, launcher_thread, monkeypatch
):
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(np.zeros(4))
        graphs = ctx._runtime.mode.recorder.graphs
        calls = []

        def refuse(graph):
            calls.append(threading.current_thread().name)
            raise CudaError("instantiating a graph (a test)", "CUDA_ERROR_TEST", 999)

        monkeypatch.setattr(graphs, "instantiate", refuse)
        monkeypatch.setattr(graphs, "update", lambda executable, graph: False)
        with ctx.task(x.rw()) as t:
            add_to(t, 0, None, 1.0)
        with pytest.raises(CudaError, match="a test"):
            ctx.wait(x)
        monkeypatch.undo()
        monkeypatch.setenv("STFLOW_GRAPH_LAUNCHER", "thread")
        with ctx.task(x.rw()) as t:  # the context goes on
            add_to(t, 0, None, 1.0)
    assert calls == ["stflow-graph-launcher"]


def test_user_scopes_launch_on_the_submitting_thread(backend, launcher_thread):
    X = np.zeros(3)
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(X)
        with sctx.graph_scope():
            with sctx.task(x.rw()) as t:
                add_to(t, 0, None, 2.0)
        assert sctx._ctx._runtime.mode.recorder.launcher.launched == 0
    np.testing.assert_array_equal(X, np.full(3, 2.0))


def test_inline_is_the_default(backend, monkeypatch):
    monkeypatch.delenv("STFLOW_GRAPH_LAUNCHER", raising=False)
    with stf.context(backend=backend, use_graph=True) as ctx:
        assert ctx._runtime.mode.recorder.launcher is None


def test_a_bad_setting_is_refused(monkeypatch):
    monkeypatch.setenv("STFLOW_GRAPH_LAUNCHER", "threads")
    with pytest.raises(ValueError, match="STFLOW_GRAPH_LAUNCHER must be one of"):
        stf.context(backend="emulated", use_graph=True)


def test_a_gate_holds_a_stream_until_another_stream_opens_it(backend):
    import time

    from stflow.backends import get_backend

    real = get_backend(backend)
    gate = real.create_gate(0)
    held, opener = real.create_stream(0), real.create_stream(0)
    try:
        real.gate_wait(held, gate, 2)
        passed = real.record(held)
        real.gate_open(opener, gate, 1)  # not enough
        real.synchronize(real.record(opener))
        time.sleep(0.01)
        assert not real.query(passed)
        real.gate_open(opener, gate, 2)
        real.synchronize(passed)
        real.gate_wait(held, gate, 1)  # already open: passes
        real.synchronize(real.record(held))
    finally:
        real.destroy_stream(held)
        real.destroy_stream(opener)
        real.destroy_gate(gate)
