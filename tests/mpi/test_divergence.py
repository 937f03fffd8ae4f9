"""Ranks whose programs diverge get a DivergentProgramError naming each rank's call,
not a hang: at wait()/fence()/finalize() always, at the first differing call with
STFLOW_DISTRIBUTED_CHECK=1 (stflow._dist.collective)."""

from __future__ import annotations

import numpy as np
import pytest

import stflow as stf
from stflow.errors import DivergentProgramError
from stflow.testing import check_distributed_program


def _abandon(ctx):
    """End a context whose ranks disagree (its finalize() would check again)."""
    ctx._finalized = True
    ctx.local.finalize()


@pytest.fixture
def two_or_more(comm):
    if comm.Get_size() < 2:
        pytest.skip("needs two ranks")
    return comm


def test_a_rank_skipping_a_task_is_named_at_the_next_fence(
    two_or_more, backend, monkeypatch
):
    comm = two_or_more
    monkeypatch.delenv("STFLOW_DISTRIBUTED_CHECK", raising=False)
    last = comm.Get_size() - 1
    ctx = stf.distributed_context(comm, backend=backend)
    x = ctx.logical_data(np.zeros(4), owner=0)
    if comm.Get_rank() != last:  # the last rank skips a task of rank 0
        with ctx.task(x.rw()) as t:
            t.run(lambda xp, a: a.__iadd__(1))
    with pytest.raises(DivergentProgramError) as caught:
        ctx.fence()
    message = str(caught.value)
    assert "rank 0: fence(), after 2 collective call(s)" in message
    assert f"rank {last}: fence(), after 1 collective call(s)" in message
    assert "STFLOW_DISTRIBUTED_CHECK=1" in message  # how to find the call
    _abandon(ctx)


def test_ranks_ending_at_different_calls_are_named(two_or_more, backend, monkeypatch):
    comm = two_or_more
    monkeypatch.delenv("STFLOW_DISTRIBUTED_CHECK", raising=False)
    ctx = stf.distributed_context(comm, backend=backend)
    x = ctx.logical_data(np.zeros(4), owner=0)
    with pytest.raises(DivergentProgramError) as caught:
        if comm.Get_rank() == 0:
            ctx.wait(x)
        else:
            ctx.finalize()
    message = str(caught.value)
    assert "rank 0: wait(d0), after 1 collective call(s)" in message
    assert "rank 1: finalize(), after 1 collective call(s)" in message
    _abandon(ctx)


def test_with_the_check_each_call_the_first_difference_raises(
    two_or_more, backend, monkeypatch
):
    comm = two_or_more
    monkeypatch.setenv("STFLOW_DISTRIBUTED_CHECK", "1")
    rank = comm.Get_rank()
    ctx = stf.distributed_context(comm, backend=backend)
    x = ctx.logical_data(np.zeros(4), owner=0, name="x")
    y = ctx.logical_data(np.zeros(4), owner=1, name="y")
    with ctx.task(x.rw(), y.read()) as t:  # the same everywhere: y goes to rank 0
        t.run(lambda xp, a, b: a.__iadd__(b))
    with pytest.raises(DivergentProgramError) as caught:
        # rank 1 reads x where the others write it: caught before any message
        ctx.task(y.rw(), x.read() if rank == 1 else x.rw(), rank=1).__enter__()
    message = str(caught.value)
    assert "rank 0: a task executing on rank 1 (rw y, rw x), after 3" in message
    assert "rank 1: a task executing on rank 1 (rw y, read x), after 3" in message
    assert "STFLOW_DISTRIBUTED_CHECK=1" not in message  # already on
    _abandon(ctx)


def test_with_the_check_each_call_data_of_another_shape_raises(
    two_or_more, backend, monkeypatch
):
    comm = two_or_more
    monkeypatch.setenv("STFLOW_DISTRIBUTED_CHECK", "1")
    ctx = stf.distributed_context(comm, backend=backend)
    with pytest.raises(DivergentProgramError, match=r"created data d0 \(4,\) <f8"):
        ctx.logical_data(np.zeros(4 + comm.Get_rank()), owner=0)
    assert not ctx._data  # nothing was created
    _abandon(ctx)


@pytest.mark.parametrize("reductions", [False, True])
def test_the_check_each_call_passes_correct_programs(
    comm, backend, monkeypatch, reductions
):
    """No false alarm: random programs (data, tasks on every rank, reductions,
    waits) with every call compared."""
    monkeypatch.setenv("STFLOW_DISTRIBUTED_CHECK", "1")
    for seed in range(20):
        check_distributed_program(seed, comm, backend, reductions=reductions)


def test_a_bad_setting_names_the_variable(comm, monkeypatch):
    monkeypatch.setenv("STFLOW_DISTRIBUTED_CHECK", "yes")
    with pytest.raises(ValueError, match="STFLOW_DISTRIBUTED_CHECK must be 1"):
        stf.distributed_context(comm, backend="emulated")
