"""``python -m stflow.demo --distributed``: the demo's blocked CG over the ranks of
the test run (run with mpiexec, see conftest), checked on every rank."""

from __future__ import annotations

import pytest

from stflow import demo


@pytest.mark.parametrize("blocks, graph", [(None, False), (5, False), (5, True)])
def test_the_distributed_demo_passes_on_every_rank(comm, capsys, blocks, graph):
    argv = [
        "--distributed",
        "--backend",
        "emulated",
        "--size",
        "24",
        "--iterations",
        "40",
    ] + ([] if blocks is None else ["--blocks", str(blocks)])
    argv += ["--graph"] if graph else []
    assert demo.main(argv) == 0  # the same verdict on every rank
    printed = capsys.readouterr().out
    if comm.Get_rank() == 0:
        assert "-> PASS" in printed
        assert f"over {comm.Get_size()} MPI rank(s)" in printed
        assert "iteration   40" in printed  # the progress report, from rank 0
        assert ("graph mode" in printed) == graph
    else:
        assert printed == ""  # only rank 0 prints


def test_the_blocks_are_owned_block_wise_and_execute_on_their_owner(comm):
    import numpy as np

    from stflow._demos.distributed import solve_distributed

    size = comm.Get_size()
    b = demo.poisson_rhs(12)
    result = solve_distributed(comm, b, 10, backend="emulated", blocks=2 * size)
    np.testing.assert_allclose(result.x, demo.reference_cg(b, 10), rtol=0, atol=1e-12)
    counts = comm.allgather(result.executed)
    assert sum(counts) == result.tasks  # each task executed on one rank
    assert result.ranks_used == size
    if size > 1:
        assert all(count > 0 for count in counts)  # every rank owns blocks


def test_the_distributed_demo_in_graph_mode_matches_stream_mode(comm):
    """--graph with --distributed: every rank's local context records graphs."""
    import numpy as np

    from stflow._demos.distributed import solve_distributed

    b = demo.poisson_rhs(16)
    stream = solve_distributed(comm, b, 12, backend="emulated", blocks=3)
    graph = solve_distributed(
        comm,
        b,
        12,
        backend="emulated",
        blocks=3,
        graph=True,
        report_every=4,
        out=lambda line: None,
    )
    np.testing.assert_allclose(graph.x, stream.x, rtol=0, atol=1e-13)
    np.testing.assert_allclose(graph.x, demo.reference_cg(b, 12), rtol=0, atol=1e-12)
