"""Bundles (issue 25): several logical data as one dependency and one argument."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

import stflow as stf
from stflow.errors import AccessModeError, ContextFinalizedError, ContextMismatchError

NONE, READ, RW, WRITE = (
    stf.AccessMode.NONE,
    stf.AccessMode.READ,
    stf.AccessMode.RW,
    stf.AccessMode.WRITE,
)


@pytest.fixture
def ctx():
    context = stf.context(backend="emulated")
    yield context
    context.finalize()


def _data(ctx):
    return (
        ctx.logical_data(np.arange(4.0), name="vals"),
        ctx.logical_data(np.arange(4, dtype=np.int64), name="idx"),
        ctx.logical_data(np.zeros(4), name="out"),
    )


def test_modes_clamp_constant_fields_and_dep_defaults_to_read(ctx):
    vals, idx, _ = _data(ctx)
    b = ctx.bundle(vals=vals, idx=stf.constant(idx))
    assert b.vals is vals and len(b) == 2 and b.names == ("vals", "idx")
    assert b.read().modes == {"vals": READ, "idx": READ}
    assert b.rw().modes == {"vals": RW, "idx": READ}
    assert b.write().modes == {"vals": WRITE, "idx": READ}
    assert b.dep(vals=RW).modes == {"vals": RW, "idx": READ}
    left_out = b.dep(vals=RW, idx=NONE)
    assert left_out.modes == {"vals": RW} and left_out.acquired == (True, False)


def test_one_slot_per_bundle_and_named_tuple_views(ctx):
    vals, idx, out = _data(ctx)
    b = ctx.bundle(vals=vals, idx=stf.constant(idx))
    with ctx.task(out.rw(), b.dep(idx=NONE)) as t:
        view = t.get(1)
        assert view._fields == ("vals", "idx") and view.idx is None
        assert len(t.views()) == 2 and t.views()[1] == view
        assert t.get_arg_cai(1) == view
        np.asarray(t.get(0))[:] = 2 * np.asarray(view.vals)
    np.testing.assert_array_equal(ctx.wait(out), [0, 2, 4, 6])


def test_run_host_launch_and_cuda_kernel_receive_the_fields(ctx):
    vals, idx, out = _data(ctx)
    b = ctx.bundle(vals=vals, idx=stf.constant(idx))
    with ctx.task(b.read(), out.rw()) as t:
        t.run(lambda xp, a, o: o.__iadd__(a.vals * a.idx))  # 0 1 4 9
    seen: list[Any] = []
    ctx.host_launch(
        b.read(), out.read(), fn=lambda a, o: seen.append((a.vals.copy(), o.copy()))
    )
    with ctx.cuda_kernel(b.read(), out.rw()) as k:  # fields in order
        k.launch(lambda v, i, o: o.__iadd__(v + i), 1, 1, (k.get_arg(0), k.get_arg(1)))
    np.testing.assert_array_equal(ctx.wait(out), [0, 3, 8, 15])
    ctx.fence()
    np.testing.assert_array_equal(seen[0][1], [0, 1, 4, 9])


def test_graph_mode_and_stackable_scopes():
    for use_graph in (False, True):
        with stf.context(backend="emulated", use_graph=use_graph) as ctx:
            vals, idx, out = _data(ctx)
            b = ctx.bundle(vals=vals, idx=stf.constant(idx))
            for _ in range(3):
                with ctx.task(b.rw(), out.rw()) as t:
                    t.run(lambda xp, a, o: (a.vals.__iadd__(1), o.__iadd__(a.vals)))
            np.testing.assert_array_equal(ctx.wait(out), [6, 9, 12, 15])
    sctx = stf.stackable_context(backend="emulated")
    x = sctx.logical_data(np.ones(3))
    result = np.zeros(3)
    y = sctx.logical_data(result)
    b = sctx.bundle(x=stf.constant(x), y=y)
    with sctx.graph_scope():
        with sctx.task(b.rw()) as t:
            t.run(lambda xp, a: a.y.__iadd__(a.x))
    with sctx.repeat(2):
        with sctx.task(b.rw()) as t:
            t.run(lambda xp, a: a.y.__iadd__(a.x))
    sctx.finalize()
    np.testing.assert_array_equal(result, [3, 3, 3])


def test_reduce_field(ctx):
    vals, _, _ = _data(ctx)
    acc = ctx.logical_data(np.zeros(4), name="acc")
    b = ctx.bundle(acc=acc, vals=stf.constant(vals))
    for _ in range(2):
        with ctx.task(b.dep(acc=stf.AccessMode.REDUCE)) as t:
            t.run(lambda xp, a: a.acc.__iadd__(a.vals))
    np.testing.assert_array_equal(ctx.wait(acc), [0, 2, 4, 6])


def test_typed_view():
    class CSR(NamedTuple):
        vals: Any
        idx: Any

    with stf.context(backend="emulated") as ctx:
        vals, idx, _ = _data(ctx)
        b = ctx.bundle(CSR, vals=vals, idx=idx)
        assert b.view_type is CSR
        with ctx.task(b.read()) as t:
            assert isinstance(t.get(0), CSR)
        with pytest.raises(ValueError, match="same names in the same order"):
            ctx.bundle(CSR, idx=idx, vals=vals)


def test_constant_field_refuses_more_than_read(ctx):
    vals, idx, _ = _data(ctx)
    b = ctx.bundle(vals=vals, idx=stf.constant(idx))
    with pytest.raises(ValueError, match="field 'idx' is constant"):
        b.dep(idx=RW)


def test_unknown_field_name(ctx):
    vals, idx, _ = _data(ctx)
    b = ctx.bundle(vals=vals, idx=idx)
    with pytest.raises(
        KeyError, match="no field 'nope'; the fields are vals, idx"
    ) as info:
        b.dep(nope=READ)
    assert isinstance(info.value, stf.errors.BundleFieldError)


def test_field_of_another_context(ctx):
    other = stf.context(backend="emulated")
    foreign = other.logical_data(np.zeros(2), name="foreign")
    with pytest.raises(ContextMismatchError, match="field 'x'.*different context"):
        ctx.bundle(x=foreign)
    other.finalize()
    with pytest.raises(TypeError, match="register arrays first"):
        ctx.bundle(x=np.zeros(2))


def test_same_data_twice_in_one_bundle(ctx):
    vals, _, _ = _data(ctx)
    with pytest.raises(AccessModeError, match="fields 'a' and 'b' are the same"):
        ctx.bundle(a=vals, b=stf.constant(vals))


def test_field_beside_its_bundle(ctx):
    vals, idx, _ = _data(ctx)
    b = ctx.bundle(vals=vals, idx=idx)
    with ctx.task(b.read(), vals.rw()) as t:  # reads and writes merge
        assert t.get(1) is not None
    with pytest.raises(
        AccessModeError,
        match=r"field 'vals' \(reduce\(sum\)\).*"
        r"dependency dep\(.*'rw'",
    ):
        ctx.task(b.dep(vals=stf.AccessMode.REDUCE), vals.rw())
    t = ctx.task(vals.rw())
    with pytest.raises(AccessModeError, match="field 'vals'"):
        t.add_dep(b.dep(vals=stf.AccessMode.REDUCE))
    t.add_dep(b.read())  # the bundle is argument 1
    with t:
        assert t.get(1)._fields == ("vals", "idx") and len(t.views()) == 2


def test_bundle_after_finalize():
    ctx = stf.context(backend="emulated")
    vals, idx, _ = _data(ctx)
    b = ctx.bundle(vals=vals, idx=idx)
    ctx.finalize()
    with pytest.raises(ContextFinalizedError, match="bundle's context is finalized"):
        b.read()
