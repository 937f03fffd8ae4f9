"""benchmarks/linalg_overhead.py runs without a GPU (``--fake``: no-op bindings and
CuPy stand-ins) and reports every routine, raw and through stflow.linalg."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers.docs_snippets import ROOT


def test_the_fake_mode_reports_every_routine(tmp_path):
    out = tmp_path / "overhead.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "linalg_overhead.py"),
            "--fake",
            "--count",
            "50",
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    report = json.loads(out.read_text())
    assert report["fake"] is True
    assert set(report["rows"]) == {"gemm", "syrk", "trsm", "potrf"}
    for row in report["rows"].values():
        assert set(row) == {"raw binding", "linalg, stream=", "linalg, current stream"}
        assert all(value > 0 for value in row.values())
