"""The tiled Cholesky example (examples/cholesky.py) matches NumPy on every backend."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.examples import load_example


def _example():
    return load_example("cholesky")


@pytest.mark.parametrize("n, nb", [(256, 64), (192, 96), (64, 64)])
def test_the_tiled_factor_matches_numpy(backend, n, nb):
    example = _example()
    a = example.spd_matrix(n, seed=n)
    lower, _ = example.cholesky(a, nb, backend)
    np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)


def test_graph_mode_on_the_emulated_backend():
    example = _example()
    a = example.spd_matrix(256)
    lower, _ = example.cholesky(a, 64, "emulated", use_graph=True)
    np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)


def test_a_size_that_is_not_a_multiple_of_the_tile_gets_smaller_last_tiles():
    example = _example()
    a = example.spd_matrix(100)
    lower, _ = example.cholesky(a, 64, "emulated")
    np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="square"):
        example.cholesky(np.ones((4, 5)), 2, "emulated")


def test_the_script_says_pass():
    assert _example().main(["--backend", "emulated", "--n", "256", "--nb", "64"]) == 0
