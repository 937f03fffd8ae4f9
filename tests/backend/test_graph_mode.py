"""Graph mode (``context(use_graph=True)``): record an epoch, replay it at sync points."""

from __future__ import annotations

import json

import numpy as np
import pytest

import stflow as stf
from stflow.errors import ScopeError
from stflow.instrument import TraceRecorder
from tests.helpers.bodies import add_to


@pytest.fixture
def graph_ctx(backend):
    with stf.context(backend=backend, use_graph=True) as ctx:
        yield ctx


def _axpy(t, scale):
    add_to(t, 1, 0, scale)


def _last_device(ctx):
    return ctx._runtime.backend.device_count - 1


def test_results_match_stream_mode(graph_ctx):
    X, Y = np.arange(16.0), np.ones(16)
    ctx = graph_ctx
    lx, ly = ctx.logical_data(X), ctx.logical_data(Y)
    for step in range(4):
        with ctx.task(
            stf.exec_place.device(step % 2 and _last_device(ctx)), lx.read(), ly.rw()
        ) as t:
            _axpy(t, 2.0)
    assert Y[1] == 1.0  # nothing ran yet: recorded only
    np.testing.assert_array_equal(ctx.wait(ly), 1 + 8 * np.arange(16.0))
    assert ctx.statistics().graph_instantiations == 1


def test_work_runs_when_the_graph_is_replayed(graph_ctx):
    ctx = graph_ctx
    log = []
    token = ctx.token()
    ctx.host_launch(token.rw(), fn=lambda: log.append("first"))
    ctx.host_launch(token.rw(), fn=lambda: log.append("second"))
    assert log == []  # recorded, not run
    with stf.context(backend=ctx.backend, stream=ctx.fence()):
        pass  # a stream context on the fence stream
    ctx.finalize()
    assert log == ["first", "second"]


def test_host_access_in_a_recorded_body_is_refused(graph_ctx):
    if graph_ctx.backend != "emulated":
        pytest.skip("CUDA task views are device memory: no host access to refuse")
    ld = graph_ctx.logical_data(np.zeros(4))
    with graph_ctx.task(ld.rw()) as t:
        with pytest.raises(ScopeError, match="recorded"):
            np.asarray(t.get_arg_cai(0))


def test_epochs_follow_each_other(graph_ctx):
    ctx = graph_ctx
    ld = ctx.logical_data(np.zeros(3))
    for epoch in range(3):
        with ctx.task(
            stf.exec_place.device(epoch % 2 and _last_device(ctx)), ld.rw()
        ) as t:
            add_to(t, 0, None, 1.0)
        ctx.fence()
    np.testing.assert_array_equal(ctx.wait(ld), [3.0, 3.0, 3.0])
    stats = ctx.statistics()  # one executable per fence, new or updated (one device:
    assert stats.graph_instantiations + stats.graph_updates == 3  # same topologies)


def test_trace_of_a_graph_mode_context(backend):
    recorder = TraceRecorder()
    with stf.context(backend=backend, use_graph=True) as ctx:
        ctx.attach(recorder)
        ld = ctx.logical_data(np.zeros(8))
        with ctx.task(ld.rw(), symbol="add") as t:
            add_to(t, 0, None, 1.0)
    events = json.loads(json.dumps(recorder.to_json()))["traceEvents"]
    assert "task 'add'" in {e["name"] for e in events if e["ph"] == "X"}


def test_graph_mode_on_a_caller_stream(backend):
    """``context(use_graph=True, stream=s)``: the graphs launch on ``s``, after what
    ``s`` held, and ``finalize()`` orders the write-back on ``s`` without waiting."""
    from stflow.backends import get_backend

    real = get_backend(backend)
    caller = real.create_stream(0)
    X = np.zeros(8)
    try:
        ctx = stf.context(backend=backend, use_graph=True, stream=caller.handle)
        recorder = ctx._runtime.backend
        lx = ctx.logical_data(X)
        for _ in range(3):
            with ctx.task(lx.rw()) as t:
                add_to(t, 0, None, 1.0)
        assert recorder.launch_stream().handle == caller.handle
        ctx.finalize()
        real.synchronize(real.record(caller))
        np.testing.assert_array_equal(X, 3.0)
        assert ctx.statistics().graph_instantiations == 1
    finally:
        real.synchronize(real.record(caller))
        real.destroy_stream(caller)


def test_long_epochs_are_launched_in_parts(backend, monkeypatch):
    import stflow._graph.scopes as scopes

    monkeypatch.setattr(scopes, "EPOCH_TASKS", 50)
    with stf.context(backend=backend, use_graph=True) as ctx:
        ld = ctx.logical_data(np.zeros(4))
        for _ in range(175):
            with ctx.task(ld.rw()) as t:
                add_to(t, 0, None, 1.0)
        stats = ctx.statistics()
        assert stats.graph_instantiations + stats.graph_updates == 3  # 3 x 50 launched
        np.testing.assert_array_equal(ctx.wait(ld), np.full(4, 175.0))
