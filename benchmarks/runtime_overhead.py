"""The runtime's own cost per task, with a backend that does nothing.

    python benchmarks/runtime_overhead.py [--tasks 20000] [--graph] [--profile]
                                          [--backend emulated] [--json out.json]

Runs on the null backend (``stflow.backends.null``: every operation completes when
it is enqueued; no threads, no driver calls), so the figures are the Python cost of
submit → acquire → release alone: the part of B1's overhead that stflow itself adds
on top of the CUDA calls a task needs. ``--graph`` measures graph mode
(``use_graph=True``) beside stream mode in the same process: recording every task, and
then instantiating and launching the graphs (on the null backend a graph's nodes run
when it is launched), from the first submission to the end of the context: graph
mode's own cost, which B2 compares with stream mode on a GPU. ``STFLOW_PURE_PYTHON=1``
measures the Python sources of a compiled build. ``--backend emulated`` runs the same
chains on the emulated backend (its scheduler thread shares the interpreter), where
code the backends run in Python shows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import stflow as stf

MODES = {"stream": False, "graph": True}


def chain(
    tasks: int, reads: int, use_graph: bool = False, backend: str = "null"
) -> float:
    """µs per task of a chain of ``tasks`` tasks (``rw`` + ``reads`` reads), to the end
    of the context."""
    ctx = stf.context(backend=backend, use_graph=use_graph)
    x = ctx.logical_data(np.zeros(16))
    inputs = [ctx.logical_data(np.zeros(16)) for _ in range(reads)]
    with ctx.task(x.rw(), *[i.rw() for i in inputs]):
        pass
    ctx.fence()  # the data on the device, the first epoch closed
    deps = [x.rw(), *[i.read() for i in inputs]]
    start = time.perf_counter()
    for _ in range(tasks):
        with ctx.task(*deps) as t:
            t.stream_ptr()
    ctx.finalize()
    return (time.perf_counter() - start) / tasks * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--graph", action="store_true", help="graph mode too")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--backend",
        default="null",
        choices=["null", "emulated"],
        help="emulated: the same chains with the emulated backend's scheduler thread",
    )
    args = parser.parse_args()
    modes = ["stream", "graph"] if args.graph else ["stream"]
    build = "compiled" if stf.__compiled__ else "Python"
    for mode in modes:  # warm the process up
        for reads in (0, 1, 3):
            chain(args.tasks, reads, MODES[mode], args.backend)
    where = "" if args.backend == "null" else f", {args.backend} backend"
    results = {}
    for reads in (0, 1, 3):
        for mode in modes:  # interleaved: the machine's speed drifts
            best = min(
                chain(args.tasks, reads, MODES[mode], args.backend) for _ in range(5)
            )
            key = f"rw+{reads}" if mode == "stream" else f"graph rw+{reads}"
            results[key] = best
            print(
                f"runtime cost, {mode} mode, rw + {reads} read(s): {best:.2f} µs per "
                f"task ({build}{where})"
            )
    if args.json:
        import json

        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    if args.profile:
        import cProfile
        import pstats

        cProfile.runctx(
            "chain(args.tasks, 1, use_graph)",
            globals(),
            {"args": args, "chain": chain, "use_graph": args.graph},
            "/tmp/stflow-runtime.prof",
        )
        pstats.Stats("/tmp/stflow-runtime.prof").sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
