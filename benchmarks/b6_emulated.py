"""B6 and the emulated backend's per-task cost.

    python benchmarks/b6_emulated.py [--tasks 5000] [--programs 1000] [--json out.json]

Reports, on the emulated backend, the host cost per task of empty task bodies (a
chain with one ``rw`` dependency, plus 1 and 3 ``read`` dependencies, independent tasks
round-robin over 8 logical data, host callbacks, a chain of ``t.run`` tasks and the
same chain with no body: two reads and one ``rw``), each the median of 5 repeats after
a warm-up, and B6: the time to run ``--programs`` random programs of the differential
test against their oracle (target: < 60 s on the 2-core CI machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import stflow as stf
from stflow.testing import check_program, generate_program


def _per_task(workload, tasks: int, repeats: int = 5) -> dict:
    workload(tasks // 10)  # warm up
    submit, total = [], []
    for _ in range(repeats):
        s, t = workload(tasks)
        submit.append(s / tasks * 1e6)
        total.append(t / tasks * 1e6)
    return {"submit_us": statistics.median(submit), "total_us": statistics.median(total)}


def chain(reads: int):
    def run(tasks: int):
        with stf.context(backend="emulated") as ctx:
            x = ctx.logical_data(np.zeros(16))
            inputs = [ctx.logical_data(np.zeros(16)) for _ in range(reads)]
            start = time.perf_counter()
            for _ in range(tasks):
                with ctx.task(x.rw(), *[i.read() for i in inputs]):
                    pass
            submitted = time.perf_counter()
        return submitted - start, time.perf_counter() - start

    return run


def run_chain(body: bool):
    """Tasks reading two logical data and writing a third, with an empty ``t.run``
    body (``body``) or none: what a ``t.run`` body costs on this backend."""

    def empty(xp, a, b, c):
        pass

    def run(tasks: int):
        with stf.context(backend="emulated") as ctx:
            a, b, c = (ctx.logical_data(np.zeros(64)) for _ in range(3))
            with ctx.task(a.rw(), b.rw(), c.rw()):
                pass
            ctx.fence()
            start = time.perf_counter()
            for _ in range(tasks):
                with ctx.task(a.read(), b.read(), c.rw()) as t:
                    if body:
                        t.run(empty)
            submitted = time.perf_counter()
        return submitted - start, time.perf_counter() - start

    return run


def independent(tasks: int):
    with stf.context(backend="emulated") as ctx:
        data = [ctx.logical_data(np.zeros(16)) for _ in range(8)]
        start = time.perf_counter()
        for i in range(tasks):
            with ctx.task(data[i % 8].rw()):
                pass
        submitted = time.perf_counter()
    return submitted - start, time.perf_counter() - start


def host_callbacks(tasks: int):
    with stf.context(backend="emulated") as ctx:
        x = ctx.logical_data(np.zeros(16))
        start = time.perf_counter()
        for _ in range(tasks):
            ctx.host_launch(x.rw(), fn=_nothing)
        submitted = time.perf_counter()
    return submitted - start, time.perf_counter() - start


def _nothing(*_):
    pass


def differential(programs: int) -> float:
    devices = stf.backends.get_backend("emulated").device_count
    start = time.perf_counter()
    for seed in range(programs):
        check_program(generate_program(seed, devices), "emulated")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    results = {
        "chain_1dep": _per_task(chain(0), args.tasks),
        "chain_2deps": _per_task(chain(1), args.tasks),
        "chain_4deps": _per_task(chain(3), args.tasks),
        "independent_8": _per_task(independent, args.tasks),
        "host_launch_chain": _per_task(host_callbacks, args.tasks),
        "no_body_3deps": _per_task(run_chain(False), args.tasks),
        "run_body_3deps": _per_task(run_chain(True), args.tasks),
    }
    print(f"{'workload':<20}{'submit µs/task':>16}{'total µs/task':>16}")
    for name, row in results.items():
        print(f"{name:<20}{row['submit_us']:>16.1f}{row['total_us']:>16.1f}")
    seconds = differential(args.programs)
    results["b6_differential"] = {
        "programs": args.programs,
        "seconds": seconds,
        "target_seconds": 60,
    }
    print(f"B6: {args.programs} differential programs in {seconds:.1f} s (target < 60 s)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return results


if __name__ == "__main__":
    main()
