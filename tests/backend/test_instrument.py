"""Statistics, the DOT task graph and the Perfetto timeline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers.bodies import add_to

import stflow as stf
from stflow.instrument import DotRecorder, TraceRecorder, transitive_reduction


def _known_program(ctx):
    """t1 writes a; t2, t3 read it; t4 overwrites it; h reads t2's and t3's outputs."""
    a = ctx.logical_data(np.zeros(64), name="a")
    b = ctx.logical_data(np.zeros(64), name="b")
    c = ctx.logical_data(np.zeros(64), name="c")
    with ctx.task(a.rw(), symbol="t1") as t:
        add_to(t, 0, None, 1.0)
    with ctx.task(a.read(), b.rw(), symbol="t2") as t:
        add_to(t, 1, 0, 1.0)
    with ctx.task(a.read(), c.rw(), symbol="t3") as t:
        add_to(t, 1, 0, 2.0)
    with ctx.task(a.rw(), symbol="t4") as t:
        add_to(t, 0, None, 1.0)
    ctx.host_launch(b.read(), c.read(), fn=lambda *_: None, symbol="h")


def _named_edges(recorder, reduce):
    names = {
        r.ident: r.label.replace("task ", "").replace("host_launch ", "").strip("'")
        for r in recorder.records
    }
    return {(names[a], names[b]) for a, b in recorder.edges(reduce)}


def test_dot_has_exactly_the_inferred_edges(backend):
    recorder = DotRecorder()
    with stf.context(backend=backend) as ctx:
        ctx.attach(recorder)
        _known_program(ctx)
    assert _named_edges(recorder, reduce=True) == {
        ("t1", "t2"),
        ("t1", "t3"),
        ("t2", "t4"),
        ("t3", "t4"),
        ("t2", "h"),
        ("t3", "h"),
    }
    assert _named_edges(recorder, reduce=False) == _named_edges(recorder, True) | {
        ("t1", "t4")
    }
    dot = recorder.to_dot()
    assert dot.startswith("digraph stflow {") and dot.rstrip().endswith("}")
    assert "shape=note" in dot  # the copy of a to the device, shown apart
    assert dot.count(" -> w") == 6 + dot.count("[style=dashed]")


def test_transitive_reduction():
    assert transitive_reduction({(1, 2), (2, 3), (1, 3), (3, 4), (1, 4)}) == {
        (1, 2),
        (2, 3),
        (3, 4),
    }
    assert transitive_reduction(set()) == set()


def test_trace_has_tracks_spans_and_flows(backend):
    recorder = TraceRecorder()
    with stf.context(backend=backend) as ctx:
        ctx.attach(recorder)
        _known_program(ctx)
    trace = json.loads(json.dumps(recorder.to_json()))
    events = trace["traceEvents"]
    spans = {e["name"]: e for e in events if e["ph"] == "X"}
    assert {"task 't1'", "task 't2'", "task 't3'", "task 't4'", "host_launch 'h'"} <= set(
        spans
    )
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {"device 0", "host"} <= processes
    copies = [e for e in events if e["ph"] == "X" and e["cat"] == "transfer"]
    assert copies and all(e["args"]["bytes"] > 0 for e in copies)
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in spans.values())
    t1, t4 = spans["task 't1'"], spans["task 't4'"]
    assert t4["ts"] >= t1["ts"] + t1["dur"] - 1e-3  # t4 ran after t1 on the device
    starts = [e for e in events if e["ph"] == "s"]
    finishes = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(finishes) >= 6
    assert {e["id"] for e in starts} == {e["id"] for e in finishes}


def test_statistics_count_copies_by_direction(backend):
    with stf.context(backend=backend) as ctx:
        assert ctx.statistics().tasks == 0
        a = ctx.logical_data(np.zeros(1000))
        with ctx.task(stf.exec_place.device(0), a.rw()) as t:
            add_to(t, 0, None, 1.0)
        last = stf.backends.get_backend(backend).device_count - 1
        with ctx.task(stf.exec_place.device(last), a.read()):
            pass
        ctx.host_launch(a.read(stf.data_place.managed()), fn=lambda x: None)
        ctx.wait(a)
        stats = ctx.statistics()
    assert stats.tasks == 2 and stats.host_callbacks == 1
    assert (stats.copies_h2d, stats.bytes_h2d) == (1, 8000)
    assert stats.copies_d2d == (1 if last else 0)
    assert stats.copies_d2h >= 2  # to managed, and for wait()
    assert stats.allocations == 1 + (1 if last else 0) + 1
    assert stats.waits_issued + stats.waits_skipped >= 2
    assert stats.backend == backend and (stats.seed is not None) == (
        backend == "emulated"
    )
    assert "2 tasks" in str(stats)


def test_environment_variables_write_files(tmp_path):
    dot, trace = tmp_path / "graph.dot", tmp_path / "trace.json"
    code = (
        "import numpy as np, stflow as stf\n"
        "with stf.context(backend='emulated') as ctx:\n"
        "    x = ctx.logical_data(np.ones(4), name='x')\n"
        "    with ctx.task(x.rw(), symbol='scale') as t: pass\n"
        "    ctx.host_launch(x.read(), fn=print, symbol='show')\n"
    )
    env = {**os.environ, "STFLOW_DOT_FILE": str(dot), "STFLOW_TRACE_FILE": str(trace)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert "w1" in dot.read_text() or "scale" in dot.read_text()
    assert "'scale'" in dot.read_text() and "'show'" in dot.read_text()
    names = {e["name"] for e in json.loads(trace.read_text())["traceEvents"]}
    assert {"task 'scale'", "host_launch 'show'"} <= names


def test_attach_rejects_other_objects():
    with stf.context(backend="emulated") as ctx:
        with pytest.raises(TypeError, match="Instrument"):
            ctx.attach(object())


def test_the_demo_trace_and_graph(tmp_path):
    dot, trace = tmp_path / "demo.dot", tmp_path / "demo.json"
    env = {
        **os.environ,
        "STFLOW_DOT_FILE": str(dot),
        "STFLOW_TRACE_FILE": str(trace),
        "STFLOW_BACKEND": "emulated",
    }
    result = subprocess.run(
        [sys.executable, "-m", "stflow.demo", "--size", "small", "--iterations", "3"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout and "statistics:" in result.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {"device 0", "device 1", "host"} <= processes
    spans = [e for e in events if e["ph"] == "X"]
    names = {e["name"] for e in spans}
    assert {"task 'matvec[0]'", "task 'alpha'", "host_launch 'report'"} <= names
    assert all(e["dur"] > 0 for e in spans)
    assert any(e["cat"] == "transfer" and e["args"]["bytes"] > 0 for e in spans)
    graph = dot.read_text()
    assert "task 'matvec[0]'" in graph and " -> " in graph


def test_the_summary_of_a_real_program_counts_its_tasks_copies_and_edges(backend):
    recorder = DotRecorder(summary=True)
    with stf.context(backend=backend) as ctx:
        ctx.attach(recorder)
        _known_program(ctx)
        _known_program(ctx)  # each symbol twice
    text = recorder.to_dot()
    copies = sum(len(r.transfers) for r in recorder.records)
    assert (
        f"summary of {10 + copies} nodes (10 tasks and host callbacks, {copies} "
        "copies, 0 waits and fences) in 5 groups by symbol" in text
    )
    for symbol in ("t1", "t2", "t3", "t4"):
        assert f"task '{symbol}'\\n× 2 on dev0" in text
    assert "host_launch 'h'\\n× 2 on host" in text
    counts = [int(n) for n in re.findall(r' -> g\d+ \[label="(\d+)"\]', text)]
    assert sum(counts) == len(recorder.edges()) == 12  # 6 per program (new data)
    assert " copies in, " in text or " copy in, " in text


def test_the_demo_graph_from_the_environment_is_summarised(tmp_path):
    dot = tmp_path / "demo.dot"
    env = {
        **os.environ,
        "STFLOW_DOT_FILE": str(dot),
        "STFLOW_BACKEND": "emulated",
        "STFLOW_DOT_MAX_NODES": "40",
    }
    command = [
        sys.executable,
        "-m",
        "stflow.demo",
        "--size",
        "small",
        "--iterations",
        "3",
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    graph = dot.read_text()
    assert "groups by symbol; max_nodes=40." in graph
    assert "task 'matvec[0]'\\n× 3 on dev0" in graph
    assert "STFLOW_DOT_MAX_NODES=0" in graph
    env["STFLOW_DOT_MAX_NODES"] = "0"  # and the full graph
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    graph = dot.read_text()
    assert "summary" not in graph and graph.count("label=\"task 'matvec[0]'") == 3
