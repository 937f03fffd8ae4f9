"""B2: graph-mode cost per task, for epochs of 500, 5000 and 50000 tasks.

    python benchmarks/b2_graph_mode.py [--backend cuda|emulated] [--epochs 500 5000 50000]
                                       [--json out.json] [--profile]

``context(use_graph=True)``, the B1 workloads: a chain of tasks with one ``rw``
dependency (plus 1 or 3 ``read`` ones), each launching one empty kernel on its stream
(``stflow.emulated.launch`` of a no-op on the emulated backend); the whole epoch is one
graph, instantiated and launched by ``finalize()``. Reported: µs per task from the
first submission to the end of ``finalize()`` (``total``), of which recording
(``record``); the stream-mode run of the same chain in the same process for reference.
Graph mode launches a long epoch in parts of ``stflow._graph.scopes.EPOCH_TASKS`` tasks
(``--epoch-tasks`` sets it). Targets: ≤ 10
µs per task, flat as the epoch grows; no more than stream mode (issue 27).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def kernel_launcher(backend: str) -> Callable[[Any], None]:
    """What each task body does: one empty kernel on the task stream."""
    if backend == "emulated":
        from stflow.emulated import launch

        def noop() -> None:
            pass

        return lambda t: launch(t.stream_ptr(), noop)
    from _cuda import compile_empty_kernel, driver

    function = compile_empty_kernel()
    cu_launch = driver().cuLaunchKernel
    return lambda t: cu_launch(function, 1, 1, 1, 1, 1, 1, 0, int(t.stream_ptr()), 0, 0)


def chain(
    backend: str, body: Callable[[Any], None], tasks: int, reads: int, use_graph: bool
) -> tuple[float, float]:
    import stflow as stf

    ctx = stf.context(backend=backend, use_graph=use_graph)
    x = ctx.logical_data(np.zeros(16))
    inputs = [ctx.logical_data(np.zeros(16)) for _ in range(reads)]
    with ctx.task(x.rw(), *[i.rw() for i in inputs]):
        pass
    ctx.fence()  # data on the device, epoch closed
    deps = [x.rw(), *[i.read() for i in inputs]]
    start = time.perf_counter()
    for _ in range(tasks):
        with ctx.task(*deps) as t:
            body(t)
    recorded = time.perf_counter()
    ctx.finalize()
    return recorded - start, time.perf_counter() - start


def measure(
    backend: str,
    body: Callable[[Any], None],
    tasks: int,
    reads: int,
    use_graph: bool,
    repeats: int,
) -> dict:
    chain(backend, body, min(tasks, 500), reads, use_graph)  # warm up
    runs = [chain(backend, body, tasks, reads, use_graph) for _ in range(repeats)]
    return {
        "record_us": statistics.median(r[0] for r in runs) / tasks * 1e6,
        "total_us": statistics.median(r[1] for r in runs) / tasks * 1e6,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--epochs", type=int, nargs="+", default=[500, 5000, 50000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--epoch-tasks",
        type=int,
        default=None,
        help="launch an epoch every N tasks (stflow._graph.scopes.EPOCH_TASKS)",
    )
    args = parser.parse_args(argv)
    if args.epoch_tasks is not None:
        import stflow._graph.scopes

        stflow._graph.scopes.EPOCH_TASKS = args.epoch_tasks
    body = kernel_launcher(args.backend)
    if args.profile:
        import cProfile
        import pstats

        for graph_mode in (True, False):  # what recording costs beside submission
            print(f"== profile: {'graph' if graph_mode else 'stream'} mode, 5000 tasks")
            cProfile.runctx(
                "chain(args.backend, body, 5000, 0, graph_mode)",
                globals(),
                {"args": args, "body": body, "graph_mode": graph_mode},
                "/tmp/stflow-b2.prof",
            )
            pstats.Stats("/tmp/stflow-b2.prof").sort_stats("tottime").print_stats(18)
    rows: dict[str, Any] = {}
    print(f"{'workload':<22}{'graph':>9}{'record':>9}{'stream':>9}   µs per task")
    for reads, name in ((0, "chain_1dep"), (1, "chain_2deps"), (3, "chain_4deps")):
        for tasks in args.epochs:
            if reads and tasks > 5000:
                continue
            repeats = 1 if tasks >= 50000 else args.repeats
            row = {
                "graph": measure(args.backend, body, tasks, reads, True, repeats),
                "stream": measure(args.backend, body, tasks, reads, False, repeats),
            }
            key = f"{name}_{tasks}"
            rows[key] = row
            graph = row["graph"]
            print(
                f"{key:<22}{graph['total_us']:>9.2f}{graph['record_us']:>9.2f}"
                f"{row['stream']['total_us']:>9.2f}"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    return rows


if __name__ == "__main__":
    main()
