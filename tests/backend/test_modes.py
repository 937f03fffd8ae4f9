"""The mode of a runtime (``stflow._engine.mode.Mode``, ``stflow._graph.mode.GraphMode``):
chosen once by the context, called by the runtime at the points where the modes
differ; and the contract pieces of that seam (``Backend.native``, ``Stream.captures``,
the started work eviction leaves alone)."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow._engine.mode import Mode
from stflow._graph.mode import GraphMode
from stflow.backends import get_backend
from tests.helpers.bodies import add_to


def test_a_context_chooses_its_mode_once(backend):
    native = get_backend(backend)
    with stf.context(backend=backend) as ctx:
        mode = ctx._runtime.mode
        assert type(mode) is Mode and not mode.graph
        assert mode.context_name == "context"
        assert ctx._runtime.backend is native and native.native is native
    with stf.context(backend=backend, use_graph=True) as ctx:
        mode = ctx._runtime.mode
        assert isinstance(mode, GraphMode) and mode.graph and mode.epochs
        assert mode.context_name == "context"
        recorder = ctx._runtime.backend
        assert recorder is not native and recorder.native is native
        assert mode.scopes.recorder is recorder
    with stf.stackable_context(backend=backend) as sctx:
        mode = sctx._ctx._runtime.mode
        assert isinstance(mode, GraphMode) and not mode.epochs
        assert mode.context_name == "stackable_context"


def test_stream_mode_hooks_change_nothing(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        with ctx.task(x.rw()) as t:
            plan, stream = t._plan, t._stream
            add_to(t, 0, None, 1.0)
        runtime = ctx._runtime
        mode = runtime.mode
        state, instance = x._state, plan.accesses[0].instance
        assert mode.admit(plan, "t") is False
        assert mode.pools() is None
        assert mode.free_stream(stream, runtime.root_pools, 0) is stream
        assert mode.recording() is False and mode.copy_device() is None
        assert mode.retirement_allowed() is True and mode.pending_events() == []
        assert mode.combines_at_once() is False and list(mode.held_states()) == []
        assert mode.statistics() == (0, 0) and mode.discard() == 0
        mode.wrote(state, instance)
        mode.touch(state)
        with mode.root_level():
            pass
        assert mode.backend(runtime.backend) is runtime.backend
        np.testing.assert_array_equal(ctx.wait(x), 1.0)


class _Logged(Mode):
    """Stream mode's hooks, logged, in a mode that says it is graph mode (so the
    runtime calls its per-task hooks too; they change nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.graph = True
        self.calls: list[str] = []

    def __getattribute__(self, name: str):
        value = super().__getattribute__(name)
        if callable(value) and not name.startswith("_") and name != "backend":
            calls = super().__getattribute__("calls")

            def logged(*args, **kwargs):
                calls.append(name)
                return value(*args, **kwargs)

            return logged
        return value


def test_the_runtime_calls_its_mode_where_the_modes_differ(backend):
    mode = _Logged()
    ctx = stf.context.__new__(stf.context)
    ctx._stream_owner = None
    ctx._start(get_backend(backend), None, mode)
    assert mode.calls[:2] == ["attach", "start"]
    X = np.zeros(4)
    x = ctx.logical_data(X)
    with ctx.task(x.rw()) as t:
        add_to(t, 0, None, 2.0)
    task_calls = mode.calls[2:]
    for hook in (
        "admit",
        "pools",
        "free_stream",
        "body_started",
        "body_ended",
        "released",
    ):
        assert hook in task_calls, hook
    assert (
        task_calls.index("admit")
        < task_calls.index("body_started")
        < task_calls.index("body_ended")
        < task_calls.index("released")
    )
    assert "noted" not in task_calls  # stream mode records nothing
    del mode.calls[:]
    np.testing.assert_array_equal(ctx.wait(x), 2.0)
    assert mode.calls.index("boundary") < mode.calls.index("resume")
    del mode.calls[:]
    ctx.finalize()
    for hook in ("check_finalize", "quiesce", "close", "finalized"):
        assert hook in mode.calls, hook
    assert (
        mode.calls.index("check_finalize")
        < mode.calls.index("quiesce")
        < mode.calls.index("close")
        < mode.calls.index("finalized")
    )
    np.testing.assert_array_equal(X, 2.0)


@pytest.mark.parametrize("use_graph", [False, True])
def test_streams_say_whether_their_work_is_captured(backend, use_graph):
    with stf.context(backend=backend, use_graph=use_graph) as ctx:
        x = ctx.logical_data(np.zeros(4))
        with ctx.task(x.rw()) as t:
            captures = t._stream.captures
            add_to(t, 0, None, 1.0)
        assert captures is use_graph
        np.testing.assert_array_equal(ctx.wait(x), 1.0)


def test_lent_place_resources_hold_native_streams_in_graph_mode(backend):
    native = get_backend(backend)
    with stf.context(backend=backend, use_graph=True) as ctx:
        pools = ctx.place_resources._pools
        assert pools.backend is native
        assert pools.compute is not ctx._runtime.root_pools  # its own, not the graph's
    with stf.context(backend=backend) as ctx:
        pools = ctx.place_resources._pools
        assert pools.backend is native and pools.compute is ctx._runtime.root_pools


def test_started_work_names_what_eviction_leaves_alone(backend):
    with stf.context(backend=backend) as ctx:
        x, s = ctx.logical_data(np.ones(4)), ctx.logical_data(np.zeros(1))
        t = ctx.task(x.read(), s.reduce("sum"))
        t.start()
        try:
            assert t.held_plan() is t._plan is not None
            assert tuple(t.held_states()) == ()
            private = t.held_private()
            assert len(private) == 1 and private[0].allocation is not None
        finally:
            t.end()
        assert t.held_private() == private  # kept until the task is collected


def test_a_launchable_graph_holds_its_data_between_launches(backend):
    with stf.stackable_context(backend=backend) as sctx:
        X = np.zeros(4)
        x = sctx.logical_data(X)
        with sctx.launchable_graph_scope() as lg:
            with sctx.task(x.rw()) as t:
                add_to(t, 0, None, 1.0)
            lg.launch()  # recorded: held until reset
            held = lg._state
            assert held in sctx._ctx._runtime.started
            assert held.held_plan() is None and held.held_private() == ()
            assert x._state in list(held.held_states())
            lg.launch()
        assert held not in sctx._ctx._runtime.started
    np.testing.assert_array_equal(X, 2.0)
