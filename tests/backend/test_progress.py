"""stf.ProgressBar: tasks submitted / completed and bytes moved, drawn while work runs."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers.bodies import add_to

import stflow as stf


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _slow_program(ctx, tasks=12, delay=0.01):
    x = ctx.logical_data(np.zeros(256), name="x")
    y = ctx.logical_data(np.zeros(256), name="y")
    for k in range(tasks):
        device = k % ctx._runtime.device_count  # two devices where there are
        with ctx.task(stf.exec_place.device(device), x.rw(), y.read()) as t:
            add_to(t, 0, None, 1.0)
            if ctx.backend == "emulated":
                from stflow.emulated import launch

                launch(t.stream_ptr(), lambda *views: time.sleep(delay))
    ctx.host_launch(x.read(), fn=lambda x: None)
    return x


def test_counts_tasks_completions_and_bytes(backend):
    out = _Terminal()
    with stf.context(backend=backend) as ctx:
        bar = stf.ProgressBar(ctx, style="text", file=out, interval=0.01)
        _slow_program(ctx)
        assert bar.submitted == 13  # 12 tasks and 1 host callback
        assert 0 <= bar.completed <= 13
    assert (bar.submitted, bar.completed, bar.closed) == (13, 13, True)
    stats = ctx.statistics()
    moved = stats.bytes_h2d + stats.bytes_d2h + stats.bytes_d2d + stats.bytes_h2h
    assert bar.bytes_moved == moved > 0
    last = out.getvalue().split("\r")[-1]
    assert "13/13 tasks (100%)" in last and "moved" in last and last.endswith("\n")


def test_draws_while_the_work_runs():
    out = _Terminal()
    with stf.context(backend="emulated") as ctx:
        stf.ProgressBar(ctx, style="text", file=out, interval=0.005)
        _slow_program(ctx, tasks=20, delay=0.01)
    frames = [f for f in out.getvalue().split("\r") if f]
    assert len(frames) >= 3  # redrawn in place, not only at the end
    done = [int(f.split("] ")[1].split("/")[0]) for f in frames]
    assert done == sorted(done) and done[-1] == 21
    assert any(0 < d < 21 for d in done), frames  # completions seen before finalize


def test_a_log_file_gets_whole_lines():
    out = io.StringIO()  # not a terminal: no carriage returns
    with stf.context(backend="emulated") as ctx:
        stf.ProgressBar(ctx, style="text", file=out, interval=0.01)
        _slow_program(ctx, tasks=3)
    assert "\r" not in out.getvalue()
    assert out.getvalue().splitlines()[-1].startswith("stflow: [####")


def test_graph_mode_work_completes_at_finalize():
    out = _Terminal()
    with stf.stackable_context(backend="emulated") as sctx:
        bar = stf.ProgressBar(sctx, style="text", file=out)
        x = sctx.logical_data(np.zeros(8))
        with sctx.repeat(3):
            with sctx.task(x.rw()) as t:
                add_to(t, 0, None, 1.0)
        with sctx.task(x.rw()) as t:  # stream mode at the root
            add_to(t, 0, None, 1.0)
    assert bar.submitted == bar.completed >= 2
    assert f"{bar.submitted}/{bar.submitted} tasks" in out.getvalue()


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="style='fancy'.*auto, tqdm, rich, text"):
        stf.ProgressBar(style="fancy")
    with pytest.raises(ValueError, match="positive"):
        stf.ProgressBar(interval=0)
    bar = stf.ProgressBar(style="text", file=io.StringIO())
    with stf.context(backend="emulated") as ctx, stf.context(backend="emulated") as other:
        ctx.attach(bar)
        with pytest.raises(ValueError, match="one bar per context"):
            other.attach(bar)


@pytest.mark.parametrize("interval", [float("inf"), float("nan"), -1.0, 1e300])
def test_an_interval_the_helper_thread_cannot_wait_is_refused(interval):
    # inf was accepted, and the helper thread died with an OverflowError traceback
    with pytest.raises(
        ValueError,
        match=r"interval=.*positive, finite number of "
        r"seconds",
    ):
        stf.ProgressBar(style="text", interval=interval)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"total": True}, r"total=True\): give the expected number of tasks as an int"),
        ({"total": 2.0}, r"total=2.0\): .* an int >= 0"),
        ({"total": "10"}, r"total='10'\): .* an int >= 0"),
        ({"interval": "0.5"}, r"interval='0.5'\): .* as a number"),
        ({"interval": True}, r"interval=True\): .* as a number"),
        ({"style": None}, r"style=None\): give a string, one of auto, tqdm"),
        ({"description": 3}, r"description=3\): give the label as a string"),
        ({"file": "log.txt"}, r"file='log.txt'\): give a text file object"),
    ],
)
def test_arguments_of_the_wrong_type_are_named(arguments, message):
    with pytest.raises(TypeError, match=message):
        stf.ProgressBar(**{"style": "text", **arguments})


def test_integral_totals_and_long_intervals_are_accepted():
    bar = stf.ProgressBar(
        style="text", file=io.StringIO(), total=np.int64(7), interval=1e6
    )
    assert bar.expected == 7 and type(bar.expected) is int
    started = time.monotonic()
    with stf.context(backend="emulated") as ctx:
        ctx.attach(bar)  # the helper thread waits 1e6 s between redraws
        x = ctx.logical_data(np.zeros(4))
        with ctx.task(x.rw()):
            pass
    assert bar.closed and not bar._thread.is_alive()
    assert time.monotonic() - started < 30  # close() did not wait 1e6 s
    assert bar.text().split("] ")[1].startswith("1/1 tasks")


def test_missing_library_is_named(monkeypatch):
    import stflow._instruments.progress as progress

    monkeypatch.setattr(progress, "_importable", lambda name: False)
    with pytest.raises(ImportError, match="pip install rich"):
        stf.ProgressBar(style="rich")
    assert stf.ProgressBar().style == "text"  # auto falls back to plain text


def test_tqdm_style():
    pytest.importorskip("tqdm")
    out = io.StringIO()
    with stf.context(backend="emulated") as ctx:
        bar = stf.ProgressBar(ctx, style="tqdm", file=out, interval=0.01)
        _slow_program(ctx, tasks=4)
    assert bar.completed == 5
    assert "5/5" in out.getvalue() and "moved" in out.getvalue()


def test_environment_variable_attaches_a_bar(tmp_path):
    program = (
        "import numpy as np, stflow as stf\n"
        "with stf.context() as ctx:\n"
        "    x = ctx.logical_data(np.zeros(4))\n"
        "    for _ in range(3):\n"
        "        with ctx.task(stf.exec_place.device(1), x.rw()) as t: pass\n"
    )
    env = dict(os.environ, STFLOW_BACKEND="emulated", STFLOW_PROGRESS="text")
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "stflow: [" in done.stderr and "3/3 tasks (100%)" in done.stderr
    env["STFLOW_PROGRESS"] = "sparkles"
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode != 0 and "STFLOW_PROGRESS='sparkles'" in done.stderr


def test_an_expected_total_shows_the_fraction_of_the_run():
    out = _Terminal()
    with stf.context(backend="emulated") as ctx:
        bar = stf.ProgressBar(ctx, style="text", file=out, total=100)
        _slow_program(ctx, tasks=4)
        assert bar.text().split("] ")[1].startswith(f"{bar.completed}/100 tasks")
    assert (
        out.getvalue()
        .split("\r")[-1]
        .startswith("stflow: [########################] 5/5 tasks (100%)")
    )
    with pytest.raises(ValueError, match="total=-1"):
        stf.ProgressBar(total=-1)
