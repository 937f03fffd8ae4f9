"""The tiled POTRI example (examples/potri.py) matches numpy.linalg.inv on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example

import stflow as stf


def _example():
    return load_example("potri")


def _spd(n, seed):
    """SPD and far from diagonal: every tile of the inverse matters."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n))
    return m @ m.T / n + 0.5 * np.eye(n)


@pytest.mark.parametrize("n, nb", [(192, 48), (100, 32), (64, 64)])
def test_the_tiled_inverse_matches_numpy(backend, n, nb):
    a = _spd(n, seed=n)
    inverse, _ = _example().potri(a, nb, backend)
    expected = np.linalg.inv(a)
    np.testing.assert_allclose(
        inverse, expected, rtol=0, atol=1e-11 * np.abs(expected).max()
    )
    np.testing.assert_array_equal(inverse, inverse.T)


def test_graph_mode_on_the_emulated_backend():
    example = _example()
    a = example.spd_matrix(160)
    inverse, _ = example.potri(a, 40, "emulated", use_graph=True)
    np.testing.assert_allclose(inverse @ a, np.eye(160), rtol=0, atol=1e-12)


def test_each_stage_alone(backend):
    # TRTRI gives the inverse of the lower factor, LAUUM the product Lᵀ L.
    example = _example()
    n, nb = 90, 32
    count = -(-n // nb)
    lower = np.linalg.cholesky(_spd(n, seed=1))
    for stage, expected in (
        (example.trtri, np.linalg.inv(lower)),
        (example.lauum, lower.T @ lower),
    ):
        result = lower.copy()
        with stf.context(backend=backend) as ctx:
            grid = stf.tiles(ctx, result, nb, name="L")
            stage(
                ctx,
                {(i, j): grid[i, j] for i in range(count) for j in range(i + 1)},
                count,
            )
        np.testing.assert_allclose(
            np.tril(result),
            np.tril(expected),
            rtol=0,
            atol=1e-12 * np.abs(expected).max(),
        )


def test_bad_arguments_are_refused():
    example = _example()
    with pytest.raises(ValueError, match="square"):
        example.potri(np.ones((4, 5)), 2, "emulated")
    with pytest.raises(ValueError, match="tile size"):
        example.potri(np.eye(4), 0, "emulated")


def test_the_script_says_pass():
    example = _example()
    assert example.main(["--backend", "emulated", "--n", "200", "--nb", "64"]) == 0
    assert (
        example.main(["--backend", "emulated", "--n", "128", "--nb", "32", "--graph"])
        == 0
    )
