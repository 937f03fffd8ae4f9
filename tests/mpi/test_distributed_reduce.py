"""Reductions across ranks: ``ld.reduce(op)`` in a distributed task accumulates into a
partial of the executing rank; the next other access (or ``wait``, ``finalize``)
combines the partials, in rank order, on the rank that needs the value.

The differential test here is the distributed one (``stflow.testing``'s
``check_distributed_program``) with the generator's accumulators: data only reduced
into (``sum``, ``prod``, ``min``, ``max``) and read, by tasks on random ranks; and
with accumulators that are 0-d, zero-size or never written (``edge_reductions``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import stflow as stf
from stflow.errors import AccessModeError
from stflow.testing import check_distributed_program

SEEDS = int(os.environ.get("STFLOW_DISTRIBUTED_SEEDS", "300"))


@pytest.mark.parametrize("first", range(0, SEEDS, 50))
def test_random_programs_with_reductions_match_the_oracle_on_every_rank(
    comm, backend, first
):
    failures = []
    for seed in range(first, min(first + 50, SEEDS)):
        try:
            check_distributed_program(seed, comm, backend, reductions=True)
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, "\n\n".join(failures[:2])


@pytest.mark.parametrize("first", range(0, SEEDS // 2, 50))
def test_random_programs_reducing_into_0d_empty_and_never_written_data(
    comm, backend, first
):
    """Accumulators of shape (), (0,), (3, 0), (0, 2) and ordinary ones, from user
    arrays, filled, or never written (starting from the identity, as locally), on
    top of programs with (odd seeds) and without the generator's accumulators."""
    failures = []
    for seed in range(first, min(first + 50, SEEDS // 2)):
        try:
            check_distributed_program(
                seed, comm, backend, reductions=seed % 2 == 1, edge_reductions=True
            )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, "\n\n".join(failures[:2])


def test_the_same_in_graph_mode(comm, backend):
    failures = []
    for seed in range(0, max(SEEDS // 6, 10)):
        try:
            check_distributed_program(
                seed,
                comm,
                backend,
                reductions=seed % 2 == 1,
                edge_reductions=True,
                use_graph=True,
            )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, "\n\n".join(failures[:2])


def test_every_rank_reduces_into_one_sum_combined_in_rank_order(comm):
    size, rank = comm.Get_size(), comm.Get_rank()
    total = np.full(3, 100.0)
    with stf.distributed_context(comm, backend="emulated") as ctx:
        acc = ctx.logical_data(total, owner=size - 1, name="acc")
        for step in range(3 * size):
            with ctx.task(acc.reduce("sum"), rank=step % size) as t:
                # The view holds the identity; what the task leaves there is added.
                t.run(lambda xp, view, step=step: view.__setitem__(Ellipsis, step))
        seen = ctx.wait(acc)  # combined, then on every rank
        with ctx.task(acc.reduce(np.maximum), rank=0) as t:  # another operation
            t.run(lambda xp, view: view.__setitem__(Ellipsis, 1e6))
    want = 100.0 + sum(range(3 * size))
    np.testing.assert_array_equal(seen, np.full(3, want))
    np.testing.assert_array_equal(
        total, np.full(3, 1e6) if rank == size - 1 else np.full(3, 100.0)
    )  # finalize: on the owner


def test_a_reduction_is_read_where_the_next_task_runs(comm):
    size = comm.Get_size()
    with stf.distributed_context(comm, backend="emulated") as ctx:
        acc = ctx.logical_data(np.ones(4), owner=0)
        out = ctx.logical_data(np.zeros(4), owner=size - 1)
        for r in range(size):
            with ctx.task(acc.reduce("prod"), rank=r) as t:
                t.run(lambda xp, view: view.__imul__(2.0))
        with ctx.task(out.write(), acc.read()) as t:  # on the owner of out
            t.run(lambda xp, o, a: o.__setitem__(Ellipsis, a + 1))
        np.testing.assert_array_equal(ctx.wait(out), np.full(4, 2.0**size + 1))


def test_reducing_and_accessing_the_same_data_is_refused_on_every_rank(comm):
    with stf.distributed_context(comm, backend="emulated") as ctx:
        acc = ctx.logical_data(np.zeros(2))
        with pytest.raises(AccessModeError, match="reduces into"):
            ctx.task(acc.reduce(), acc.read())
        with pytest.raises(TypeError, match="token"):
            ctx.token().reduce()
        with pytest.raises(ValueError, match="op must be one of"):
            acc.reduce("mean")
        with pytest.raises(TypeError, match="integer"):
            acc.reduce("bitwise_or")


def _reduce_from_every_rank(ctx, acc, op, ranks):
    """Each of ``ranks`` reduces ``r + 2`` into ``acc`` with ``op`` (locally:
    ``ranks`` tasks on the one process)."""
    for r in ranks:
        kwargs = {"rank": r} if isinstance(ctx, stf.distributed_context) else {}
        with ctx.task(acc.reduce(op), **kwargs) as t:
            t.run(lambda xp, view, r=r: view.__setitem__(Ellipsis, r + 2))


@pytest.mark.parametrize("shape", [(), (0,), (3, 0)])
@pytest.mark.parametrize("op", ["sum", "prod", "max"])
def test_reductions_into_0d_and_empty_data_give_what_a_local_context_gives(
    comm, shape, op
):
    size, rank = comm.Get_size(), comm.Get_rank()
    ranks = [*range(size), *range(size)]  # two partial updates per rank
    local_user = np.full(shape, 3.0)
    with stf.context(backend="emulated") as local:
        acc = local.logical_data(local_user)
        _reduce_from_every_rank(local, acc, op, ranks)
        local_seen = local.wait(acc)
        _reduce_from_every_rank(local, acc, "min", ranks)
    user = np.full(shape, 3.0)
    with stf.distributed_context(comm, backend="emulated") as ctx:
        acc = ctx.logical_data(user, owner=size - 1)
        _reduce_from_every_rank(ctx, acc, op, ranks)
        seen = ctx.wait(acc)
        _reduce_from_every_rank(ctx, acc, "min", ranks)  # combined at finalize
    assert seen.shape == shape
    np.testing.assert_array_equal(seen, local_seen)
    np.testing.assert_array_equal(
        user, local_user if rank == size - 1 else np.full(shape, 3.0)
    )


@pytest.mark.parametrize("shape", [(4,), (2, 3), (), (0,), (2, 0)])
@pytest.mark.parametrize(
    "op, dtype",
    [("sum", "f8"), ("prod", "f4"), ("min", "f8"), ("max", "i4"), ("bitwise_and", "i8")],
)
def test_a_never_written_data_reduced_into_starts_from_the_identity(
    comm, shape, op, dtype
):
    size = comm.Get_size()
    ranks = [*range(size), 0]
    operation = {
        "sum": np.add,
        "prod": np.multiply,
        "min": np.minimum,
        "max": np.maximum,
        "bitwise_and": np.bitwise_and,
    }[op]
    want = np.full(shape, operation.reduce(np.array([r + 2 for r in ranks], dtype)))
    if all(shape) and shape:  # a local context has such data too
        with stf.context(backend="emulated") as local:
            acc = local.logical_data_empty(shape, dtype)
            _reduce_from_every_rank(local, acc, op, ranks)
            np.testing.assert_array_equal(local.wait(acc), want)
    for combined_by in ("wait", "read", "another op"):
        expected = np.maximum(want, size + 1) if combined_by == "another op" else want
        with stf.distributed_context(comm, backend="emulated") as ctx:
            acc = ctx.logical_data_empty(shape, dtype, owner=size - 1)
            _reduce_from_every_rank(ctx, acc, op, ranks)
            if combined_by == "read":  # combined on rank 0, then sent
                out = ctx.logical_data(np.zeros(shape, dtype), owner=0)
                with ctx.task(out.write(), acc.read(), rank=0) as t:
                    t.run(lambda xp, o, a: o.__setitem__(Ellipsis, a))
                seen = ctx.wait(out)
            else:
                if combined_by == "another op":  # combined first, then folded into
                    _reduce_from_every_rank(ctx, acc, "max", [size - 1])
                seen = ctx.wait(acc)
            _reduce_from_every_rank(ctx, acc, op, [0])  # it has a value now
            twice = ctx.wait(acc)
        assert seen.dtype == np.dtype(dtype) and seen.shape == shape
        np.testing.assert_array_equal(seen, expected, err_msg=combined_by)
        np.testing.assert_array_equal(
            twice, operation(expected, np.asarray(2, dtype)), err_msg=combined_by
        )
