"""benchmarks/trace_summary.py reads what STFLOW_TRACE_FILE writes: a traced run of
the Cholesky example on the emulated backend, summarised by kind of work."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.docs_snippets import ROOT


def test_a_traced_cholesky_is_summarised_by_kind_of_work(tmp_path):
    trace = tmp_path / "run.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), STFLOW_TRACE_FILE=str(trace))
    example = [sys.executable, str(ROOT / "examples" / "cholesky.py")]
    subprocess.run(
        [*example, "--backend", "emulated", "--n", "256", "--nb", "64"],
        check=True,
        capture_output=True,
        env=env,
    )
    summary = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "trace_summary.py"), str(trace)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.splitlines()
    rows = {line[:24].strip(): int(line[24:31]) for line in summary[1:]}
    # 4 x 4 tiles: 4 potrf, 6 trsm, 6 syrk, 4 gemm; every lower tile stored back
    assert rows["task potrf"] == 4 and rows["task trsm"] == 6
    assert rows["task syrk"] == 6 and rows["task gemm"] == 4
    assert rows["host_launch store"] == 10 and rows["transfer to host"] == 10
    assert rows["transfer to device"] >= 10
    assert summary[0].endswith(" ms") and "spans over" in summary[0]
