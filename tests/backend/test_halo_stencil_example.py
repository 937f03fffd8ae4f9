"""The multi-device halo-exchange stencil (examples/halo_stencil.py) matches NumPy on
every backend, and only the halo rows travel between devices."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example


def _example():
    return load_example("halo_stencil")


@pytest.mark.parametrize("use_graph", [False, True], ids=["streams", "graph"])
@pytest.mark.parametrize(
    "strips, rows, steps", [(1, 12, 4), (2, 16, 9), (5, 17, 6), (4, 4, 3)]
)
def test_the_halo_stencil_matches_numpy(backend, use_graph, strips, rows, steps):
    example = _example()
    u0 = example.initial(rows, 11)
    result, devices, _ = example.run(u0, strips, steps, backend, use_graph)
    assert 1 <= devices <= strips
    np.testing.assert_allclose(result, example.reference(u0, steps), rtol=0, atol=1e-13)


def test_only_the_halo_rows_move_between_devices(backend):
    example = _example()
    n, strips, steps = 16, 4, 5
    result, devices, statistics = example.run(
        example.initial(20, n), strips, steps, backend
    )
    if devices < 2:
        pytest.skip("one device")
    # Neighbouring strips sit on different devices when there are two or more
    # (strip k on device k % devices): two rows per boundary per step.
    if devices == 2 or devices >= strips:
        assert statistics.copies_d2d == steps * 2 * (strips - 1)
        assert statistics.bytes_d2d == steps * 2 * (strips - 1) * n * 8


def test_the_script_says_pass(capsys):
    assert (
        _example().main(
            [
                "--backend",
                "emulated",
                "--n",
                "24",
                "--rows-per-strip",
                "6",
                "--strips",
                "3",
                "--steps",
                "4",
            ]
        )
        == 0
    )
    assert "PASS: 4 steps of a 18x24 grid in 3 strip(s)" in capsys.readouterr().out
