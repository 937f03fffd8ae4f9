"""Render the pictures of docs/observability.md and docs/cholesky.md.

    python docs/pictures/make_pictures.py             # the demo's pictures
    python docs/pictures/make_pictures.py cholesky    # the tiled Cholesky's

Needs Graphviz's ``dot`` and matplotlib (neither is a dependency of stflow).

- The demo: runs the demo's solver for two CG iterations over two (emulated, unless
  STFLOW_BACKEND says otherwise) devices with ``STFLOW_DOT_FILE`` and
  ``STFLOW_TRACE_FILE`` set, renders the DOT graph with ``dot`` and draws the trace's
  spans per stream as a timeline.
- The Cholesky: the DOT graph of a 4 × 4-tile factorisation (emulated), and the
  timeline of ``cholesky-trace-h200.json``, the trace of an n = 8192 factorisation in
  tiles of 1024 on one H200 (made by ``STFLOW_TRACE_FILE=... python
  benchmarks/b5_cholesky.py --sizes 8192 --tiles 1024``: the last context's trace,
  after the warm-up).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOT = os.path.join(HERE, "demo.dot")
TRACE = os.path.join(HERE, "demo-trace.json")


def run_demo() -> None:
    os.environ["STFLOW_DOT_FILE"] = DOT
    os.environ["STFLOW_TRACE_FILE"] = TRACE
    os.environ.setdefault("STFLOW_BACKEND", "emulated")
    from stflow.demo import poisson_rhs, solve

    solve(
        poisson_rhs(24),
        iterations=2,
        devices=2,
        blocks=2,
        backend=os.environ["STFLOW_BACKEND"],
    )


def render_dot() -> None:
    subprocess.run(
        ["dot", "-Tpng", "-Gdpi=80", DOT, "-o", os.path.join(HERE, "demo-graph.png")],
        check=True,
    )


def render_timeline(
    trace: str = TRACE,
    output: str = "demo-timeline.png",
    title: str = "stflow demo (2 CG iterations, 2 devices): one track per stream",
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.load(open(trace))["traceEvents"]
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M"
    }
    spans = [e for e in events if e["ph"] == "X"]
    tracks = sorted({(e["pid"], e["tid"]) for e in spans})
    row = {track: i for i, track in enumerate(tracks)}
    figure, axes = plt.subplots(figsize=(12, 0.5 * len(tracks) + 1.2))
    colours = {
        "task": "#4c78a8",
        "host_launch": "#f58518",
        "transfer": "#54a24b",
        "writeback": "#b279a2",
        "wait": "#e45756",
    }
    for e in spans:
        y = row[(e["pid"], e["tid"])]
        axes.barh(
            y,
            e["dur"],
            left=e["ts"],
            height=0.6,
            color=colours.get(e["cat"], "#999999"),
            edgecolor="black",
            linewidth=0.3,
        )
    axes.set_yticks(range(len(tracks)))
    axes.set_yticklabels(
        [f"{names.get((p, None), p)} / {names.get((p, t), t)}" for p, t in tracks],
        fontsize=8,
    )
    axes.invert_yaxis()
    axes.set_xlabel("µs since the context started")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    axes.legend(handles, list(colours), loc="lower right", fontsize=8)
    axes.set_title(title)
    figure.tight_layout()
    figure.savefig(os.path.join(HERE, output), dpi=90)


def cholesky_pictures() -> None:
    """The DOT graph of a small factorisation and the timeline of the H200 trace."""
    import importlib.util

    import numpy as np

    dot = os.path.join(HERE, "cholesky.dot")
    os.environ["STFLOW_DOT_FILE"] = dot
    path = os.path.join(HERE, "..", "..", "examples", "cholesky.py")
    spec = importlib.util.spec_from_file_location("cholesky_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    lower, _ = example.cholesky(example.spd_matrix(64), 16, backend="emulated")
    assert np.allclose(lower, np.linalg.cholesky(example.spd_matrix(64)))
    subprocess.run(
        ["dot", "-Tpng", "-Gdpi=70", dot, "-o", os.path.join(HERE, "cholesky-graph.png")],
        check=True,
    )
    render_timeline(
        os.path.join(HERE, "cholesky-trace-h200.json"),
        "cholesky-timeline.png",
        "tiled Cholesky, n = 8192 in 8 × 8 tiles of 1024, one H200, "
        "stream mode: one track per stream",
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["cholesky"]:
        cholesky_pictures()
    else:
        run_demo()
        render_dot()
        render_timeline()
    print(
        "wrote",
        ", ".join(sorted(f for f in os.listdir(HERE) if f.endswith(".png"))),
        file=sys.stderr,
    )
