"""The cost per task of a bundle of k fields against k separate dependencies.

    python benchmarks/bundle_overhead.py [--tasks 20000] [--fields 5] [--json out.json]

On the null backend in stream mode (as ``runtime_overhead.py``: the Python cost of
submit, acquire and release alone) and on the emulated backend in graph mode (the null
backend has no graphs: there the figure is the cost of recording a task), a chain of tasks each accessing k
logical data: one read-write and k - 1 reads, passed as k dependencies (made once, or
per task as programs usually write them), as a bundle dependency made once
(``B.dep(f0=RW)``), or made per task (``B.rw()`` with k - 1 constant fields). The body takes every view (``t.get(i)``: k views, or one named
tuple), which a real body needs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import stflow as stf


def chain(tasks: int, fields: int, how: str, use_graph: bool) -> float:
    backend = "emulated" if use_graph else "null"  # null has no graph support
    with stf.context(backend=backend, use_graph=use_graph) as ctx:
        data = [ctx.logical_data(np.zeros(16)) for _ in range(fields)]
        group = ctx.bundle(
            **{f"f{k}": stf.constant(ld) if k else ld for k, ld in enumerate(data)}
        )
        made_once = group.dep(f0=stf.AccessMode.RW)
        separate = [data[0].rw(), *[ld.read() for ld in data[1:]]]
        start = time.perf_counter()
        for _ in range(tasks):
            if how == "deps":
                with ctx.task(*separate) as t:
                    for k in range(fields):
                        t.get(k)
            elif how == "deps per task":
                with ctx.task(data[0].rw(), *[ld.read() for ld in data[1:]]) as t:
                    for k in range(fields):
                        t.get(k)
            elif how == "bundle":
                with ctx.task(made_once) as t:
                    t.get(0)
            else:
                with ctx.task(group.rw()) as t:
                    t.get(0)
        return (time.perf_counter() - start) / tasks * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--fields", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {}
    for use_graph in (False, True):
        mode = "graph" if use_graph else "stream"
        for how in ("deps", "deps per task", "bundle", "bundle per task"):
            chain(args.tasks // 4, args.fields, how, use_graph)  # warm up
            best = min(chain(args.tasks, args.fields, how, use_graph) for _ in range(5))
            results[f"{mode}/{how}"] = best
            print(
                f"{mode:6} {how:16} k={args.fields}: {best:7.2f} µs per task "
                f"({'compiled' if stf.__compiled__ else 'Python'})"
            )
    if args.json:
        import json

        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
