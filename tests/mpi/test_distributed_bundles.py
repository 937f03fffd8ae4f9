"""Bundles over MPI ranks (issue 25): fields with different owners, one argument."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow.errors import ContextFinalizedError


def test_a_bundle_of_fields_owned_by_different_ranks(comm, backend):
    size, rank = comm.Get_size(), comm.Get_rank()
    arrays = [np.full(4, float(k + 1)) for k in range(size)]
    out = np.zeros(4)
    seen = []
    with stf.distributed_context(comm, backend=backend) as ctx:
        fields = {
            f"part{k}": stf.constant(ctx.logical_data(arrays[k], owner=k))
            for k in range(size)
        }
        token = ctx.token(owner=size - 1)
        b = ctx.bundle(**fields, order=token)
        y = ctx.logical_data(out, owner=0, name="y")
        for executing in range(size):
            with ctx.task(b.rw(), y.rw(), rank=executing) as t:
                # the parts come to the executing rank; the token is None there
                t.run(
                    lambda xp, parts, y: y.__iadd__(
                        sum(field for field in parts if field is not None)
                    )
                )
                if t.runs_here:
                    assert t.get(0).order is None and len(t.views()) == 2
        ctx.host_launch(
            b.read(),
            y.read(),
            fn=lambda parts, y: seen.append((parts._fields, y.copy())),
            rank=size - 1,
        )
        with pytest.raises(TypeError, match="must be data of this distributed"):
            ctx.bundle(x=np.zeros(2))
    total = size * sum(range(1, size + 1))
    if rank == 0:
        np.testing.assert_array_equal(out, np.full(4, float(total)))
    if rank == size - 1:
        assert seen[0][0] == (*fields, "order")
        np.testing.assert_array_equal(seen[0][1], np.full(4, float(total)))
    with pytest.raises(ContextFinalizedError, match="finalized"):
        b.read()
