"""Render the pictures of docs/observability.md from a small run of the demo.

    python docs/pictures/make_pictures.py

Needs Graphviz's ``dot`` and matplotlib (neither is a dependency of stflow). Runs the
demo's solver for two CG iterations over two (emulated, unless STFLOW_BACKEND says
otherwise) devices with ``STFLOW_DOT_FILE`` and ``STFLOW_TRACE_FILE`` set, renders the
DOT graph with ``dot`` and draws the trace's spans per stream as a timeline.
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
    solve(poisson_rhs(24), iterations=2, devices=2, blocks=2,
          backend=os.environ["STFLOW_BACKEND"])


def render_dot() -> None:
    subprocess.run(["dot", "-Tpng", "-Gdpi=80", DOT, "-o",
                    os.path.join(HERE, "demo-graph.png")], check=True)


def render_timeline() -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.load(open(TRACE))["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e["ph"] == "M"}
    spans = [e for e in events if e["ph"] == "X"]
    tracks = sorted({(e["pid"], e["tid"]) for e in spans})
    row = {track: i for i, track in enumerate(tracks)}
    figure, axes = plt.subplots(figsize=(12, 0.5 * len(tracks) + 1.2))
    colours = {"task": "#4c78a8", "host_launch": "#f58518", "transfer": "#54a24b",
               "writeback": "#b279a2", "wait": "#e45756"}
    for e in spans:
        y = row[(e["pid"], e["tid"])]
        axes.barh(y, e["dur"], left=e["ts"], height=0.6,
                  color=colours.get(e["cat"], "#999999"), edgecolor="black",
                  linewidth=0.3)
    axes.set_yticks(range(len(tracks)))
    axes.set_yticklabels([f"{names[(p, None)]} / {names[(p, t)]}" for p, t in tracks],
                         fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("µs since the context started")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    axes.legend(handles, list(colours), loc="lower right", fontsize=8)
    axes.set_title("stflow demo (2 CG iterations, 2 devices): one track per stream")
    figure.tight_layout()
    figure.savefig(os.path.join(HERE, "demo-timeline.png"), dpi=90)


if __name__ == "__main__":
    run_demo()
    render_dot()
    render_timeline()
    print("wrote", ", ".join(sorted(f for f in os.listdir(HERE) if f.endswith(".png"))),
          file=sys.stderr)
