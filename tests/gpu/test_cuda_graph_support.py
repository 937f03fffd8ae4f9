"""CUDA graph support of the CUDA backend (``CudaBackend.graphs``): captures, host
nodes, dependencies between captures, executables and their updates, conditional
loops and their conditions, and graphs spanning two devices."""

from __future__ import annotations

import contextlib
import ctypes
import math
import random

import numpy as np
import pytest
from helpers.gpu import cupy_stream, sync

from stflow.backends._base import HOST
from stflow.backends._graphs import GraphSupport
from stflow.errors import ScopeError

DTYPES = ["float32", "float64", "int32", "int64"]


class Tracked:
    """The backend's graph support, destroying at the end of a test the graphs and
    executables the test made and did not destroy."""

    def __init__(self, support):
        self.support = support
        self.made = []

    def __getattr__(self, name):
        return getattr(self.support, name)

    def create_graph(self):
        graph = self.support.create_graph()
        self.made.append(graph)
        return graph

    def instantiate(self, graph):
        executable = self.support.instantiate(graph)
        self.made.append(executable)
        return executable

    def destroy_graph(self, graph):
        self.made = [m for m in self.made if m is not graph]
        self.support.destroy_graph(graph)

    def destroy_exec(self, executable):
        self.made = [m for m in self.made if m is not executable]
        self.support.destroy_exec(executable)

    def close(self):
        from stflow.backends._cuda_graphs import _Executable

        for made in reversed(self.made):
            if isinstance(made, _Executable):
                self.support.destroy_exec(made)
            else:
                self.support.destroy_graph(made)


@pytest.fixture
def graphs(cuda):
    tracked = Tracked(cuda.graphs)
    yield tracked
    tracked.close()


@contextlib.contextmanager
def capture(graphs, stream, graph, deps=()):
    """Capture into ``graph`` while the block runs; the list receives the leaves."""
    leaves: list = []
    graphs.begin_capture(stream, graph, list(deps))
    try:
        yield leaves
    finally:
        leaves.extend(graphs.end_capture(stream))


def pinned(cuda, count, dtype):
    """A zeroed page-locked host array (freed with the backend's deferred releases)."""
    dtype = np.dtype(dtype)
    nbytes = count * dtype.itemsize
    allocation = cuda.allocate(HOST, nbytes, None, dtype)
    array = np.frombuffer((ctypes.c_byte * nbytes).from_address(allocation.ptr), dtype)
    array[:] = 0
    return allocation, array


@pytest.fixture
def host(cuda):
    """``host(count, dtype)``: pinned arrays released after the test."""
    allocations = []

    def make(count=1, dtype=np.int32):
        allocation, array = pinned(cuda, count, dtype)
        allocations.append(allocation)
        return array

    yield make
    for allocation in allocations:
        cuda.free(allocation, None)


def run(graphs, cuda, stream, executable, times=1):
    """Launch ``executable`` ``times`` times on ``stream`` and wait for it, once what
    the test queued eagerly on other streams (CuPy's fills of its inputs, on CuPy's
    stream, which a non-blocking ``stream`` does not wait for) completed."""
    from cuda.bindings import driver

    for device in range(cuda.device_count):
        cuda._push(device)
        try:
            (err,) = driver.cuCtxSynchronize()
        finally:
            cuda._pop(device)
        assert not err, err
    for _ in range(times):
        graphs.launch(executable, stream)
    sync(cuda, stream)


def ptr(array):
    return (
        array.data.ptr
        if hasattr(array, "data") and hasattr(array.data, "ptr")
        else array.ctypes.data
    )


def kept_host_funcs(cuda):
    return sum(1 for entry in cuda._host_funcs.values() if entry[2])


# -- captures ----------------------------------------------------------------------
def test_the_backend_has_graph_support(cuda):
    from stflow.backends._cuda_graphs import CudaGraphSupport

    assert isinstance(cuda.graphs, CudaGraphSupport)
    assert isinstance(cuda.graphs, GraphSupport)


def test_fill_copy_and_host_function_run_at_every_launch(cuda, stream, graphs, host):
    kept = kept_host_funcs(cuda)
    device = cuda.allocate(0, 64, None, np.dtype(np.uint8))
    out = host(64, np.uint8)
    seen = []
    graph = graphs.create_graph()
    with capture(graphs, stream, graph) as leaves:
        cuda.fill(device.ptr, 64, b"\x07", stream)
        cuda.copy(out.ctypes.data, device.ptr, 64, stream)
        cuda.launch_host_func(stream, lambda: seen.append(out.copy()))
    assert len(leaves) == 1
    sync(cuda, stream)
    assert not out.any() and seen == []  # captured, not run
    executable = graphs.instantiate(graph)
    run(graphs, cuda, stream, executable)
    out[:] = 0
    run(graphs, cuda, stream, executable)
    assert len(seen) == 2 and all((s == 7).all() for s in seen)
    assert kept_host_funcs(cuda) == kept + 1
    graphs.destroy_graph(graph)
    run(graphs, cuda, stream, executable)  # outlives its graph
    assert len(seen) == 3
    graphs.destroy_exec(executable)
    sync(cuda, stream)  # reaps the launch events
    assert kept_host_funcs(cuda) == kept
    cuda.free(device, None)


def test_captures_depend_on_earlier_captures(cuda, graphs, host, cupy):
    first, second, launcher = (cuda.create_stream(0) for _ in range(3))
    x = cupy.zeros(16, cupy.float32)
    y = cupy.zeros(16, cupy.float32)
    cupy.multiply(x, 2, out=y)  # compiled before any capture
    out = host(16, np.float32)
    graph = graphs.create_graph()
    with capture(graphs, first, graph) as filled:
        cuda.fill(ptr(x), x.nbytes, np.float32(3).tobytes(), first)
    with capture(graphs, second, graph, filled) as doubled:
        with cupy_stream(second.handle):
            cupy.multiply(x, 2, out=y)
    with capture(graphs, first, graph, doubled):
        cuda.copy(out.ctypes.data, ptr(y), y.nbytes, first)
    # Three child nodes in a chain, made by captures of one node each.
    assert graphs.topology(graph) == (3, 2, 3)
    run(graphs, cuda, launcher, graphs.instantiate(graph))
    assert (out == 6).all()
    for s in (first, second, launcher):
        cuda.destroy_stream(s)


def test_a_capture_of_nothing_still_orders_later_work(cuda, stream, graphs):
    # Into a top-level graph each capture is one child graph node, empty or not.
    device = cuda.allocate(0, 4, None, np.dtype(np.int32))
    graph = graphs.create_graph()
    with capture(graphs, stream, graph) as leaves:
        cuda.fill(device.ptr, 4, b"\x01", stream)
    with capture(graphs, stream, graph, leaves) as again:
        pass
    assert len(again) == 1
    with capture(graphs, stream, graph) as empty:
        pass
    assert len(empty) == 1
    assert graphs.topology(graph) == (3, 1, 1)  # one node captured, two empty
    run(graphs, cuda, stream, graphs.instantiate(graph))
    cuda.free(device, None)


def test_a_stream_captures_once_at_a_time(cuda, stream, graphs):
    graph = graphs.create_graph()
    with capture(graphs, stream, graph):
        with pytest.raises(ScopeError, match="already capturing"):
            graphs.begin_capture(stream, graph, [])


def test_pageable_copies_and_long_fills_are_captured(cuda, stream, graphs):
    source = np.arange(1000, dtype=np.int64)
    target = np.zeros_like(source)
    pattern = np.arange(3, dtype=np.float64).tobytes()  # 24 bytes: pinned tile
    device = cuda.allocate(0, source.nbytes, None, np.dtype(np.int64))
    filled = cuda.allocate(0, 24 * 512, None, np.dtype(np.float64))
    back = np.zeros(3 * 512, np.float64)
    graph = graphs.create_graph()
    with capture(graphs, stream, graph):
        cuda.copy(device.ptr, source.ctypes.data, source.nbytes, stream)
        cuda.copy(target.ctypes.data, device.ptr, source.nbytes, stream)
        cuda.fill(filled.ptr, 24 * 512, pattern, stream)
        cuda.copy(back.ctypes.data, filled.ptr, back.nbytes, stream)
    executable = graphs.instantiate(graph)
    run(graphs, cuda, stream, executable)
    assert (target == source).all()
    assert (back == np.tile([0.0, 1.0, 2.0], 512)).all()
    source *= 3  # read again at the next launch
    run(graphs, cuda, stream, executable)
    assert (target == np.arange(1000) * 3).all()
    cuda.free(device, None)
    cuda.free(filled, None)


# -- executables -------------------------------------------------------------------
def _fill_and_copy_graph(cuda, graphs, stream, device, out, value, seen):
    graph = graphs.create_graph()
    with capture(graphs, stream, graph):
        cuda.fill(device.ptr, 16, bytes([value]), stream)
        cuda.copy(out.ctypes.data, device.ptr, 16, stream)
        cuda.launch_host_func(stream, lambda: seen.append(value))
    return graph


def test_update_gives_an_executable_the_parameters_of_another_graph(
    cuda, stream, graphs, host
):
    kept = kept_host_funcs(cuda)
    devices = [cuda.allocate(0, 16, None, np.dtype(np.uint8)) for _ in range(2)]
    outs = [host(16, np.uint8) for _ in range(2)]
    seen: list = []
    first = _fill_and_copy_graph(cuda, graphs, stream, devices[0], outs[0], 1, seen)
    second = _fill_and_copy_graph(cuda, graphs, stream, devices[1], outs[1], 2, seen)
    assert graphs.topology(first) == graphs.topology(second) is not None
    executable = graphs.instantiate(first)
    run(graphs, cuda, stream, executable)
    assert seen == [1] and (outs[0] == 1).all()
    assert graphs.update(executable, second)
    run(graphs, cuda, stream, executable)
    assert seen == [1, 2] and (outs[1] == 2).all()
    graphs.destroy_graph(first)
    sync(cuda, stream)
    assert kept_host_funcs(cuda) == kept + 1  # the first graph's is released
    other = graphs.create_graph()
    with capture(graphs, stream, other):
        cuda.fill(devices[0].ptr, 16, b"\x03", stream)
    assert graphs.update(executable, other) is False  # another topology inside
    for device in devices:
        cuda.free(device, None)


# -- loops -------------------------------------------------------------------------
def _while_loop(cuda, graphs, stream, graph, deps, counter, iterations, cupy):
    """A while loop decrementing ``counter`` and counting ``iterations`` until the
    counter is no longer positive; returns the loop node."""
    node, body, handle = graphs.add_loop(graph, deps, 0, None)
    with capture(graphs, stream, body) as sinks:
        with cupy_stream(stream.handle):
            counter -= 1
            iterations += 1
        graphs.set_condition(
            stream, handle, [(ptr(counter), counter.dtype, ">", 0, False)], "all"
        )
    graphs.end_loop_body(body, handle, sinks)
    return node


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("start", [1, 5])
def test_while_loop_runs_until_its_condition_is_false(
    cuda, stream, graphs, host, cupy, dtype, start
):
    counter = cupy.zeros(1, dtype)
    initial = cupy.full(1, start, dtype)
    iterations = cupy.zeros(1, cupy.int32)
    counter -= 1
    iterations += 1  # compiled before any capture
    out = host()
    graph = graphs.create_graph()
    with capture(graphs, stream, graph) as ready:
        cuda.copy(ptr(counter), ptr(initial), counter.nbytes, stream)
        cuda.fill(ptr(iterations), 4, b"\0", stream)
    node = _while_loop(cuda, graphs, stream, graph, ready, counter, iterations, cupy)
    with capture(graphs, stream, graph, [node]):
        cuda.copy(out.ctypes.data, ptr(iterations), 4, stream)
    executable = graphs.instantiate(graph)
    for _ in range(2):  # the counter is reset per launch
        out[:] = -1
        run(graphs, cuda, stream, executable)
        assert out[0] == start


def _term_value(dtype, op, threshold, negate, holds):
    """A value of ``dtype`` for which the term holds (or not)."""
    if dtype.startswith("int"):
        base = [math.floor(threshold) + k for k in (-1, 0, 1, 2)]
    else:
        base = [threshold - 1, threshold, threshold + 1]
    for value in base:
        truth = {
            ">": value > threshold,
            "<": value < threshold,
            ">=": value >= threshold,
            "<=": value <= threshold,
        }[op]
        if (truth != negate) == holds:
            return value
    raise AssertionError("no value found")


@pytest.mark.parametrize("count", range(1, 9))
@pytest.mark.parametrize("combiner", ["all", "any"])
@pytest.mark.parametrize("seed", range(3))
def test_condition_terms_are_combined(
    cuda, stream, graphs, host, cupy, count, combiner, seed
):
    rng = random.Random(seed * 100 + count * 2 + (combiner == "any"))
    terms, values, initial, false = [], [], [], []
    wanted = []
    for _ in range(count):
        dtype = rng.choice(DTYPES)
        op = rng.choice([">", "<", ">=", "<="])
        threshold = rng.choice([0.0, 2.0, -3.0, 2.5, -0.5])
        negate = rng.random() < 0.5
        holds = rng.random() < (0.8 if combiner == "all" else 0.3)
        wanted.append(holds)
        value = cupy.zeros(1, dtype)
        values.append(value)
        initial.append(
            cupy.full(1, _term_value(dtype, op, threshold, negate, holds), dtype)
        )
        false.append(
            cupy.full(1, _term_value(dtype, op, threshold, negate, False), dtype)
        )
        terms.append((ptr(value), np.dtype(dtype), op, threshold, negate))
    iterations = cupy.zeros(1, cupy.int32)
    iterations += 1
    out = host()
    graph = graphs.create_graph()
    with capture(graphs, stream, graph) as ready:
        for value, start in zip(values, initial):
            cuda.copy(ptr(value), ptr(start), value.nbytes, stream)
        cuda.fill(ptr(iterations), 4, b"\0", stream)
    node, body, handle = graphs.add_loop(graph, ready, 0, None)
    with capture(graphs, stream, body) as sinks:
        with cupy_stream(stream.handle):
            iterations += 1
        graphs.set_condition(stream, handle, terms, combiner)
        for value, stop in zip(values, false):  # false at the next evaluation
            cuda.copy(ptr(value), ptr(stop), value.nbytes, stream)
    graphs.end_loop_body(body, handle, sinks)
    with capture(graphs, stream, graph, [node]):
        cuda.copy(out.ctypes.data, ptr(iterations), 4, stream)
    run(graphs, cuda, stream, graphs.instantiate(graph))
    holds = all(wanted) if combiner == "all" else any(wanted)
    assert out[0] == (2 if holds else 1), (terms, wanted)


def test_bad_conditions_are_refused(cuda, stream, graphs):
    term = (0, np.dtype(np.float32), ">", 0.0, False)
    with pytest.raises(ValueError, match="'all' or 'any'"):
        graphs.set_condition(stream, 1, [term], "most")
    with pytest.raises(ValueError, match="1 to 8 terms"):
        graphs.set_condition(stream, 1, [term] * 9, "all")
    with pytest.raises(ValueError, match="not float16"):
        graphs.set_condition(
            stream, 1, [(0, np.dtype(np.float16), ">", 0.0, False)], "all"
        )
    with pytest.raises(ValueError, match="not '=='"):
        graphs.set_condition(
            stream, 1, [(0, np.dtype(np.int32), "==", 0.0, False)], "all"
        )


def _counting_loop(cuda, graphs, stream, graph, deps, count, iterations, cupy):
    node, body, handle = graphs.add_loop(graph, deps, 0, count)
    with capture(graphs, stream, body) as sinks:
        with cupy_stream(stream.handle):
            iterations += 1
    graphs.end_loop_body(body, handle, sinks)
    return node


def _repeat_graph(cuda, graphs, stream, count, iterations, out, cupy):
    graph = graphs.create_graph()
    with capture(graphs, stream, graph) as ready:
        cuda.fill(ptr(iterations), 4, b"\0", stream)
    node = _counting_loop(cuda, graphs, stream, graph, ready, count, iterations, cupy)
    with capture(graphs, stream, graph, [node]):
        cuda.copy(out.ctypes.data, ptr(iterations), 4, stream)
    return graph


def test_update_exchanges_loop_counts(cuda, stream, graphs, host, cupy):
    iterations = cupy.zeros(1, cupy.int32)
    iterations += 1
    out = host()
    three = _repeat_graph(cuda, graphs, stream, 3, iterations, out, cupy)
    five = _repeat_graph(cuda, graphs, stream, 5, iterations, out, cupy)
    key = graphs.topology(three)
    assert key is not None and key == graphs.topology(five)
    executable = graphs.instantiate(three)
    run(graphs, cuda, stream, executable)
    assert out[0] == 3
    assert graphs.update(executable, five)
    graphs.destroy_graph(three)
    run(graphs, cuda, stream, executable)
    assert out[0] == 5
    counter = cupy.zeros(1, cupy.int32)
    counter -= 1
    looping = graphs.create_graph()
    _while_loop(cuda, graphs, stream, looping, [], counter, iterations, cupy)
    assert graphs.update(executable, looping) is False


@pytest.mark.parametrize("count", [0, 1, 5])
def test_repeat_loop_runs_count_times(cuda, stream, graphs, host, cupy, count):
    iterations = cupy.zeros(1, cupy.int32)
    iterations += 1
    out = host()
    graph = _repeat_graph(cuda, graphs, stream, count, iterations, out, cupy)
    executable = graphs.instantiate(graph)
    for _ in range(2):
        out[:] = -1
        run(graphs, cuda, stream, executable)
        assert out[0] == count


def test_loop_node_takes_dependencies_later(cuda, stream, graphs, host, cupy):
    iterations = cupy.full(1, 7, cupy.int32)
    iterations += 1
    out = host()
    graph = graphs.create_graph()
    node = _counting_loop(cuda, graphs, stream, graph, [], 2, iterations, cupy)
    with capture(graphs, stream, graph) as reset:
        cuda.fill(ptr(iterations), 4, b"\0", stream)
    graphs.add_dependencies(graph, reset, node)
    with capture(graphs, stream, graph, [node]):
        cuda.copy(out.ctypes.data, ptr(iterations), 4, stream)
    run(graphs, cuda, stream, graphs.instantiate(graph))
    assert out[0] == 2


def test_nested_loops(cuda, stream, graphs, host, cupy):
    iterations = cupy.zeros(1, cupy.int32)
    counter = cupy.zeros(1, cupy.int64)
    initial = cupy.full(1, 4, cupy.int64)
    iterations += 1
    counter -= 1
    out = host(2)
    graph = graphs.create_graph()
    with capture(graphs, stream, graph) as ready:
        cuda.fill(ptr(iterations), 4, b"\0", stream)
    outer, body, handle = graphs.add_loop(graph, ready, 0, 3)
    inner = _counting_loop(cuda, graphs, stream, body, [], 2, iterations, cupy)
    with capture(graphs, stream, body, [inner]) as reset:
        cuda.copy(ptr(counter), ptr(initial), 8, stream)
    inner_while = _while_loop(
        cuda, graphs, stream, body, reset, counter, iterations, cupy
    )
    graphs.end_loop_body(body, handle, [inner_while])
    with capture(graphs, stream, graph, [outer]):
        cuda.copy(out.ctypes.data, ptr(iterations), 4, stream)
    executable = graphs.instantiate(graph)
    for _ in range(2):
        out[:] = -1
        run(graphs, cuda, stream, executable)
        assert out[0] == 3 * (2 + 4)  # the inner loops restart in every iteration


def test_device_copies_run_in_a_loop_body(cuda, stream, graphs, host, cupy):
    total = cupy.zeros(1, cupy.int32)
    total += 1
    step = host()
    step[0] = 2
    out = host()
    graph = graphs.create_graph()
    with capture(graphs, stream, graph) as ready:
        cuda.fill(ptr(total), 4, b"\0", stream)
    node, body, handle = graphs.add_loop(graph, ready, 0, 4)
    with capture(graphs, stream, body) as sinks:
        with cupy_stream(stream.handle):
            total += 1
        cuda.copy(out.ctypes.data, ptr(total), 4, stream)  # device -> pinned
        cuda.copy(ptr(total), step.ctypes.data, 4, stream)  # pinned -> device
    graphs.end_loop_body(body, handle, sinks)
    run(graphs, cuda, stream, graphs.instantiate(graph))
    assert out[0] == 3


def test_host_work_in_a_loop_body_is_refused(cuda, stream, graphs):
    pageable = np.zeros(8, np.uint8)
    device = cuda.allocate(0, 8, None, np.dtype(np.uint8))
    graph = graphs.create_graph()
    node, body, handle = graphs.add_loop(graph, [], 0, 1)
    with capture(graphs, stream, body) as sinks:
        with pytest.raises(ScopeError, match="cannot hold host callbacks"):
            cuda.launch_host_func(stream, lambda: None)
        with pytest.raises(ScopeError, match="register the host array"):
            cuda.copy(device.ptr, pageable.ctypes.data, 8, stream)
        with pytest.raises(ScopeError, match="cannot hold host callbacks"):
            cuda.fill(pageable.ctypes.data, 8, b"\x01", stream)
        cuda.fill(device.ptr, 8, b"\x01", stream)
    graphs.end_loop_body(body, handle, sinks)
    cuda.free(device, None)


def test_removing_a_loop_node(cuda, stream, graphs):
    graph = graphs.create_graph()
    node, body, handle = graphs.add_loop(graph, [], 0, 3)
    graphs.remove_node(graph, node)
    assert graphs.topology(graph) == (0, 0, 0)
    with pytest.raises(ScopeError, match="not the body of a loop"):
        graphs.end_loop_body(body, handle, [])


# -- devices -----------------------------------------------------------------------
def test_a_graph_spans_two_devices(cuda, graphs, host, cupy):
    if cuda.device_count < 2:
        pytest.skip("needs two devices")
    streams = [cuda.create_stream(0), cuda.create_stream(1)]
    with cupy.cuda.Device(0):
        x0 = cupy.zeros(8, cupy.float32)
    with cupy.cuda.Device(1):
        x1 = cupy.zeros(8, cupy.float32)
        x1 += 1
    out = host(8, np.float32)
    graph = graphs.create_graph()
    with capture(graphs, streams[0], graph) as filled:
        cuda.fill(ptr(x0), 32, np.float32(5).tobytes(), streams[0])
    with capture(graphs, streams[1], graph, filled) as added:
        cuda.copy(ptr(x1), ptr(x0), 32, streams[1])
        with cupy.cuda.Device(1), cupy_stream(streams[1].handle):
            x1 += 1
    with capture(graphs, streams[0], graph, added):
        cuda.copy(out.ctypes.data, ptr(x1), 32, streams[0])
    executable = graphs.instantiate(graph)
    for _ in range(2):
        out[:] = 0
        run(graphs, cuda, streams[0], executable)
        assert (out == 6).all()
    for s in streams:
        cuda.destroy_stream(s)


def test_a_loop_body_stays_on_the_loop_device(cuda, graphs):
    if cuda.device_count < 2:
        pytest.skip("needs two devices")
    other = cuda.create_stream(1)
    graph = graphs.create_graph()
    body = graphs.add_loop(graph, [], 0, 2)[1]
    with pytest.raises(
        ScopeError, match="work of device 1 cannot run in the body of a loop on device 0"
    ):
        graphs.begin_capture(other, body, [])
    cuda.destroy_stream(other)
