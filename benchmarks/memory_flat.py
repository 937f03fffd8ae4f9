"""Memory stays flat over long runs (the runtime core v2 criteria), measured as RSS.

    python benchmarks/memory_flat.py [--backend emulated|cuda] [--json out.json]

1. 40 000 graph-mode tasks with a ``fence()`` every 100, after a warm-up of 4000;
2. 3000 ``graph_scope`` blocks of one task each, after a warm-up of 300;
3. 300 contexts on one user stream: what the stream still holds afterwards.

Criteria: RSS grows by less than 5 MiB in (1) and (2); nothing is left on the stream
in (3). The device is let catch up at the measuring points (a launched graph can
only be released once it has run).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
import weakref
from typing import Any

import numpy as np

import stflow as stf


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def body(t: Any, backend: str) -> None:
    """An increment of dependency 0, enqueued on the task stream (capturable)."""
    if backend == "emulated":
        from stflow.emulated import launch

        launch(t.stream_ptr(), lambda a: a.__iadd__(1.0), t.get_arg_cai(0))
    else:
        import cupy

        from stflow.interop.cupy import as_cupy, cupy_stream

        with cupy_stream(t.stream_ptr()):
            as_cupy(t.get_arg_cai(0)).__iadd__(1.0)
        del cupy


def epochs(backend: str, tasks: int, warmup: int) -> dict:
    with stf.context(backend=backend, use_graph=True) as ctx:
        x = ctx.logical_data(np.zeros(16))
        start = time.perf_counter()
        for i in range(warmup + tasks):
            with ctx.task(x.rw()) as t:
                body(t, backend)
            if i % 100 == 99:
                ctx.fence()
            if i + 1 == warmup:
                ctx.wait(x)
                ctx.fence()
                gc.collect()
                before = rss_mib()
        ctx.wait(x)
        ctx.fence()
        gc.collect()
        after = rss_mib()
        seconds = time.perf_counter() - start
    return {
        "tasks": tasks,
        "rss_before_mib": before,
        "rss_after_mib": after,
        "growth_mib": after - before,
        "seconds": seconds,
    }


def scopes(backend: str, blocks: int, warmup: int) -> dict:
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(np.zeros(16))
        native = sctx._runtime.mode.scopes.recorder.real

        def settle() -> None:
            stream = native.stream_from_handle(sctx.fence())
            native.synchronize(native.record(stream))
            sctx.fence()
            gc.collect()

        start = time.perf_counter()
        for i in range(warmup + blocks):
            with sctx.graph_scope():
                with sctx.task(x.rw()) as t:
                    body(t, backend)
            if i + 1 == warmup:
                settle()
                before = rss_mib()
        settle()
        after = rss_mib()
        seconds = time.perf_counter() - start
    return {
        "blocks": blocks,
        "rss_before_mib": before,
        "rss_after_mib": after,
        "growth_mib": after - before,
        "seconds": seconds,
    }


def user_stream(backend: str, contexts: int) -> dict:
    from stflow.backends import get_backend

    native = get_backend(backend)
    user = native.stream_from_handle(0)
    streams = []
    for _ in range(contexts):
        with stf.context(backend=backend, stream=0) as ctx:
            x = ctx.logical_data_zeros((4,))
            with ctx.task(x.rw()) as t:
                body(t, backend)
            streams.extend(weakref.ref(s) for s in ctx._runtime.root_pools.streams)
        del t, x
    native.synchronize(native.record(user))
    gc.collect()
    return {
        "contexts": contexts,
        "waited_entries": len(user.waited),
        "streams_kept_alive": sum(ref() is not None for ref in streams),
    }


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="emulated")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {
        "epochs": epochs(args.backend, 40_000, 4000),
        "scopes": scopes(args.backend, 3000, 300),
        "user_stream": user_stream(args.backend, 300),
    }
    e, s, u = results["epochs"], results["scopes"], results["user_stream"]
    print(
        f"40 000 graph-mode tasks, fence every 100: RSS {e['rss_before_mib']:.1f} -> "
        f"{e['rss_after_mib']:.1f} MiB (+{e['growth_mib']:.1f}; target < 5)"
    )
    print(
        f"3000 graph_scope blocks: RSS {s['rss_before_mib']:.1f} -> "
        f"{s['rss_after_mib']:.1f} MiB (+{s['growth_mib']:.1f}; target < 5)"
    )
    print(
        f"300 contexts on one user stream: {u['waited_entries']} entries left in its "
        f"waited map, {u['streams_kept_alive']} runtime streams kept alive (target 0)"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return results


if __name__ == "__main__":
    main()
