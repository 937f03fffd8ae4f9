"""Memory stays flat: graph-mode epochs and scopes keep nothing of earlier ones alive,
and contexts on a shared user stream leave no state on it.

Growth is measured with ``tracemalloc`` (what Python and NumPy allocate), which is
deterministic enough for CI; ``benchmarks/memory_flat.py`` measures the process RSS
over the longer runs of the issue's criteria.
"""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers.bodies import add_to

import stflow as stf
from stflow._graph.recording import Graph
from stflow.backends import get_backend


def _live(kind: type) -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is kind)


def _growth(rounds: int, run: Callable[[], None], recorder: Any) -> tuple[int, int]:
    """(bytes still allocated, live recorder graphs) added by ``rounds`` more runs
    after a warm-up run.

    The executables the recorder keeps for reuse are dropped at both measurements:
    how many topologies the runs leave cached depends on the scheduler's timing, and
    the cache's bound is tested on its own (``test_graph_cache.py``)."""
    run()
    recorder.drop_cached()
    graphs = _live(Graph)
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(rounds):
            run()
        recorder.drop_cached()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, _live(Graph) - graphs
    finally:
        tracemalloc.stop()


def test_graph_mode_epochs_keep_nothing_of_earlier_epochs(backend):
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(np.zeros(16))

        def epochs() -> None:
            for i in range(1000):
                with ctx.task(x.rw()) as t:
                    add_to(t, 0, None, 1.0)
                if i % 100 == 99:
                    ctx.fence()
            ctx.wait(x)  # the device caught up: graphs can go
            ctx.fence()

        grown, graphs = _growth(4, epochs, ctx._runtime.mode.recorder)
        assert graphs <= 4, f"{graphs} more recorded graphs alive after 40 epochs"
        assert grown < 256 * 1024, f"{grown / 1024:.0f} KiB kept by 4000 graph-mode tasks"
        assert ctx.wait(x)[0] == 5000.0


def test_graph_scopes_keep_nothing_of_earlier_scopes(backend):
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(np.zeros(16))
        native = sctx._runtime.mode.scopes.recorder.real

        def scopes() -> None:
            for _ in range(100):
                with sctx.graph_scope():
                    with sctx.task(x.rw()) as t:
                        add_to(t, 0, None, 1.0)
            stream = native.stream_from_handle(sctx.fence())
            native.synchronize(native.record(stream))
            sctx.fence()  # releases the completed graphs

        grown, graphs = _growth(5, scopes, sctx._runtime.mode.scopes.recorder)
        assert graphs <= 4, f"{graphs} more recorded graphs alive after 500 scopes"
        assert grown < 256 * 1024, f"{grown / 1024:.0f} KiB kept by 500 graph scopes"


def test_contexts_on_one_user_stream_leave_nothing_behind(backend):
    native = get_backend(backend)
    user = native.stream_from_handle(0)
    streams = []
    for _ in range(300):
        with stf.context(backend=backend, stream=0) as ctx:
            x = ctx.logical_data_zeros((4,))
            with ctx.task(x.rw()) as t:
                add_to(t, 0, None, 1.0)
            streams.extend(weakref.ref(s) for s in ctx._runtime.root_pools.streams)
        del t, x
    native.synchronize(native.record(user))
    gc.collect()
    assert user.waited == {}, "contexts left ordering state on the user's stream"
    assert sum(ref() is not None for ref in streams) == 0, (
        "the user's stream keeps finished contexts' streams alive"
    )


@pytest.mark.device_memory
def test_a_thousand_contexts_leave_device_memory_and_threads_as_they_were(backend):
    """Contexts that move data to devices, reduce and evict, created and finalized
    one after another: nothing of them stays on a device, no thread is left."""
    import threading

    from helpers.backends import device_bytes_in_use, one_context_round

    def one() -> None:
        one_context_round(backend, 256)

    one()
    gc.collect()
    memory, threads = device_bytes_in_use(backend), threading.active_count()
    for _ in range(1000):
        one()
    gc.collect()
    slack = 0 if backend == "emulated" else 2 << 20  # the driver's own bookkeeping
    assert device_bytes_in_use(backend) - memory <= slack
    assert threading.active_count() == threads
