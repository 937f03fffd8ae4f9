"""The demo's NumPy baseline: the best of several runs, with the BLAS threads stated,
and a ratio printed plainly (no "faster" verdict drawn from a noisy figure)."""

from __future__ import annotations

import re
import sys
import time
import types

import numpy as np

import stflow
from stflow import demo


def test_the_reference_is_timed_as_the_best_of_several_runs(monkeypatch):
    durations = [0.03, 0.005, 0.02, 0.01]
    calls = []
    real = demo.reference_cg

    def reference(b, iterations):
        calls.append(iterations)
        time.sleep(durations[len(calls) - 1])
        return real(b, iterations)

    monkeypatch.setattr(demo, "reference_cg", reference)
    b = demo.poisson_rhs(8)
    x, best, runs = demo.time_reference(b, 7, max_runs=4, budget=10.0)
    assert runs == 4 and calls == [7] * 4
    assert 0.005 <= best < 0.01  # the fastest run, not the first
    np.testing.assert_array_equal(x, real(b, 7))
    calls.clear()
    _, best, runs = demo.time_reference(b, 7, max_runs=4, budget=0.0)
    assert runs == 1 and best >= 0.03  # a long reference: one run


def test_the_blas_threads_are_stated(monkeypatch):
    pools = [
        {"user_api": "openmp", "num_threads": 8},
        {"user_api": "blas", "internal_api": "openblas", "num_threads": 3},
    ]
    fake = types.ModuleType("threadpoolctl")
    fake.threadpool_info = lambda: pools  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "threadpoolctl", fake)
    assert demo.blas_threads() == "BLAS openblas with 3 thread(s)"
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # not installed
    for variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert re.fullmatch(r"BLAS \S+ with OMP_NUM_THREADS=2", demo.blas_threads())
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert demo.blas_threads().endswith(" with OPENBLAS_NUM_THREADS=1")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert "its default threads (one per core: " in demo.blas_threads()


def test_the_speed_up_line_states_the_ratio_without_a_verdict(capsys, monkeypatch):
    # A NumPy figure made large by noise must not make the demo claim to be faster.
    monkeypatch.setattr(
        demo,
        "time_reference",
        lambda b, iterations: (demo.reference_cg(b, iterations), 1000.0, 5),
    )
    monkeypatch.setattr(demo, "blas_threads", lambda: "BLAS fake with 7 thread(s)")
    assert (
        demo.main(["--size", "small", "--iterations", "6", "--backend", "emulated"]) == 0
    )
    out = capsys.readouterr().out
    assert (
        "NumPy reference 1000.000 s (best of 5 runs; BLAS fake with 7 thread(s))" in out
    )
    build = "compiled build" if stflow.__compiled__ else "Python sources"
    assert re.search(
        rf"timing: [0-9.]+ s wall for \d+ tasks \([0-9.]+ us per task, "
        rf"{build}\)",
        out,
    ), out
    speedup = re.search(
        r"speed-up over NumPy: (\d+\.\d\d)x \(NumPy reference time / "
        r"solve time; the emulated backend checks correctness",
        out,
    )
    assert speedup is not None and float(speedup.group(1)) > 1, out
    assert "faster" not in out and "slower" not in out
