"""Where the microseconds of a task go: the hot path measured piece by piece.

    python benchmarks/hot_path_profile.py [--tasks 50000] [--json out.json]

The null backend (no device work), a chain of tasks with one ``rw`` dependency, as in
``runtime_overhead.py``. Each row times a prefix of the path a task takes, so the
differences between rows are the pieces: building the task, the plan and its
acquisition, the enactment and the release, the lock, the ``with`` protocol. Works
on the compiled build and on the sources (``STFLOW_PURE_PYTHON=1``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np

import stflow as stf
from stflow._core.plan import acquire, release


def best_us(run: Callable[[int], None], tasks: int, repeats: int = 7) -> float:
    run(tasks // 10)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(tasks)
        best = min(best, (time.perf_counter() - start) / tasks * 1e6)
    return best


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows: dict[str, float] = {}
    with stf.context(backend="null") as ctx:
        x = ctx.logical_data(np.zeros(16))
        deps = (x.rw(),)
        with ctx.task(*deps):
            pass  # x now lives on device 0
        runtime = ctx._runtime
        lock = runtime.lock
        probe = ctx.task(*deps)

        def whole(n: int) -> None:
            for _ in range(n):
                with ctx.task(*deps) as t:
                    t.stream_ptr()

        def fresh(n: int) -> None:  # as programs write it: a dependency per task
            for _ in range(n):
                with ctx.task(x.rw()) as t:
                    t.stream_ptr()

        def build(n: int) -> None:
            for _ in range(n):
                ctx.task(*deps)

        def runtime_work(n: int) -> None:  # acquire + release, lock held
            with lock:
                for _ in range(n):
                    plan = runtime.acquire(deps, None, probe, probe, 1)
                    runtime.release(plan, plan.stream, probe, 1)

        plan = runtime.acquire(deps, None, None, probe, 1)
        event = runtime.release(plan, plan.stream, None, 1)
        pool = runtime.root_pools.pool(plan.device)
        completed = runtime.backend.query

        def pure(n: int) -> None:  # the plan's decisions alone
            for tick in range(n):
                acquire(plan, pool, completed, tick)
                release(plan, event, None)

        def record(n: int) -> None:
            stream = plan.stream
            backend = runtime.backend
            for _ in range(n):
                backend.record(stream)

        def locking(n: int) -> None:
            for _ in range(n):
                lock.acquire()
                lock.release()

        tasks = args.tasks
        rows["whole task (with ctx.task(x.rw()) as t: t.stream_ptr())"] = best_us(
            whole, tasks
        )
        rows["  the same, a new x.rw() per task (as programs write it)"] = best_us(
            fresh, tasks
        )
        rows["building the task object (ctx.task)"] = best_us(build, tasks)
        rows["runtime acquire + release"] = best_us(runtime_work, tasks)
        rows["  of which the plan's decisions (_plan.acquire + release)"] = best_us(
            pure, tasks
        )
        rows["  of which the end event (backend.record)"] = best_us(record, tasks)
        rows["the runtime lock, taken twice"] = 2 * best_us(locking, tasks)
    whole_us = rows["whole task (with ctx.task(x.rw()) as t: t.stream_ptr())"]
    rest = (
        whole_us
        - rows["building the task object (ctx.task)"]
        - rows["runtime acquire + release"]
        - rows["the runtime lock, taken twice"]
    )
    rows["start/end around them (checks, with protocol, stream_ptr)"] = rest
    build_kind = "compiled" if stf.__compiled__ else "Python"
    print(
        f"hot path of a 1-dependency chain on the null backend ({build_kind} build), "
        "µs per task:"
    )
    for name, value in rows.items():
        print(f"  {name:<62}{value:6.2f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"build": build_kind, "rows": rows}, out, indent=2)
    return rows


if __name__ == "__main__":
    main()
