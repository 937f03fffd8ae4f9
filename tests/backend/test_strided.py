"""Strided logical data: views registered in place, written back into the view only."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow.errors import BufferOverlapError, ShapeError

SENTINEL = -7.25


def _parent(shape, dtype=np.float64):
    parent = np.full(shape, SENTINEL, dtype=dtype)
    return parent


def _double_on(ctx, ld, device):
    with ctx.task(stf.exec_place.device(device), ld.rw()) as t:
        t.run(lambda xp, a: xp.multiply(a, 2, out=a))


VIEWS = [
    pytest.param(lambda p: p[2:6, 1:4], (8, 7), id="tile"),
    pytest.param(lambda p: p[::2], (8, 7), id="every-other-row"),
    pytest.param(lambda p: p[1:, ::3], (8, 7), id="column-step"),
    pytest.param(lambda p: p.T[1:5], (8, 7), id="fortran-order"),
    pytest.param(lambda p: p[1:3, 2:5, 1:4], (4, 6, 5), id="3-d-block"),
    pytest.param(lambda p: p[1::3], (20,), id="1-d-step"),
    pytest.param(lambda p: p[:, 2], (8, 7), id="one-column"),
]


@pytest.mark.parametrize("make, shape", VIEWS)
def test_write_back_touches_the_view_only(backend, make, shape):
    parent = _parent(shape)
    view = make(parent)
    view[...] = np.arange(view.size, dtype=view.dtype).reshape(view.shape) + 1
    expected = parent.copy()
    make(expected)[...] *= 4
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(view, name="view")
        assert ld.shape == view.shape
        _double_on(ctx, ld, 0)
        with ctx.task(stf.exec_place.host(), ld.rw()) as t:  # the user's own memory
            t.run(lambda xp, a: xp.multiply(a, 2, out=a))
        np.testing.assert_array_equal(ctx.wait(ld), make(expected))
    np.testing.assert_array_equal(parent, expected)


def test_device_tasks_see_dense_copies_and_host_tasks_the_view():
    parent = np.arange(48.0).reshape(6, 8)
    view = parent[1:5, 2:7]
    seen = {}
    with stf.context(backend="emulated") as ctx:
        ld = ctx.logical_data(view)
        with ctx.task(stf.exec_place.device(1), ld.read()) as t:
            array = np.asarray(t.get_arg_cai(0))
            seen["device"] = (array.flags.c_contiguous, array.strides)
        ctx.host_launch(
            ld.read(),
            fn=lambda a: seen.__setitem__(
                "host", (a.strides, np.shares_memory(a, parent))
            ),
        )
    assert seen["device"] == (True, (40, 8))
    assert seen["host"] == (view.strides, True)


def test_views_of_one_parent_side_by_side_and_interleaved(backend):
    parent = _parent((6, 12))
    left, right = parent[:, :5], parent[:, 6:11]
    even, odd = parent[::2, 11], parent[1::2, 11]
    for k, view in enumerate((left, right, even, odd)):
        view[...] = k + 1
    with stf.context(backend=backend) as ctx:
        lds = [ctx.logical_data(v) for v in (left, right, even, odd)]
        for k, ld in enumerate(lds):
            _double_on(ctx, ld, k % ctx._runtime.device_count)
        with ctx.task(lds[0].rw(), lds[1].read()) as t:
            t.run(lambda xp, a, b: a.__iadd__(b))
    assert (parent[:, :5] == 2 + 4).all() and (parent[:, 6:11] == 4).all()
    assert (parent[::2, 11] == 6).all() and (parent[1::2, 11] == 8).all()
    assert (parent[:, 5] == SENTINEL).all()  # the gap column


def test_overlapping_strided_registrations_raise():
    A = np.zeros((8, 8))
    with stf.context(backend="emulated") as ctx:
        grid = stf.tiles(ctx, A, 4)  # kept: collected data retires
        with pytest.raises(
            BufferOverlapError,
            match="overlaps the buffer of logical data 'tile\\[0,0\\]'",
        ):
            stf.tiles(ctx, A, 2)  # a second grid over A
        with pytest.raises(BufferOverlapError):
            ctx.logical_data(A)  # the whole array
        with pytest.raises(BufferOverlapError):
            ctx.logical_data(A[3:5, 3:5])  # across four tiles
        assert len(grid) == 4
    B = np.zeros((6, 6))
    with stf.context(backend="emulated") as ctx:
        kept = [ctx.logical_data(B[::2]), ctx.logical_data(B[1::2])]  # disjoint: fine
        with pytest.raises(BufferOverlapError):
            ctx.logical_data(B[:, ::2])  # shares rows with both
        assert len(kept) == 2
    C = np.zeros((6, 6))
    C.setflags(write=False)
    with stf.context(backend="emulated") as ctx:  # read-only overlaps: harmless
        kept = [ctx.logical_data(C[:4]), ctx.logical_data(C[:, 1:3])]
        assert all(ld.readonly for ld in kept)


def test_bad_strides_name_the_stride():
    with stf.context(backend="emulated") as ctx:
        with pytest.raises(ShapeError, match=r"stride -8 of axis 1 .* negative"):
            ctx.logical_data(np.zeros((3, 4))[:, ::-1])
        with pytest.raises(ShapeError, match=r"stride 0 of axis 1 .* broadcast"):
            ctx.logical_data(np.broadcast_to(np.zeros((3, 1)), (3, 4)))
        overlapping = np.lib.stride_tricks.as_strided(np.zeros(20), (4, 4), (16, 8))
        with pytest.raises(ShapeError, match="share bytes"):
            ctx.logical_data(overlapping)


def test_reductions_into_strided_data(backend):
    parent = _parent((4, 10))
    view = parent[:, 2:8:2]
    view[...] = 1.0
    with stf.context(backend=backend) as ctx:
        ld = ctx.logical_data(view)
        for k in range(4):
            place = (
                stf.exec_place.host()
                if k == 3
                else stf.exec_place.device(k % ctx._runtime.device_count)
            )
            with ctx.task(place, ld.reduce("sum")) as t:
                t.run(lambda xp, a: a.__iadd__(2.0))
        with ctx.task(
            stf.exec_place.host(), ld.reduce("max", stf.data_place.host())
        ) as t:
            t.run(lambda xp, a: a.__setitem__(Ellipsis, 5.0))
    assert (view == 9.0).all()
    untouched = parent.copy()
    untouched[:, 2:8:2] = 0
    assert (untouched[untouched != 0] == SENTINEL).all()


def test_graph_mode_moves_strided_data(backend):
    parent = _parent((5, 9))
    view = parent[1:, 1::2]
    view[...] = 3.0
    with stf.context(backend=backend, use_graph=True) as ctx:
        ld = ctx.logical_data(view)
        for k in range(3):
            with ctx.task(
                stf.exec_place.device(k % ctx._runtime.device_count), ld.rw()
            ) as t:
                t.run(lambda xp, a: a.__iadd__(1.0))
    assert (view == 6.0).all()
    assert (parent[0] == SENTINEL).all() and (parent[:, ::2] == SENTINEL).all()


def test_read_guard_ignores_neighbours_written_meanwhile():
    """A read-only tile is fingerprinted by its own elements: a task writing the
    tile beside it (bytes between its rows) is no false "changed" report."""
    A = np.arange(64.0).reshape(8, 8)
    with stf.context(backend="emulated") as ctx:
        left, right = ctx.logical_data(A[:, :4]), ctx.logical_data(A[:, 4:])
        for _ in range(5):
            with ctx.task(stf.exec_place.host(), left.read()) as reader:
                with ctx.task(stf.exec_place.host(), right.rw()) as writer:
                    np.asarray(writer.get_arg_cai(0))[...] += 1
                np.asarray(reader.get_arg_cai(0)).sum()
    np.testing.assert_array_equal(A[:, 4:], np.arange(64.0).reshape(8, 8)[:, 4:] + 5)


def test_tiles_are_registered_in_place():
    A = np.arange(36.0).reshape(6, 6)
    shared = []
    with stf.context(backend="emulated") as ctx:
        grid = stf.tiles(ctx, A, (4, 4))
        for _, tile in grid:
            ctx.host_launch(
                tile.read(), fn=lambda a: shared.append(np.shares_memory(a, A))
            )
    assert shared == [True] * 4


def test_page_locking_covers_the_span_of_a_view_without_a_contiguous_owner():
    from stflow._engine.registry import _span_of

    fortran = np.asfortranarray(np.arange(20.0).reshape(4, 5))
    assert _span_of(fortran) is fortran  # contiguous: itself
    rows = fortran[1:3]  # strided, owner F-contiguous
    assert rows.base is fortran  # the owner is what is pinned
    owner = np.zeros(100)
    strided = np.lib.stride_tricks.as_strided(owner, (3, 4), (160, 16))
    span = _span_of(strided)
    assert span.dtype == np.uint8 and span.nbytes == 2 * 160 + 3 * 16 + 8
    assert span.__array_interface__["data"][0] == strided.__array_interface__["data"][0]
