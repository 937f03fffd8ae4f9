"""The Burgers example (examples/burgers.py): repeat > graph_scope > repeat > Newton
while_loop > BiCGSTAB while_loop matches a NumPy run of the same scheme on every
backend."""

from __future__ import annotations

import numpy as np
from helpers.examples import load_example


def _example():
    return load_example("burgers")


def test_the_implicit_steps_match_numpy(backend):
    example = _example()
    U, snaps, counts = example.run(n=48, outer=3, substeps=4, nu=0.02, backend=backend)
    U_ref, snaps_ref = example.reference(n=48, outer=3, substeps=4, nu=0.02)
    np.testing.assert_allclose(snaps, snaps_ref, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(U, snaps[-1])
    assert U[0] == 0.0 and U[-1] == 0.0
    # The solution dissipates, one snapshot per outer iteration.
    maxima = snaps.max(axis=1)
    assert np.all(np.diff(maxima) < 0) and maxima[0] < 1.0
    newton, linear = counts
    assert 12 <= newton <= 12 * 20 and newton < linear


def test_the_iteration_caps_stop_the_loops(backend):
    example = _example()
    # One Newton iteration per step, one BiCGSTAB iteration per Newton iteration.
    _, _, counts = example.run(
        n=32, outer=2, substeps=3, backend=backend, max_newton=1, max_linear=1
    )
    np.testing.assert_array_equal(counts, [6, 6])
    # One Newton iteration per step, converged linear solves: NumPy's one-step Newton.
    _, snaps, counts = example.run(
        n=32, outer=2, substeps=3, backend=backend, max_newton=1
    )
    assert counts[0] == 6
    _, snaps_ref = example.reference(n=32, outer=2, substeps=3, max_newton=1)
    np.testing.assert_allclose(snaps, snaps_ref, rtol=0, atol=1e-8)


def test_the_script_says_pass(capsys):
    assert (
        _example().main(
            ["--backend", "emulated", "--n", "32", "--outer", "2", "--substeps", "3"]
        )
        == 0
    )
    assert "PASS" in capsys.readouterr().out
