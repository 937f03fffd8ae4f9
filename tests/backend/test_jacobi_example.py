"""The Jacobi example (examples/jacobi.py) matches NumPy with every kind of body, on
every backend."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers.examples import example_path, load_example

EXAMPLE = example_path("jacobi")


def _example():
    return load_example("jacobi")


def _check(example, backend, body, m, n, tol, max_iterations):
    u, sweeps, residual = example.solve(m, n, tol, max_iterations, body, backend)
    expected, expected_sweeps, expected_residual = example.reference(
        m, n, tol, max_iterations
    )
    assert sweeps == expected_sweeps
    assert residual == pytest.approx(expected_residual, rel=1e-12)
    np.testing.assert_allclose(u, expected, rtol=0, atol=1e-12)
    return sweeps, residual


def test_the_xp_body_converges_like_numpy(backend):
    sweeps, residual = _check(_example(), backend, "xp", 24, 20, 1e-3, 1000)
    assert 2 < sweeps < 1000 and residual <= 1e-3  # stopped by the tolerance


def test_the_iteration_cap_stops_the_device_loop(backend):
    sweeps, residual = _check(_example(), backend, "xp", 16, 16, 0.0, 9)
    assert sweeps == 9 and residual > 0


@pytest.mark.parametrize("body, module", [("torch", "torch"), ("warp", "warp")])
def test_library_bodies_match_numpy(backend, body, module):
    pytest.importorskip(module)
    _check(_example(), backend, body, 14, 12, 1e-3, 12)


# Numba warns that a small grid under-uses the GPU (the suite turns warnings into
# errors); whether it warns depends on what ran before in the process. Its message
# starts with a terminal escape, hence the leading ".*".
@pytest.mark.filterwarnings("ignore:.*Grid size")
def test_the_numba_body_matches_numpy(backend):
    pytest.importorskip("numba")
    if backend == "emulated":
        # Numba's CUDA simulator is chosen when Numba is imported: a fresh process.
        # As a newcomer runs it: no --backend (STFLOW_BACKEND decides), no
        # NUMBA_ENABLE_CUDASIM (the script sets it), every body.
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        env.update(
            STFLOW_BACKEND="emulated",
            PYTHONPATH=os.pathsep.join(
                [str(EXAMPLE.parents[1] / "src"), env.get("PYTHONPATH", "")]
            ),
        )
        process = subprocess.run(
            [
                sys.executable,
                str(EXAMPLE),
                "--body",
                "all",
                "--m",
                "10",
                "--n",
                "12",
                "--max-iterations",
                "6",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        out = process.stdout
        assert process.returncode == 0, out + process.stderr
        assert "PASS xp: 10x12 grid, 6 sweeps" in out
        assert "PASS numba: 10x12 grid, 6 sweeps" in out
        for body, module in (("torch", "torch"), ("warp", "warp")):
            installed = importlib.util.find_spec(module) is not None
            assert (
                f"PASS {body}: 10x12 grid, 6 sweeps"
                if installed
                else f"SKIP {body}: --body {body} needs"
            ) in out, out
        return
    from numba.core import config

    if config.ENABLE_CUDASIM:
        pytest.skip("this process runs Numba's simulator")
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack  # test-only shim: numba-cuda 0.30 on NumPy >= 2.5
    _check(_example(), backend, "numba", 40, 36, 1e-3, 30)


def test_the_script_says_pass_and_skips_missing_libraries(capsys, monkeypatch):
    example = _example()
    monkeypatch.setattr(
        example, "available", lambda body: "" if body == "xp" else f"{body} is missing"
    )
    assert (
        example.main(["--backend", "emulated", "--m", "12", "--n", "12", "--body", "all"])
        == 0
    )
    out = capsys.readouterr().out
    assert "PASS xp: 12x12 grid" in out
    assert "SKIP numba: numba is missing" in out and "SKIP warp" in out


def test_a_numba_run_of_minutes_on_the_simulator_is_skipped_by_all(capsys, monkeypatch):
    # --body all must finish: on Numba's CUDA simulator (every GPU thread in Python)
    # the default 64x64 grid would take a quarter of an hour.
    example = _example()
    monkeypatch.setattr(
        example, "available", lambda body: "" if body in ("xp", "numba") else "missing"
    )
    monkeypatch.setattr(example, "prepare_numba", lambda backend: "")
    monkeypatch.setattr(
        example, "simulator_estimate", lambda m, n, sweeps: m * n * sweeps * 1e-3
    )
    ran = []
    solve = example.solve
    monkeypatch.setattr(
        example,
        "solve",
        lambda *args: ran.append(args[4]) or solve(*args[:4], "xp", *args[5:]),
    )
    assert example.main(["--body", "all"]) == 0
    out = capsys.readouterr().out
    assert ran == ["xp"]
    assert (
        "SKIP numba: Numba's CUDA simulator runs every GPU thread in Python: this "
        "64x64 grid, 241 sweeps, takes about 16 min; --body numba --m 16 --n 16 "
        "--max-iterations 20 checks it in seconds" in out
    )
    assert example.main(["--body", "numba", "--m", "12", "--n", "12"]) == 0
    out = capsys.readouterr().out  # small enough: no note, it runs
    assert ran == ["xp", "numba"] and "note:" not in out and "PASS numba" in out


def test_the_simulator_estimate_is_zero_without_the_simulator(monkeypatch):
    example = _example()
    monkeypatch.delitem(sys.modules, "numba.core.config", raising=False)
    assert example.simulator_estimate(64, 64, 241) == 0.0
