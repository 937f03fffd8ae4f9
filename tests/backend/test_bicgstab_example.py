"""The BiCGSTAB example (examples/bicgstab.py) solves a non-symmetric system on every
backend."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example


def _example():
    return load_example("bicgstab")


@pytest.mark.parametrize("stream", [False, True], ids=["while_loop", "stream"])
def test_bicgstab_matches_numpy(backend, stream):
    example = _example()
    A, b = example.nonsymmetric_system(96, seed=2)
    assert not np.allclose(A, A.T)
    x, iterations, residual = example.solve(A, b, 1e-10, 400, backend, stream, 4)
    assert 1 < iterations < 400 and residual <= 1e-10
    if stream:
        assert iterations % 4 == 0
    np.testing.assert_allclose(A @ x, b, rtol=0, atol=1e-8)
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("stream", [False, True], ids=["while_loop", "stream"])
def test_the_iteration_cap_stops_the_solver(backend, stream):
    example = _example()
    A, b = example.nonsymmetric_system(64, seed=3)
    _, iterations, residual = example.solve(A, b, 0.0, 6, backend, stream, 4)
    assert iterations == 6 and 0 < residual < 1


def test_both_forms_run_the_same_iterations():
    example = _example()
    A, b = example.nonsymmetric_system(80, seed=4)
    x_loop, n_loop, _ = example.solve(A, b, 1e-9, 300, "emulated")
    x_stream, n_stream, _ = example.solve(A, b, 1e-9, n_loop, "emulated", True, n_loop)
    assert n_stream == n_loop
    np.testing.assert_allclose(x_stream, x_loop, rtol=1e-12, atol=1e-14)


def test_iterations_after_convergence_keep_an_exact_answer():
    # A = 2 I: the first iteration is exact (s = 0, then t = 0, omega = 0/0 -> 0).
    example = _example()
    b = np.arange(1.0, 9.0)
    x, iterations, residual = example.solve(
        2 * np.eye(8), b, 1e-12, 50, "emulated", True, 5
    )
    assert iterations == 5 and residual == 0.0
    np.testing.assert_array_equal(x, b / 2)


def test_the_script_says_pass():
    example = _example()
    assert example.main(["--backend", "emulated", "--n", "128"]) == 0
    assert example.main(["--backend", "emulated", "--n", "128", "--stream"]) == 0
    with pytest.raises(ValueError, match="check_every"):
        example.solve(np.eye(2), np.ones(2), check_every=0, backend="emulated")
