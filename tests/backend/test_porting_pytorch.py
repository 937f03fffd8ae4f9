"""The usage patterns of the reference's PyTorch programs (CCCL
``python/cuda_cccl/tests/stf``: ``examples/cg.py``, ``examples/bicgstab.py``,
``examples/burger.py``, ``test_while_cond.py``), ported by the import line alone:
``pytorch_task`` bodies inside ``while_loop`` / ``repeat`` / ``graph_scope`` of a
stackable context. On the emulated backend their PyTorch operations are recorded and
replayed each time the graph runs (``stflow.interop._torch_capture``), as CUDA graph
capture does on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow.errors import ScopeError

torch = pytest.importorskip("torch")
from stflow.interop.pytorch import pytorch_task, tensor_arg  # noqa: E402


@pytest.fixture
def torch_backend(backend):
    """A backend PyTorch can compute on: emulated always, CUDA with a CUDA build."""
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    return backend


def _dot(ctx, la, lb, lres):
    with pytorch_task(ctx, la.read(), lb.read(), lres.write()) as (ta, tb, tres):
        tres.copy_(torch.dot(ta, tb).unsqueeze(0))


def _matvec(ctx, la, lx, ly):
    with pytorch_task(ctx, la.read(), lx.read(), ly.write()) as (ta, tx, ty):
        ty[:] = torch.mv(ta, tx)


def _tridiagonal(n, seed, symmetric):
    rng = np.random.default_rng(seed)
    a = np.diag(2.5 + rng.random(n))
    lower = rng.uniform(-0.5, 0.5, n - 1)
    a[np.arange(1, n), np.arange(n - 1)] = lower
    a[np.arange(n - 1), np.arange(1, n)] = (
        lower if symmetric else rng.uniform(-0.5, 0.5, n - 1)
    )
    return a


def test_cg_in_a_while_loop_as_the_reference_writes_it(torch_backend):
    n = 48
    a_host, b_host, x_host = _tridiagonal(n, 42, True), np.ones(n), np.zeros(n)
    ctx = stf.stackable_context(backend=torch_backend)
    la, lb, lx = (ctx.logical_data(v) for v in (a_host, b_host, x_host))
    la.set_read_only()
    lb.set_read_only()
    lr = ctx.logical_data_empty((n,), np.float64, name="R")
    lp = ctx.logical_data_empty((n,), np.float64, name="P")
    lrsold = ctx.logical_data_empty((1,), np.float64, name="rsold")
    with pytorch_task(ctx, lx.write()) as (tx,):
        tx.zero_()
    with pytorch_task(ctx, lr.write(), lb.read()) as (tr, tb):
        tr[:] = tb
    with pytorch_task(ctx, lp.write(), lr.read()) as (tp, tr):
        tp[:] = tr
    _dot(ctx, lr, lr, lrsold)
    count_host = np.zeros(1)
    iterations = ctx.logical_data(count_host)
    with ctx.while_loop() as loop:
        lap = ctx.logical_data_empty((n,), np.float64, name="Ap")
        lpap = ctx.logical_data_empty((1,), np.float64, name="pAp")
        lrsnew = ctx.logical_data_empty((1,), np.float64, name="rsnew")
        _matvec(ctx, la, lp, lap)
        _dot(ctx, lp, lap, lpap)
        with pytorch_task(ctx, lx.rw(), lrsold.read(), lpap.read(), lp.read()) as (
            tx,
            trs,
            tpap,
            tp,
        ):
            tx += trs.squeeze() / tpap.squeeze() * tp
        with pytorch_task(ctx, lr.rw(), lrsold.read(), lpap.read(), lap.read()) as (
            tr,
            trs,
            tpap,
            tap,
        ):
            tr -= trs.squeeze() / tpap.squeeze() * tap
        _dot(ctx, lr, lr, lrsnew)
        loop.continue_while(lrsnew, ">", 1e-20)
        with pytorch_task(ctx, lp.rw(), lr.read(), lrsnew.read(), lrsold.read()) as (
            tp,
            tr,
            trsnew,
            trsold,
        ):
            tp[:] = tr + trsnew.squeeze() / trsold.squeeze() * tp
        with pytorch_task(ctx, lrsold.write(), lrsnew.read()) as (trsold, trsnew):
            trsold.copy_(trsnew)
        with pytorch_task(ctx, iterations.rw()) as (count,):
            count += 1
    ctx.finalize()
    np.testing.assert_allclose(x_host, np.linalg.solve(a_host, b_host), atol=1e-9)
    assert 3 < count_host[0] <= n + 5  # the body ran once per iteration, not once


def test_bicgstab_with_a_compound_condition(torch_backend):
    n, maxiter = 40, 200
    a_host, b_host, x_host = _tridiagonal(n, 1234, False), np.ones(n), np.zeros(n)
    ctx = stf.stackable_context(backend=torch_backend)
    la, lb, lx = (ctx.logical_data(v) for v in (a_host, b_host, x_host))
    names = ("R", "Rhat", "P", "V", "S", "T")
    lr, lrhat, lp, lv, ls, lt = (
        ctx.logical_data_empty((n,), np.float64, name=k) for k in names
    )
    lrho, lrho_prev, lalpha, lomega, ltmp, liter, lcond = (
        ctx.logical_data_empty((1,), np.float64) for _ in range(7)
    )
    with pytorch_task(ctx, lx.write(), lr.write(), lb.read()) as (tx, tr, tb):
        tx.zero_()
        tr[:] = tb
    with pytorch_task(ctx, lrhat.write(), lr.read()) as (trhat, tr):
        trhat[:] = tr
    with pytorch_task(ctx, lp.write(), lv.write()) as (tp, tv):
        tp.zero_()
        tv.zero_()
    with pytorch_task(
        ctx, lrho_prev.write(), lalpha.write(), lomega.write(), liter.write()
    ) as (trp, talpha, tomega, titer):
        trp[:] = 1.0
        talpha[:] = 1.0
        tomega[:] = 1.0
        titer[:] = 0.0
    with ctx.while_loop() as loop:
        _dot(ctx, lrhat, lr, lrho)
        with pytorch_task(
            ctx,
            lp.rw(),
            lr.read(),
            lrho.read(),
            lrho_prev.read(),
            lalpha.read(),
            lomega.read(),
            lv.read(),
        ) as (tp, tr, trho, trp, talpha, tomega, tv):
            beta = (trho.squeeze() / trp.squeeze()) * (
                talpha.squeeze() / tomega.squeeze()
            )
            tp[:] = tr + beta * (tp - tomega.squeeze() * tv)
        _matvec(ctx, la, lp, lv)
        _dot(ctx, lrhat, lv, ltmp)
        with pytorch_task(ctx, lalpha.write(), lrho.read(), ltmp.read()) as (
            talpha,
            trho,
            ttmp,
        ):
            talpha[:] = trho.squeeze() / ttmp.squeeze()
        with pytorch_task(ctx, ls.write(), lr.read(), lalpha.read(), lv.read()) as (
            ts,
            tr,
            talpha,
            tv,
        ):
            ts[:] = tr - talpha.squeeze() * tv
        _matvec(ctx, la, ls, lt)
        _dot(ctx, lt, ls, lomega)
        _dot(ctx, lt, lt, ltmp)
        with pytorch_task(ctx, lomega.rw(), ltmp.read()) as (tomega, ttmp):
            tomega[:] = tomega.squeeze() / ttmp.squeeze()
        with pytorch_task(
            ctx, lx.rw(), lalpha.read(), lp.read(), lomega.read(), ls.read()
        ) as (tx, talpha, tp, tomega, ts):
            tx[:] = tx + talpha.squeeze() * tp + tomega.squeeze() * ts
        with pytorch_task(ctx, lr.rw(), ls.read(), lomega.read(), lt.read()) as (
            tr,
            ts,
            tomega,
            tt,
        ):
            tr[:] = ts - tomega.squeeze() * tt
        with pytorch_task(ctx, lrho_prev.write(), lrho.read()) as (trp, trho):
            trp.copy_(trho)
        _dot(ctx, lr, lr, ltmp)
        with pytorch_task(ctx, liter.rw(), lcond.write(), ltmp.read()) as (
            titer,
            tcond,
            tres,
        ):
            titer += 1.0
            tcond[:] = (
                ((tres.squeeze() > 1e-20) & (titer.squeeze() < maxiter))
                .to(tcond.dtype)
                .unsqueeze(0)
            )
        loop.continue_while(lcond, ">", 0.5)
    ctx.finalize()
    np.testing.assert_allclose(x_host, np.linalg.solve(a_host, b_host), atol=1e-8)


def test_burger_nesting_with_a_snapshot_buffer(torch_backend):
    """repeat > graph_scope > repeat > while_loop, snapshots taken by index_copy_ with
    an index read from device data (as burger.py)."""
    u, snapshots, counter = np.zeros(4), np.zeros((3, 4)), np.zeros(1, dtype=np.int64)
    ctx = stf.stackable_context(backend=torch_backend)
    lu, lsnap, lcount = (ctx.logical_data(v) for v in (u, snapshots, counter))
    with ctx.repeat(3):
        with ctx.graph_scope():
            with ctx.repeat(2):
                lk = ctx.logical_data_zeros((1,), np.float64)
                lcond = ctx.logical_data_empty((1,), np.float64)
                with ctx.while_loop() as loop:
                    with pytorch_task(ctx, lu.rw(), lk.rw(), lcond.write()) as (
                        tu,
                        tk,
                        tcond,
                    ):
                        tu += 1
                        tk += 1
                        tcond.copy_((tk < 3).to(torch.float64))
                    loop.continue_while(lcond, ">", 0.5)
            with pytorch_task(ctx, lu.read(), lsnap.rw(), lcount.rw()) as (
                tu,
                tsnap,
                tcount,
            ):
                tsnap.index_copy_(0, tcount[0:1].long(), tu.unsqueeze(0))
                tcount.add_(1)
    ctx.finalize()
    assert u.tolist() == [18.0] * 4  # 3 x 2 x 3 iterations
    assert snapshots[:, 0].tolist() == [6.0, 12.0, 18.0] and counter[0] == 3


def test_a_recorded_body_reads_and_writes_the_data_each_time_the_graph_runs():
    x = np.arange(4.0)
    with stf.stackable_context(backend="emulated") as ctx:
        lx = ctx.logical_data(x)
        weights = torch.full((4,), 2.0)  # made outside: read as it is
        with ctx.repeat(3):
            with pytorch_task(ctx, lx.rw()) as (tx,):
                tx.mul_(weights)
                tx[1:3] += torch.ones(2)  # a view, a tensor made inside
    assert x.tolist() == [0.0, 15.0, 23.0, 24.0]  # (x * 2, then [1:3] + 1) x 3


def test_an_operation_that_fails_on_zeros_is_still_recorded():
    spd = np.array([[4.0, 2.0], [2.0, 3.0]])
    out = np.zeros((2, 2))
    with stf.stackable_context(backend="emulated") as ctx:
        la, lo = ctx.logical_data(spd), ctx.logical_data(out)
        with ctx.graph_scope():
            with pytorch_task(ctx, la.read(), lo.write()) as (ta, to):
                to.copy_(torch.linalg.cholesky(ta))  # zeros are not SPD
    np.testing.assert_allclose(out, np.linalg.cholesky(spd))


@pytest.mark.parametrize(
    "read",
    [lambda t: t.item(), lambda t: float(t[0]), lambda t: bool(t[0] > 0)],
    ids=["item", "float", "bool"],
)
def test_reading_a_value_on_the_host_while_recording_is_refused(read):
    ctx = stf.stackable_context(backend="emulated")
    lx = ctx.logical_data(np.ones(1))
    with pytest.raises(ScopeError, match="reads a tensor's value on the host"):
        with ctx.graph_scope():
            with pytorch_task(ctx, lx.rw(), symbol="peek") as (tx,):
                read(tx)
    ctx.finalize()


def test_writing_a_tensor_made_outside_the_body_while_recording_is_refused():
    outside = torch.zeros(2)
    ctx = stf.stackable_context(backend="emulated")
    lx = ctx.logical_data(np.ones(2))
    with pytest.raises(ScopeError, match="made outside the body"):
        with ctx.graph_scope():
            with pytorch_task(ctx, lx.read()) as (tx,):
                outside.add_(tx)
    ctx.finalize()
    assert outside.tolist() == [0.0, 0.0]


def test_a_failed_body_records_nothing():
    x = np.ones(2)
    ctx = stf.stackable_context(backend="emulated")
    lx = ctx.logical_data(x)
    with pytest.raises(KeyError):
        with ctx.graph_scope():
            with pytorch_task(ctx, lx.rw()) as (tx,):
                tx.add_(5)
                raise KeyError("stop")
    ctx.finalize()
    assert x.tolist() == [1.0, 1.0]


def test_tensor_arg_in_a_recorded_task_names_pytorch_task():
    ctx = stf.stackable_context(backend="emulated")
    lx = ctx.logical_data(np.ones(2))
    with pytest.raises(ScopeError, match="with pytorch_task"):
        with ctx.graph_scope():
            with ctx.task(lx.rw()) as t:
                tensor_arg(t, 0)
    ctx.finalize()


def test_a_replay_that_fails_names_its_task():
    ctx = stf.stackable_context(backend="emulated")
    lx = ctx.logical_data(np.zeros(2))
    lindex = ctx.logical_data(np.array([5]))  # out of range when it runs
    with ctx.graph_scope():
        with pytorch_task(ctx, lx.rw(), lindex.read(), symbol="scatter") as (tx, ti):
            tx.index_fill_(0, ti, 1.0)
    with pytest.raises((IndexError, RuntimeError)) as caught:
        ctx.finalize()
    assert "task 'scatter'" in "\n".join(caught.value.__notes__)


def test_stream_mode_bodies_still_run_at_once():
    x = np.ones(3)
    with stf.context(backend="emulated") as ctx:
        lx = ctx.logical_data(x)
        with pytorch_task(ctx, lx.rw()) as (tx,):
            tx.mul_(3)
            assert tx.sum().item() == 9.0  # host reads are fine here
    assert x.tolist() == [3.0] * 3
