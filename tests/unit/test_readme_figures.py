"""benchmarks/readme_figures.py prints the README's figures as blocks to paste."""

from __future__ import annotations

import importlib.util
import os

import pytest
from helpers.docs_snippets import ROOT


def _script():
    spec = importlib.util.spec_from_file_location(
        "readme_figures", ROOT / "benchmarks" / "readme_figures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_progress_lines_are_read_in_both_styles():
    script = _script()
    assert (
        script._progress_count(
            "stflow:  21%|##1       | 169/800 [00:00<00:02, 218.96task/s, 85.5 MiB moved]"
        )
        == 169
    )
    assert (
        script._progress_count(
            "stflow: [#####...................] 192/800 tasks (24%), 97.0 MiB moved"
        )
        == 192
    )
    with pytest.raises(ValueError, match="no count"):
        script._progress_count("stflow: starting")


def test_the_demo_figure_is_the_demo_output_with_one_blas_thread(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("STFLOW_BACKEND", "emulated")
    from stflow.demo import SIZES

    n = SIZES["small"][0]
    block = _script().demo_figure(["--size", "small", "--iterations", "6"]).splitlines()
    assert block[0] == "```text" and block[-1] == "```"
    assert block[1].startswith(
        "stflow demo: blocked conjugate gradient, 2-D Poisson, "
        f"{n}x{n} grid, 6 iterations"
    )
    assert any(line.endswith("-> PASS") for line in block)
    timing = next(line for line in block if line.startswith("timing: "))
    assert "best of " in timing and "with OPENBLAS_NUM_THREADS=1)" in timing
    assert "OPENBLAS_NUM_THREADS" not in os.environ  # only the child's


def test_no_argument_makes_every_figure(capsys, monkeypatch):
    script = _script()
    monkeypatch.setattr(script, "demo_figure", lambda: "<demo block>")
    monkeypatch.setattr(script, "progress_figure", lambda: "<progress block>")
    assert script.main([]) == 0
    out = capsys.readouterr().out
    assert out.index("<demo block>") < out.index("<progress block>")
    assert "README.md, 'Run the demo' (python -m stflow.demo):" in out
    assert script.main(["progress"]) == 0
    out = capsys.readouterr().out
    assert "<progress block>" in out and "<demo block>" not in out
    with pytest.raises(SystemExit):
        script.main(["demos"])
    assert "unknown figure 'demos'; choose from demo, progress" in capsys.readouterr().err
