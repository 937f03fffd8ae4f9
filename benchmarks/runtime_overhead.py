"""The runtime's own cost per task, with a backend that does nothing.

    python benchmarks/runtime_overhead.py [--tasks 20000] [--profile] [--json out.json]

Runs on the null backend (``stflow.backends.null``: every operation completes when
it is enqueued; no threads, no driver calls), so the figures are the Python cost of
submit → acquire → release alone: the part of B1's overhead that stflow itself adds
on top of the CUDA calls a task needs. ``STFLOW_PURE_PYTHON=1`` measures the Python
sources of a compiled build.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import stflow as stf


def chain(tasks: int, reads: int) -> float:
    with stf.context(backend="null") as ctx:
        x = ctx.logical_data(np.zeros(16))
        inputs = [ctx.logical_data(np.zeros(16)) for _ in range(reads)]
        deps = [x.rw(), *[i.read() for i in inputs]]
        start = time.perf_counter()
        for _ in range(tasks):
            with ctx.task(*deps) as t:
                t.stream_ptr()
        return (time.perf_counter() - start) / tasks * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    for reads in (0, 1, 3):  # warm the process up
        chain(args.tasks, reads)
    results = {}
    for reads in (0, 1, 3):
        best = min(chain(args.tasks, reads) for _ in range(5))
        results[f"rw+{reads}"] = best
        print(
            f"runtime cost, rw + {reads} read(s): {best:.2f} µs per task "
            f"({'compiled' if stf.__compiled__ else 'Python'})"
        )
    if args.json:
        import json

        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    if args.profile:
        import cProfile
        import pstats

        cProfile.runctx(
            "chain(args.tasks, 1)",
            globals(),
            {"args": args, "chain": chain},
            "/tmp/stflow-runtime.prof",
        )
        pstats.Stats("/tmp/stflow-runtime.prof").sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
