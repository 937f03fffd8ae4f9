"""Replays of launchable graphs of one topology run concurrently (issue 27, item 6).

An executable graph runs one launch at a time: launched on two streams at once, the
second launch waits for the first. A cache of executables keyed by topology alone
would give two graphs of the same topology one executable and serialise their
replays (upstream CUDASTF had this bug). Each graph alive here holds an executable of
its own, so two replays launched at once overlap: both together take about as long
as one. Each graph spins one thread for ``SPIN_CYCLES // 2`` clock ticks (about
50 ms), far longer than the launches themselves.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from helpers.gpu import SPIN_CYCLES, launch_spin

import stflow as stf

CYCLES = SPIN_CYCLES // 2

pytestmark = pytest.mark.device_memory  # timed: needs the GPU to itself (not under -n)


def _spinning_graph(value: int) -> tuple[stf.TaskGraph, np.ndarray]:
    flag = np.zeros(1, np.int32)
    graph = stf.task_graph(backend="cuda")
    x = graph.context.logical_data(flag)
    with graph:
        with graph.context.task(x.rw()) as t:
            launch_spin(t.stream_ptr(), t.get_arg(0), value, CYCLES)
    return graph, flag


def _synchronize(handles: list[int]) -> None:
    from cuda.bindings import driver

    for handle in handles:
        (status,) = driver.cuStreamSynchronize(driver.CUstream(handle))
        assert status == driver.CUresult.CUDA_SUCCESS


def _seconds(launch, streams: list[int]) -> float:
    start = time.perf_counter()
    launch()
    _synchronize(streams)
    return time.perf_counter() - start


@pytest.mark.usefixtures("cupy")
def test_two_task_graphs_of_one_topology_replay_concurrently():
    (first, flag_a), (second, flag_b) = _spinning_graph(1), _spinning_graph(2)
    try:
        assert first.exec_graph != second.exec_graph
        assert first.stream != second.stream
        streams = [first.stream, second.stream]
        _seconds(lambda: (first.launch(), second.launch()), streams)  # warm up
        alone = min(_seconds(first.launch, [first.stream]) for _ in range(3))
        together = min(
            _seconds(lambda: (first.launch(), second.launch()), streams) for _ in range(3)
        )
        assert together < 1.5 * alone, (
            f"two replays launched at once took {together * 1e3:.1f} ms, one alone "
            f"{alone * 1e3:.1f} ms: they ran one after the other"
        )
    finally:
        first.finalize()
        second.finalize()
    assert flag_a[0] == 1 and flag_b[0] == 2


@pytest.mark.usefixtures("cupy")
def test_executables_launched_on_two_user_streams_overlap(cuda):
    """The executables themselves (``exec_graph``), launched by the caller with
    ``cuGraphLaunch`` on two streams of its own, overlap too."""
    from cuda.bindings import driver

    (first, _), (second, _) = _spinning_graph(1), _spinning_graph(2)
    mine = [cuda.create_stream(0), cuda.create_stream(0)]
    handles = [int(s.handle) for s in mine]
    try:
        executables = [first.exec_graph, second.exec_graph]
        assert executables[0] != executables[1]

        def launch(count: int) -> None:
            for executable, handle in list(zip(executables, handles))[:count]:
                (status,) = driver.cuGraphLaunch(
                    driver.CUgraphExec(executable), driver.CUstream(handle)
                )
                assert status == driver.CUresult.CUDA_SUCCESS

        _synchronize([first.stream, second.stream])
        _seconds(lambda: launch(2), handles)  # warm up
        alone = min(_seconds(lambda: launch(1), handles[:1]) for _ in range(3))
        together = min(_seconds(lambda: launch(2), handles) for _ in range(3))
        assert together < 1.5 * alone, (
            f"two executables launched at once took {together * 1e3:.1f} ms, one "
            f"alone {alone * 1e3:.1f} ms"
        )
    finally:
        _synchronize(handles)
        for s in mine:
            cuda.destroy_stream(s)
        first.finalize()
        second.finalize()
