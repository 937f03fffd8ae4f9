"""Does instantiating a CUDA graph on one thread slow down capturing on another?

    python benchmarks/instantiate_threads.py [--nodes 4096]

What ``STFLOW_GRAPH_LAUNCHER=thread`` (``stflow/_graph/launcher.py``) relies on: graph
mode records the next epoch on the submitting thread while the launcher's thread
instantiates the last one. Raw ``cuda.bindings``, empty kernels: µs per launch on a
stream (with and without an event record after each), per launch captured into a
graph, per node instantiated (at several graph sizes) and updated; then the same
capture and launches while another thread instantiates graphs of ``--nodes`` nodes in a
loop (the driver and the GIL shared).
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from _cuda import check, compile_empty_kernel, driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    args = parser.parse_args(argv)
    cu = driver()
    function = compile_empty_kernel()
    context = check(cu.cuCtxGetCurrent())
    stream = check(cu.cuStreamCreate(1))
    relaxed = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    nodes = args.nodes
    clock = time.perf_counter

    def launches(count: int, record: bool = False) -> float:
        event = check(cu.cuEventCreate(2))
        start = clock()
        for _ in range(count):
            cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, 0, 0)
            if record:
                cu.cuEventRecord(event, stream)
        elapsed = clock() - start
        check(cu.cuStreamSynchronize(stream))
        return elapsed / count * 1e6

    def capture(count: int) -> tuple[Any, float]:
        check(cu.cuStreamBeginCapture(stream, relaxed))
        start = clock()
        for _ in range(count):
            cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, 0, 0)
        elapsed = clock() - start
        return check(cu.cuStreamEndCapture(stream)), elapsed / count * 1e6

    def instantiate(graph: Any) -> tuple[Any, float]:
        start = clock()
        executable = check(cu.cuGraphInstantiate(graph, 0))
        return executable, clock() - start

    for round_ in range(2):
        print(
            f"round {round_}: stream launches {launches(nodes):.2f} µs, with an event "
            f"record after each {launches(nodes, True):.2f} µs"
        )
        graph, per_launch = capture(nodes)
        executable, seconds = instantiate(graph)
        print(
            f"  captured {per_launch:.2f} µs per launch; instantiated in "
            f"{seconds * 1e3:.2f} ms, {seconds / nodes * 1e6:.2f} µs per node"
        )
        for size in (256, 1024):
            small, _ = capture(size)
            small_executable, seconds = instantiate(small)
            print(f"  {size} nodes: {seconds / size * 1e6:.2f} µs per node instantiated")
            check(cu.cuGraphExecDestroy(small_executable))
            check(cu.cuGraphDestroy(small))
        start = clock()
        check(cu.cuGraphLaunch(executable, stream))
        check(cu.cuStreamSynchronize(stream))
        print(f"  launch and run: {(clock() - start) * 1e3:.2f} ms")
        start = clock()
        result = cu.cuGraphExecUpdate(executable, graph)[0]
        print(f"  update: {(clock() - start) * 1e3:.2f} ms ({result})")
        stop = threading.Event()
        durations: list[float] = []

        def instantiating(stop: threading.Event, graph: Any, durations: list) -> None:
            check(cu.cuCtxSetCurrent(context))
            while not stop.is_set():
                other, seconds = instantiate(graph)
                durations.append(seconds)
                check(cu.cuGraphExecDestroy(other))

        worker = threading.Thread(target=instantiating, args=(stop, graph, durations))
        worker.start()
        time.sleep(0.01)
        second, per_launch = capture(nodes)
        streamed = launches(nodes)
        stop.set()
        worker.join()
        print(
            f"  while another thread instantiates: captured {per_launch:.2f} µs per "
            f"launch, stream launches {streamed:.2f} µs; its instantiations "
            f"{[round(d * 1e3, 1) for d in durations]} ms"
        )
        check(cu.cuGraphExecDestroy(executable))
        check(cu.cuGraphDestroy(graph))
        check(cu.cuGraphDestroy(second))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
