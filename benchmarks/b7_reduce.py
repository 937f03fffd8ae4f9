"""B7: reductions — N tasks accumulating into one vector, ``reduce`` against ``rw``.

    python benchmarks/b7_reduce.py [--backend cuda] [--tasks 32] [--size 4096]
                                   [--steps 4000] [--repeats 5] [--json out]

Each task adds its own contribution to one vector ``x``: one kernel of a single
256-thread block iterating ``--steps`` times over the vector (latency-bound: it uses
one multiprocessor of the device), accumulating into the task's view. With ``x.rw()``
every task waits for the previous one; with ``x.reduce("sum")`` the tasks order
against nothing, run on the streams (and devices) of their places at once, and their
private results are combined before ``x`` is read. Tasks go to the devices in turn.
The time is submission to the value of ``x`` on the host (``ctx.wait``), the median of
``--repeats`` runs after one warm-up; both versions must give the same vector. On the
emulated backend the figures say nothing about speed (it checks the script).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

_KERNEL = r"""
extern "C" __global__ void contribute(float* x, unsigned int n, float seed,
                                      unsigned int steps)
{
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
        float term = seed;
        for (unsigned int s = 0; s < steps; ++s)
            term = term * 0.5f + 0.5f;
        x[i] += term;
    }
}
"""


def run(stf, backend: str, tasks: int, size: int, steps: int, mode: str) -> tuple:
    """Seconds for one run of ``tasks`` accumulating tasks, and the vector."""
    devices = stf.context(backend=backend)
    count = devices._runtime.device_count
    devices.finalize()
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(size, dtype=np.float32), name="x")
        start = time.perf_counter()
        for k in range(tasks):
            dep = x.reduce("sum") if mode == "reduce" else x.rw()
            with ctx.task(stf.exec_place.device(k % count), dep) as t:
                _contribute(backend, t, k, steps, accumulate=mode == "rw")
        value = ctx.wait(x)
        return time.perf_counter() - start, value


def _contribute(backend: str, t, k: int, steps: int, accumulate: bool) -> None:
    """Task ``k``'s contribution, added to its view by one single-block kernel."""
    if backend == "cuda":
        from stflow.testing import cupy_array, cupy_stream

        kernel = _cuda_kernel()
        with cupy_stream(t.stream_ptr()):
            view = cupy_array(t.get_arg_cai(0))
            kernel(
                (1,),
                (256,),
                (view, np.uint32(view.size), np.float32(1.0 + k % 7), np.uint32(steps)),
            )
        return
    from stflow.emulated import launch

    def body(view):
        term = np.full(view.shape, 1.0 + k % 7, dtype=view.dtype)
        for _ in range(min(steps, 50)):  # the figures mean nothing here
            term = term * np.float32(0.5) + np.float32(0.5)
        view += term

    launch(t.stream_ptr(), body, t.get_arg_cai(0))


_compiled: list = []


def _cuda_kernel():
    if not _compiled:
        import cupy

        _compiled.append(cupy.RawKernel(_KERNEL, "contribute"))
    return _compiled[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    import stflow as stf

    results = {}
    values = {}
    for mode in ("rw", "reduce"):
        run(stf, args.backend, args.tasks, args.size, args.steps, mode)  # warm up
        times = []
        for _ in range(args.repeats):
            seconds, values[mode] = run(
                stf, args.backend, args.tasks, args.size, args.steps, mode
            )
            times.append(seconds)
        results[mode] = statistics.median(times)
    np.testing.assert_allclose(values["reduce"], values["rw"], rtol=1e-5)
    ratio = results["rw"] / results["reduce"]
    probe = stf.context(backend=args.backend)
    devices = probe._runtime.device_count
    probe.finalize()
    print(
        f"B7 reduce vs rw, {args.backend}, {devices} device(s): {args.tasks} tasks, "
        f"{args.steps} steps over {args.size} floats: rw {results['rw'] * 1e3:.2f} ms, "
        f"reduce {results['reduce'] * 1e3:.2f} ms -> reduce is {ratio:.2f}x faster"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "backend": args.backend,
                    "devices": devices,
                    "tasks": args.tasks,
                    "size": args.size,
                    "steps": args.steps,
                    "rw_seconds": results["rw"],
                    "reduce_seconds": results["reduce"],
                    "speedup": ratio,
                },
                out,
                indent=2,
            )


if __name__ == "__main__":
    main()
