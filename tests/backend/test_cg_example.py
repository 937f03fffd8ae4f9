"""The conjugate-gradient example (examples/cg_while_loop.py) converges on every backend."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "cg_while_loop.py"


def _example():
    spec = importlib.util.spec_from_file_location("cg_while_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
