"""examples/cholesky_distributed.py on the test's ranks: the factor, gathered on rank 0,
matches NumPy, and every rank returns the verdict."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example


@pytest.mark.parametrize("n, nb", [(200, 48), (256, 64)])
def test_the_block_cyclic_factor_matches_numpy(comm, n, nb):
    example = load_example("cholesky_distributed")
    a = example.cholesky_example.spd_matrix(n, seed=n)
    lower, _, counts = example.cholesky_distributed(comm, a, nb, "emulated")
    count = -(-n // nb)
    assert sum(counts) == sum(
        1 + (count - k - 1) * 2 + (count - k - 1) * (count - k - 2) // 2
        for k in range(count)
    )  # every task once
    if comm.Get_rank() == 0:
        np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
    else:
        assert lower is None


def test_the_script_returns_the_verdict_on_every_rank(comm, capsys):
    example = load_example("cholesky_distributed")
    assert (
        example.main(["--backend", "emulated", "--n", "160", "--nb", "64"], comm=comm)
        == 0
    )
    out = capsys.readouterr().out
    assert ("PASS" in out) == (comm.Get_rank() == 0)


def test_runs_prints_the_slowest_ranks_first_and_best_times(comm, capsys):
    example = load_example("cholesky_distributed")
    assert (
        example.main(
            ["--backend", "emulated", "--n", "128", "--nb", "64", "--runs", "2"],
            comm=comm,
        )
        == 0
    )
    out = capsys.readouterr().out
    assert ("first run " in out and ", best of 1 more " in out) == (comm.Get_rank() == 0)
