"""Where B5's host time goes with small tiles: the library calls against the rest.

    python benchmarks/b5_host_time.py [--n 16384] [--nb 512]

B5 in stream mode (tiles on the device, ``b5_cholesky.py``'s functions) is bound by
the host when tiles are small. This splits a run: first B5 as it is, then the same
run with the example's four bodies (``potrf``, ``trsm``, ``syrk``, ``gemm``) timed
inside ``t.run`` (the ``stflow.linalg`` call each makes), then the submission of the
factorisation against the wait for it, and last the same ``stflow.linalg`` calls in
a plain loop on one stream, with no runtime: what the libraries alone cost the host.
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

import b5_cholesky as b5

import stflow as stf
from stflow import linalg

BODIES = ("potrf", "trsm", "syrk", "gemm")


def timed_bodies(example: Any, cupy: Any, a: Any, nb: int) -> None:
    """One run with the example's bodies timed; prints seconds per call."""
    spent: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    originals = {name: getattr(example, name) for name in BODIES}

    def wrap(name: str, body: Any) -> Any:
        def timed(xp: Any, *arrays: Any) -> None:
            start = time.perf_counter()
            body(xp, *arrays)
            spent[name] += time.perf_counter() - start
            calls[name] += 1

        return timed

    for name, body in originals.items():
        setattr(example, name, wrap(name, body))
    try:
        seconds, _ = b5.stflow_seconds(cupy, example, a, nb, False)
    finally:
        for name, body in originals.items():
            setattr(example, name, body)
    tasks = sum(calls.values())
    inside = sum(spent.values())
    print(
        f"bodies timed: {seconds:.4f} s, {tasks} tasks, {seconds / tasks * 1e6:.1f} µs "
        f"per task, of which {inside:.4f} s inside the library calls"
    )
    for name in BODIES:
        if calls[name]:
            each = spent[name] / calls[name] * 1e6
            print(f"  {name}: {calls[name]} calls, {each:.1f} µs each")


def submission_and_wait(example: Any, cupy: Any, a: Any, nb: int) -> None:
    count = a.shape[0] // nb
    parts = {
        (i, j): cupy.ascontiguousarray(a[i * nb : (i + 1) * nb, j * nb : (j + 1) * nb])
        for i in range(count)
        for j in range(i + 1)
    }
    cupy.cuda.Device().synchronize()
    ctx = stf.context(backend="cuda")
    tiles = {key: ctx.logical_data(part) for key, part in parts.items()}
    start = time.perf_counter()
    example.factorize(ctx, tiles, count)
    submitted = time.perf_counter()
    ctx.finalize()
    cupy.cuda.Device().synchronize()
    done = time.perf_counter()
    print(f"submission {submitted - start:.4f} s, then the wait {done - submitted:.4f} s")


def plain_loop(cupy: Any, nb: int) -> None:
    """The bodies' library calls on one stream, no runtime: µs per call submitted
    and completed."""
    x, y, z = (cupy.ones((nb, nb)) for _ in range(3))
    spd = cupy.eye(nb) * nb
    calls = {
        "gemm": (2000, lambda: linalg.gemm(x, y, z, alpha=-1.0, beta=1.0, trans_b=True)),
        "trsm": (300, lambda: linalg.trsm(x, z, side="right", trans=True)),
        "syrk": (300, lambda: linalg.syrk(x, z, alpha=-1.0, beta=1.0)),
        "potrf (with a copy)": (
            50,
            lambda: (z.__setitem__(Ellipsis, spd), linalg.potrf(z)),
        ),
    }
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for name, (count, call) in calls.items():
            call()  # the library's setup for this size
            stream.synchronize()
            start = time.perf_counter()
            for _ in range(count):
                call()
            submitted = time.perf_counter()
            stream.synchronize()
            done = time.perf_counter()
            print(
                f"plain loop {name} {nb}: {(submitted - start) / count * 1e6:.1f} µs "
                f"submitted, {(done - start) / count * 1e6:.1f} µs completed per call"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--nb", type=int, default=512)
    args = parser.parse_args()
    import cupy

    example = b5._example()
    a = b5.spd(cupy, args.n)
    reference, _ = b5.cusolver_seconds(cupy, a)
    for _ in range(2):  # the second run counts
        seconds, _ = b5.stflow_seconds(cupy, example, a, args.nb, False)
    print(
        f"B5 n={args.n} nb={args.nb} stream mode {seconds:.4f} s, cuSOLVER "
        f"{reference:.4f} s: {reference / seconds:.3f}x"
    )
    timed_bodies(example, cupy, a, args.nb)
    submission_and_wait(example, cupy, a, args.nb)
    plain_loop(cupy, args.nb)


if __name__ == "__main__":
    main()
