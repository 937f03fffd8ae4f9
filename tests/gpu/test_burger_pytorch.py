"""The reference's Burger nesting on CUDA with PyTorch bodies (PARITY.md section 5:
``repeat > graph_scope > repeat > while_loop > pytorch_task`` once failed adding graph
edges with ``CUDA_ERROR_INVALID_VALUE``)."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf


def test_burger_nesting_with_pytorch_bodies():
    torch = pytest.importorskip("torch")
    from stflow.interop.pytorch import pytorch_task

    U_host = np.zeros(64)
    with stf.stackable_context(backend="cuda") as sctx:
        U = sctx.logical_data(U_host, name="U")
        A = sctx.logical_data_empty((64,), np.float64, name="A")
        with sctx.repeat(2):
            with sctx.graph_scope():
                with sctx.repeat(2):
                    newton = sctx.logical_data_full((1,), 2, dtype=np.int64)
                    with sctx.while_loop() as loop:
                        with pytorch_task(sctx, A.write(), U.read()) as (a, u):
                            a.copy_(u * 0.0 + 1.0)
                        with pytorch_task(sctx, U.rw(), A.read()) as (u, a):
                            u.add_(a)
                        with pytorch_task(sctx, newton.rw()) as (n,):
                            n.sub_(1)
                        loop.continue_while(newton > 0)
    assert torch.cuda.is_available()
    np.testing.assert_array_equal(U_host, np.full(64, 2 * 2 * 2.0))
