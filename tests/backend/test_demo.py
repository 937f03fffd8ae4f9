"""The demo (``python -m stflow.demo``): a blocked CG solve checked against NumPy."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import stflow
from stflow import demo


def _tasks_expected(blocks: int, iterations: int, reports: int) -> int:
    # start + init, then per iteration 4 tasks per block plus alpha and beta.
    return blocks + 1 + iterations * (4 * blocks + 2) + reports


def test_demo_main_passes_and_reports(backend, capsys):
    code = demo.main(["--size", "small", "--backend", backend])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"backend: {backend} (" in out
    assert "-> PASS" in out
    n, iterations = demo.SIZES["small"]
    layout = re.search(r"layout: (\d+) row block\(s\) over (\d+) device", out)
    blocks = int(layout.group(1))
    progress = re.findall(r"iteration +(\d+): \|r\|/\|r0\| = (\S+)", out)
    assert [int(i) for i, _ in progress] == [12, 24, 36, 48, 60]
    # The residual reported from the host callback shrinks to convergence.
    assert float(progress[-1][1]) < 1e-6
    tasks = int(re.search(r"for (\d+) tasks", out).group(1))
    assert tasks == _tasks_expected(blocks, iterations, len(progress))
    error = float(re.search(r"max error (\S+)", out).group(1))
    assert error <= 1e-12


@pytest.mark.parametrize("devices, blocks", [(1, 1), (2, 3), (2, 7), (1, 32)])
def test_solve_matches_numpy_for_any_layout(backend, devices, blocks):
    b = demo.poisson_rhs(32)
    before = b.copy()
    result = demo.solve(b, 25, backend=backend, devices=devices, blocks=blocks)
    np.testing.assert_allclose(result.x, demo.reference_cg(b, 25), rtol=0, atol=1e-13)
    np.testing.assert_array_equal(b, before)
    assert result.tasks == _tasks_expected(blocks, 25, 0)


def test_solve_reports_progress_from_host_callbacks(backend):
    lines: list[str] = []
    demo.solve(
        demo.poisson_rhs(16), 10, backend=backend, report_every=4, out=lines.append
    )
    assert [int(line.split()[1].rstrip(":")) for line in lines] == [4, 8, 10]


def test_demo_main_fails_on_a_wrong_answer(backend, capsys, monkeypatch):
    correct = demo.reference_cg
    monkeypatch.setattr(demo, "reference_cg", lambda b, it: correct(b, it) + 1e-6)
    code = demo.main(["--size", "small", "--iterations", "5", "--backend", backend])
    assert code == 1
    assert "-> FAIL" in capsys.readouterr().out


def test_demo_devices_option_limits_the_layout(backend, capsys):
    code = demo.main(
        ["--size", "12", "--iterations", "30", "--devices", "1", "--backend", backend]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "layout: 2 row block(s) over 1 device(s)" in out
    assert "12x12 grid, 30 iterations" in out


def test_layout_defaults_and_limits():
    assert demo.layout(100, 2) == (2, 4)
    assert demo.layout(100, 4, devices=2) == (2, 4)
    assert demo.layout(100, 2, devices=8) == (2, 4)  # no more than available
    assert demo.layout(3, 2, blocks=8) == (2, 3)  # at most one block per row
    assert demo.layout(1, 4) == (1, 1)  # no device without a block


def test_row_blocks_cover_the_rows_once():
    assert demo.row_blocks(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert demo.row_blocks(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_python_m_stflow_demo_prints_pass():
    package_parent = os.path.dirname(os.path.dirname(stflow.__file__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [package_parent, env.get("PYTHONPATH")])
    )
    process = subprocess.run(
        [sys.executable, "-m", "stflow.demo", "--size", "small"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert process.returncode == 0, process.stdout + process.stderr
    assert "PASS" in process.stdout
    assert "backend: " in process.stdout


@pytest.mark.parametrize("devices", [1, 2], ids=["repeat", "unrolled"])
@pytest.mark.parametrize(
    "iterations, report_every, launches", [(25, 10, 2), (12, 0, 1), (9, 3, 3)]
)
def test_graph_mode_replays_the_recorded_iterations(
    backend, iterations, report_every, launches, devices
):
    b = demo.poisson_rhs(24)
    lines: list[str] = []
    result = demo.solve(
        b,
        iterations,
        backend=backend,
        devices=devices,
        blocks=3,
        report_every=report_every,
        out=lines.append,
        graph=True,
    )
    np.testing.assert_allclose(
        result.x, demo.reference_cg(b, iterations), rtol=0, atol=1e-13
    )
    assert result.launches == launches
    reports = [int(line.split()[1].rstrip(":")) for line in lines]
    expected = (
        []
        if not report_every
        else [
            i
            for i in range(1, iterations + 1)
            if i % report_every == 0 or i == iterations
        ]
    )
    assert reports == expected
    assert result.tasks == _tasks_expected(3, iterations, len(expected))


def test_the_default_size_and_graph_mode_by_backend(backend, capsys):
    """CUDA: the large size in graph mode (where a GPU beats NumPy clearly);
    emulated: the medium size task by task. Both can be asked for explicitly."""
    assert demo.DEFAULT_SIZE == {"emulated": "medium", "cuda": "large"}
    args = demo._parse([])
    assert args.n is None and args.graph is None
    demo._size(args, backend)
    assert (args.n, args.iterations) == demo.SIZES[demo.DEFAULT_SIZE[backend]]
    code = demo.main(["--size", "small", "--iterations", "10", "--backend", backend])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"speed-up over NumPy: \d+\.\d\dx", out)
    assert ("graph mode" in out) == (backend == "cuda")  # the default by backend
    code = demo.main(
        ["--size", "small", "--iterations", "10", "--backend", backend, "--no-graph"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "graph mode" not in out, out
    code = demo.main(
        [
            "--size",
            "small",
            "--iterations",
            "10",
            "--backend",
            backend,
            "--graph",
            "--no-warmup",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "from 5 graph launches" in out, out
