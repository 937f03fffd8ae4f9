"""The executable-graph cache of graph mode: bounded, least recently used first.

A graph-mode context keeps the executables of retired graphs, one per topology, so
that the next graph of that topology updates one instead of instantiating; a program
whose epochs keep changing shape must not keep an executable of every shape it ever
had (``STFLOW_GRAPH_CACHE_ENTRIES``, 64 by default).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.bodies import add_to

import stflow as stf


def _epoch(ctx, x, tasks: int) -> None:
    """One epoch: a chain of ``tasks`` increments of ``x``, then a fence."""
    for _ in range(tasks):
        with ctx.task(x.rw()) as t:
            add_to(t, 0, None, 1.0)
    ctx.fence()


def _settled(ctx, x) -> None:
    """Wait until every launched graph ran and retired into the cache."""
    ctx.wait(x)
    ctx._runtime.mode.recorder.pending_events()


def test_the_cache_keeps_the_most_recently_used_topologies(backend, monkeypatch):
    monkeypatch.setenv("STFLOW_GRAPH_CACHE_ENTRIES", "3")
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(np.zeros(4))
        recorder = ctx._runtime.mode.recorder
        sizes = range(1, 9)  # eight epochs of eight topologies
        for tasks in sizes:
            _epoch(ctx, x, tasks)
            _settled(ctx, x)
            assert len(recorder.cache) <= 3
        assert len(recorder.cache) == 3
        instantiated = ctx.statistics().graph_instantiations
        _epoch(ctx, x, 8)  # cached: updated, not instantiated
        _settled(ctx, x)
        assert ctx.statistics().graph_instantiations == instantiated
        _epoch(ctx, x, 1)  # the least recently used: destroyed long ago
        _settled(ctx, x)
        assert ctx.statistics().graph_instantiations == instantiated + 1
        assert len(recorder.cache) == 3
        assert ctx.wait(x)[0] == sum(sizes) + 8 + 1


def test_a_cache_of_zero_entries_keeps_nothing(backend, monkeypatch):
    monkeypatch.setenv("STFLOW_GRAPH_CACHE_ENTRIES", "0")
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(np.zeros(4))
        for _ in range(3):
            _epoch(ctx, x, 5)
            _settled(ctx, x)
        assert ctx._runtime.mode.recorder.cache == {}
        statistics = ctx.statistics()
        assert (statistics.graph_instantiations, statistics.graph_updates) == (3, 0)
        assert ctx.wait(x)[0] == 15.0


def test_epochs_of_ever_new_shapes_keep_a_bounded_cache(backend):
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(np.zeros(4))
        for tasks in range(1, 81):
            _epoch(ctx, x, tasks)
        _settled(ctx, x)
        assert len(ctx._runtime.mode.recorder.cache) <= 64
        assert ctx.wait(x)[0] == 80 * 81 / 2


@pytest.mark.parametrize("text", ["-1", "many", "2.5"])
def test_a_bad_cache_size_is_refused_naming_the_variable(monkeypatch, text):
    monkeypatch.setenv("STFLOW_GRAPH_CACHE_ENTRIES", text)
    with pytest.raises(ValueError, match="STFLOW_GRAPH_CACHE_ENTRIES"):
        stf.context(backend="emulated", use_graph=True)


def test_contexts_on_threads_sharing_async_resources_keep_one_bounded_cache(
    backend, monkeypatch
):
    """Contexts of several threads park and take executables of one shared cache at
    once: each thread's results are exact and the cache stays within its bound."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("STFLOW_GRAPH_CACHE_ENTRIES", "2")
    resources = stf.async_resources()
    shapes = [1 + k % 5 for k in range(15)]

    def work(offset: int) -> float:
        with stf.context(backend=backend, use_graph=True, handle=resources) as ctx:
            x = ctx.logical_data(np.zeros(4))
            for k in range(len(shapes)):
                _epoch(ctx, x, shapes[(k + offset) % len(shapes)])
            return float(ctx.wait(x)[0])

    with ThreadPoolExecutor(4) as pool:
        totals = list(pool.map(work, range(8)))
    assert totals == [float(sum(shapes))] * 8
    assert 1 <= len(resources._shared.graph_cache) <= 2  # kept beyond the contexts
