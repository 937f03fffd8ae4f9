"""The FDTD example (examples/fdtd.py) matches NumPy on every backend, with its time
loop on the device (repeat) and submitted from the host."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example


def _example():
    return load_example("fdtd")


@pytest.mark.parametrize("loop", [True, False], ids=["repeat", "host-loop"])
@pytest.mark.parametrize("size, steps", [(10, 12), (7, 1)])
def test_fdtd_matches_numpy(backend, loop, size, steps):
    example = _example()
    fields = example.run(size, steps, backend, loop=loop)
    expected = example.reference(size, steps)
    for name, array in expected.items():
        np.testing.assert_allclose(
            fields[name], array, rtol=1e-12, atol=1e-14, err_msg=name
        )
    assert np.abs(fields["ez"]).max() > 0 and np.abs(fields["hx"]).max() > 0 or steps < 2


def test_zero_steps_leave_the_fields_at_zero(backend):
    fields = _example().run(6, 0, backend)
    assert all(not array.any() for array in fields.values())


def test_the_script_says_pass(capsys):
    assert _example().main(["--backend", "emulated", "--size", "8", "--steps", "6"]) == 0
    assert "PASS: 6 FDTD steps on a 8^3 grid" in capsys.readouterr().out
