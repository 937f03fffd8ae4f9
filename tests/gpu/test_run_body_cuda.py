"""task.run on CUDA: the CuPy arrays a body gets are arrays made once per allocation
and device, over the task's instances; what a body does to one (a new shape) does not
reach the next body."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import stflow as stf


@pytest.mark.parametrize("use_graph", [False, True], ids=["streams", "graph"])
def test_bodies_get_the_instances_of_their_task(cupy, use_graph):
    X, Y = np.arange(12.0).reshape(3, 4), np.full((3, 4), 2.0)
    seen = []
    with stf.context(backend="cuda", use_graph=use_graph) as ctx:
        x, y = ctx.logical_data(X), ctx.logical_data(Y)
        for _ in range(3):
            with ctx.task(x.rw(), y.read()) as t:
                t.run(
                    lambda xp, a, b: (seen.append((a.data.ptr, a.shape)), a.__iadd__(b))
                )
    np.testing.assert_array_equal(X, np.arange(12.0).reshape(3, 4) + 6.0)
    assert len({ptr for ptr, _ in seen}) == 1 and {s for _, s in seen} == {(3, 4)}


def test_a_body_changing_its_arrays_shape_does_not_change_the_next(cupy):
    X = np.arange(6.0).reshape(2, 3)
    with stf.context(backend="cuda") as ctx:
        x = ctx.logical_data(X)
        with ctx.task(x.rw()) as t:

            def flatten(xp, a):
                a.shape = (6,)  # the cached array itself, reshaped in place
                a += 1.0

            t.run(flatten)
        with ctx.task(x.rw()) as t:
            t.run(lambda xp, a: (None if a.shape == (2, 3) else 1 / 0, a.__imul__(2.0)))
    np.testing.assert_array_equal(X, (np.arange(6.0).reshape(2, 3) + 1.0) * 2.0)


def test_bodies_on_tiles_and_on_memory_reused_after_free(cupy):
    A = np.arange(64.0).reshape(8, 8)
    with stf.context(backend="cuda") as ctx:
        grid = stf.tiles(ctx, A, (4, 4))
        for (i, j), tile in grid:
            with ctx.task(tile.rw()) as t:
                t.run(lambda xp, a, k=i * 2 + j: a.__iadd__(100.0 * k))
    expected = np.arange(64.0).reshape(8, 8)
    for i in range(2):
        for j in range(2):
            expected[4 * i : 4 * i + 4, 4 * j : 4 * j + 4] += 100.0 * (i * 2 + j)
    np.testing.assert_array_equal(A, expected)
    for value in range(3):  # fresh contexts, fresh allocations
        Z = np.zeros(1000)
        with stf.context(backend="cuda") as ctx:
            z = ctx.logical_data(Z)
            with ctx.task(z.rw()) as t:
                t.run(lambda xp, a, v=value: a.fill(v))
        gc.collect()
        np.testing.assert_array_equal(Z, np.full(1000, float(value)))


def test_a_reduction_body_gets_its_private_instance(cupy):
    with stf.context(backend="cuda") as ctx:
        total = ctx.logical_data(np.zeros(4))
        for k in range(5):
            with ctx.task(total.reduce("sum")) as t:
                t.run(lambda xp, a, k=k: a.__iadd__(float(k)))
        np.testing.assert_array_equal(ctx.wait(total), np.full(4, 10.0))


def test_bodies_of_host_tasks_and_of_empty_data(cupy):
    X = np.arange(4.0)
    with stf.context(backend="cuda") as ctx:
        x, empty = ctx.logical_data(X), ctx.logical_data(np.zeros((0, 3)))
        with ctx.task(stf.exec_place.host(), x.rw(), empty.rw()) as t:
            t.run(lambda xp, a, e: (a.__iadd__(1.0), e.fill(2.0)))
        with ctx.task(x.rw(), empty.read()) as t:
            t.run(lambda xp, a, e: a.__imul__(float(e.size + 3)))
    np.testing.assert_array_equal(X, (np.arange(4.0) + 1.0) * 3.0)
