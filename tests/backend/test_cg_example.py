"""The conjugate-gradient example (examples/cg_while_loop.py) converges on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example


def _example():
    return load_example("cg_while_loop")


def test_cg_in_a_while_loop_matches_numpy(backend):
    rng = np.random.default_rng(3)
    M = rng.standard_normal((96, 96))
    A = M @ M.T / 96 + np.eye(96)
    b = rng.standard_normal(96)
    x, iterations, residual = _example().solve(A, b, 1e-10, 500, backend)
    assert 1 < iterations < 500 and residual <= 1e-10
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-7, atol=1e-9)


def test_the_iteration_cap_stops_the_loop(backend):
    rng = np.random.default_rng(4)
    M = rng.standard_normal((64, 64))
    A = M @ M.T / 64 + np.eye(64)
    _, iterations, _ = _example().solve(A, rng.standard_normal(64), 0.0, 7, backend)
    assert iterations == 7


# examples/cg.py: the stream-mode form, the host reading the residual with ctx.wait.


def _stream_example():
    return load_example("cg")


@pytest.mark.parametrize("use_graph", [False, True], ids=["streams", "graph"])
def test_cg_in_stream_mode_matches_numpy(backend, use_graph):
    example = _stream_example()
    A, b = example.spd_system(96, seed=5)
    x, iterations, residual = example.solve(A, b, 1e-10, 500, 8, backend, use_graph)
    assert 1 < iterations < 500 and iterations % 8 == 0 and residual <= 1e-10
    np.testing.assert_allclose(A @ x, b, rtol=0, atol=1e-8)
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-7, atol=1e-7)


def test_stream_mode_stops_at_the_iteration_cap(backend):
    example = _stream_example()
    A, b = example.spd_system(64, seed=6)
    _, iterations, residual = example.solve(A, b, 0.0, 7, 5, backend)
    assert iterations == 7 and 0 < residual < 1


def test_iterations_after_convergence_keep_an_exact_answer():
    # A = I: the first iteration is exact and r = 0; the next nine divide 0 by 0.
    example = _stream_example()
    b = np.arange(1.0, 9.0)
    x, iterations, residual = example.solve(np.eye(8), b, 1e-12, 50, 10, "emulated")
    assert iterations == 10 and residual == 0.0
    np.testing.assert_array_equal(x, b)


def test_the_stream_script_says_pass():
    example = _stream_example()
    assert (
        example.main(["--backend", "emulated", "--n", "128", "--check-every", "5"]) == 0
    )
    assert example.main(["--backend", "emulated", "--n", "64", "--graph"]) == 0
    with pytest.raises(ValueError, match="check_every"):
        example.solve(np.eye(2), np.ones(2), check_every=0, backend="emulated")
