"""The grid stencil example (examples/stencil_grid.py) matches NumPy on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example


def _example():
    return load_example("stencil_grid")


@pytest.mark.parametrize("places, steps", [(0, 20), (3, 7)])
def test_the_grid_stencil_matches_numpy(backend, places, steps):
    example = _example()
    u0 = np.random.default_rng(1).uniform(0.0, 1.0, 5000)
    result, members = example.run(u0, steps, places, backend)
    assert members == (places or members) and members >= 1
    np.testing.assert_allclose(
        result, example.reference(u0, steps), rtol=1e-12, atol=1e-12
    )


def test_the_script_says_pass():
    assert _example().main(["--backend", "emulated", "--n", "2000", "--steps", "5"]) == 0
