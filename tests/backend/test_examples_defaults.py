"""Every script of ``examples/`` passes when run as the README says, with no argument.

The other example tests call the scripts' functions (``run``, ``solve``) or ``main``
with explicit arguments; a newcomer types ``python examples/<name>.py``, so
``main([])`` must work too: ``--backend auto`` (the default) hands the backend choice
to ``STFLOW_BACKEND`` (the test suite sets ``emulated``). The scripts' defaults are
small, so the whole file takes a few seconds. ``cholesky_distributed`` needs
``mpi4py`` and ranks: ``tests/mpi/test_cholesky_distributed_defaults.py`` runs its
``main([])`` under the MPI tests.
"""

from __future__ import annotations

import pytest
from helpers.examples import example_names, load_example

DISTRIBUTED = {"cholesky_distributed"}  # tests/mpi/test_cholesky_distributed_defaults.py
NAMES = [name for name in example_names() if name not in DISTRIBUTED]


def test_every_example_is_covered():
    assert len(NAMES) >= 12 and "halo_stencil" in NAMES and "jacobi" in NAMES
    assert DISTRIBUTED <= set(example_names())


@pytest.mark.parametrize("name", NAMES)
def test_the_example_passes_with_its_defaults(name, capsys):
    assert load_example(name).main([]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" not in out, out


@pytest.mark.parametrize("argv", [[], ["--backend", "auto"]], ids=["defaults", "auto"])
def test_the_halo_stencil_uses_every_device_of_the_default_backend(argv, capsys):
    from stflow.backends import default_backend

    devices = default_backend().device_count
    assert load_example("halo_stencil").main(argv) == 0
    out = capsys.readouterr().out
    assert f"in {devices} strip(s) over {devices} device(s)" in out, out
