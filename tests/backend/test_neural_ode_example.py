"""The neural ODE example (examples/neural_ode.py): RK4 in graph_scope > repeat and
adaptive DOPRI5 in a while_loop match NumPy integrations on every backend."""

from __future__ import annotations

import numpy as np
from helpers.examples import load_example


def _example():
    return load_example("neural_ode")


def test_rk4_matches_numpy(backend):
    example = _example()
    weights, y0 = example.make_weights(16), example.make_states(8)
    y = example.rk4(y0, weights, 1.5, 40, backend)
    np.testing.assert_allclose(
        y, example.rk4_reference(y0, weights, 1.5, 40), rtol=1e-12, atol=1e-12
    )
    assert np.max(np.abs(y - y0)) > 0.1  # the states did move


def test_dopri5_adapts_its_steps_on_the_device(backend):
    example = _example()
    weights, y0 = example.make_weights(16), example.make_states(8)
    y, accepted, rejected = example.dopri5(
        y0, weights, 3.0, rtol=1e-7, atol=1e-9, backend=backend
    )
    y_ref, accepted_ref, rejected_ref = example.dopri5_reference(
        y0, weights, 3.0, rtol=1e-7, atol=1e-9
    )
    assert accepted > 5 and abs(accepted - accepted_ref) <= 2
    if backend == "emulated":  # the same arithmetic exactly
        assert (accepted, rejected) == (accepted_ref, rejected_ref)
        np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_allclose(y, y_ref, rtol=1e-6, atol=1e-6)
    fine = example.rk4_reference(y0, weights, 3.0, 4000)
    np.testing.assert_allclose(y, fine, rtol=1e-5, atol=1e-5)


def test_the_step_cap_stops_the_loop(backend):
    example = _example()
    weights, y0 = example.make_weights(16), example.make_states(4)
    _, accepted, rejected = example.dopri5(
        y0, weights, 50.0, max_steps=3, backend=backend
    )
    assert accepted + rejected == 3


def test_the_script_says_pass(capsys):
    assert (
        _example().main(
            [
                "--backend",
                "emulated",
                "--batch",
                "4",
                "--hidden",
                "8",
                "--rk4-steps",
                "20",
                "--t-end",
                "1.0",
            ]
        )
        == 0
    )
    assert "PASS" in capsys.readouterr().out
