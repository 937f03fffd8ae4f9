"""``python examples/cholesky_distributed.py`` with no argument (its small defaults,
``--backend auto``: ``STFLOW_BACKEND`` decides) passes on the test's ranks."""

from __future__ import annotations

from helpers.examples import load_example


def test_the_script_passes_with_its_defaults(comm, capsys):
    assert load_example("cholesky_distributed").main([], comm=comm) == 0
    out = capsys.readouterr().out
    assert ("PASS: n=512" in out) == (comm.Get_rank() == 0), out
