"""The cost of the distributed layer per task, on every rank, and exchanges.

    mpiexec -n N python benchmarks/distributed_overhead.py [--tasks 4000]
    mpiexec -n N python benchmarks/distributed_overhead.py --case exchange
    mpiexec -n 2 python benchmarks/distributed_overhead.py --case bandwidth [--backend cuda]
    mpiexec -n N python benchmarks/distributed_overhead.py --case private

``--case local`` (the default): a ``distributed_context`` on the null backend (no
device work); task ``i`` writes the data owned by rank ``i % N``, so every task
executes where its data lives (no transfer). Every rank unrolls every task: the figure
per task *submitted* is what a rank pays for the whole flow; it is split into the
tasks that execute on the rank and those that only update its bookkeeping (measured
apart: all tasks on this rank, then all tasks on another rank), to compare with a
single-process task (``stf.context``) measured on the same rank; each figure the best
of ``--repeats`` rounds, the four measures interleaved (a shared host's noise).

``--case exchange``: real exchanges on the emulated backend. Every iteration, each
rank runs ``--work-tasks`` tasks of ``--work-us`` µs of device time on its own data
(a sleep on the emulated device), then writes a vector of ``--bytes`` bytes from
it, which the next rank (a ring) reads in a task of its own. Prints the wall time to
the end of ``finalize()`` and the time the rank's program spent submitting (the rest
of the wall time is the device finishing after the last submission).

``--case private``: a flow whose task ``i`` works on rank ``i % N``'s data, submitted
whole to the distributed context, against the same flow pruned by the program: each
rank submits only its own tasks, on data only it touches, to its local context
(``ctx.local``).

``--case bandwidth`` (two ranks): rank 0 writes a vector it owns, rank 1 reads it, one
transfer per repeat, against raw ``comm.Send`` / ``comm.Recv`` of a NumPy buffer of
the same size: the bandwidth of the layer's exchanges (including the copy out of the
source's local data, ``wait``, and the copy into the destination's, the landing; on
CUDA those are device-host copies) against MPI's own; on CUDA also against the same
device data staged by hand through a pinned buffer (copy out, ``Send``, ``Recv``,
copy in); ``--pieces-mib`` compares piece sizes (``STFLOW_MPI_PIECE``);
``--profile DIR`` profiles the layer's transfers instead (``cProfile``, a report
per rank and size in ``DIR/rank<N>-<bytes>b.txt``; the time per transfer goes up
under the profiler, and compiled modules show as single calls:
``STFLOW_PURE_PYTHON=1`` details them).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
from mpi4py import MPI

import stflow as stf


def _per_task(ctx: Any, data: list, tasks: int) -> float:
    start = time.perf_counter()
    for i in range(tasks):
        with ctx.task(data[i % len(data)].rw()):
            pass
    return (time.perf_counter() - start) / tasks


def local_case(comm: MPI.Comm, tasks: int, repeats: int = 5) -> None:
    size, rank = comm.Get_size(), comm.Get_rank()
    mixed = here = elsewhere = single = float("inf")
    with (
        stf.distributed_context(comm, backend="null") as ctx,
        stf.context(backend="null") as plain,
    ):
        data = [ctx.logical_data(np.zeros(16), owner=r) for r in range(size)]
        x = plain.logical_data(np.zeros(16))
        for _ in range(repeats):  # interleaved, the best of each: a noisy host
            comm.Barrier()
            mixed = min(mixed, _per_task(ctx, data, tasks))  # 1/N execute here
            comm.Barrier()
            here = min(here, _per_task(ctx, [data[rank]], tasks))  # all here
            comm.Barrier()
            if size > 1:
                elsewhere = min(
                    elsewhere, _per_task(ctx, [data[(rank + 1) % size]], tasks)
                )
            comm.Barrier()
            single = min(single, _per_task(plain, [x], tasks))
    if size == 1:
        elsewhere = 0.0
    rows = comm.gather((mixed, here, elsewhere, single), root=0)
    if rank == 0:
        worst = [max(row[i] for row in rows) * 1e6 for i in range(4)]
        print(
            f"ranks={size}: {worst[0]:.2f} µs per task submitted (the slowest rank; "
            f"every rank unrolls every task): {worst[1]:.2f} µs for a task "
            f"executing on the rank, {worst[2]:.2f} µs for one executing elsewhere; "
            f"single-process task {worst[3]:.2f} µs"
        )


def private_case(comm: MPI.Comm, tasks: int) -> None:
    """A flow of ``tasks`` tasks, task ``i`` on rank ``i % N``'s data, submitted
    whole to the distributed context (every rank unrolls every task), then pruned:
    each rank gives only its own tasks, on data only it touches, to its local
    context ``ctx.local``."""
    size, rank = comm.Get_size(), comm.Get_rank()
    with stf.distributed_context(comm, backend="null") as ctx:
        data = [ctx.logical_data(np.zeros(16), owner=r) for r in range(size)]
        mine = ctx.local.logical_data(np.zeros(16))
        comm.Barrier()
        start = time.perf_counter()
        for i in range(tasks):
            with ctx.task(data[i % size].rw()):
                pass
        unrolled = time.perf_counter() - start
        comm.Barrier()
        start = time.perf_counter()
        for i in range(tasks):
            if i % size == rank:
                with ctx.local.task(mine.rw()):
                    pass
        pruned = time.perf_counter() - start
        comm.Barrier()
    rows = comm.gather((unrolled, pruned), root=0)
    if rank == 0:
        worst = [max(row[i] for row in rows) for i in range(2)]
        print(
            f"ranks={size}: a flow of {tasks} tasks, each rank executing "
            f"{tasks // size}: the whole flow unrolled on every rank "
            f"{worst[0] * 1e3:.1f} ms (slowest rank), pruned to each rank's own "
            f"tasks on its local context {worst[1] * 1e3:.1f} ms "
            f"({worst[0] / worst[1]:.1f}x)"
        )


def exchange_case(
    comm: MPI.Comm, iterations: int, work_tasks: int, work_us: float, nbytes: int
) -> None:
    size, rank = comm.Get_size(), comm.Get_rank()

    def work(xp: object, a: np.ndarray) -> None:
        time.sleep(work_us * 1e-6)  # device time (the GIL is released)
        a += 1.0

    def pack(xp: object, message: np.ndarray, a: np.ndarray) -> None:
        message[...] = a[0]

    def consume(xp: object, total: np.ndarray, message: np.ndarray) -> None:
        total += message[: total.size]

    comm.Barrier()
    start = time.perf_counter()
    with stf.distributed_context(comm, backend="emulated") as ctx:
        state = [ctx.logical_data(np.zeros(16), owner=r) for r in range(size)]
        totals = [ctx.logical_data(np.zeros(16), owner=r) for r in range(size)]
        messages = [ctx.logical_data_empty((nbytes // 8,), owner=r) for r in range(size)]
        for _ in range(iterations):
            for r in range(size):
                for _ in range(work_tasks):
                    with ctx.task(state[r].rw()) as t:
                        t.run(work)
                with ctx.task(messages[r].write(), state[r].read()) as t:
                    t.run(pack)
            for r in range(size):
                with ctx.task(totals[(r + 1) % size].rw(), messages[r].read()) as t:
                    t.run(consume)
        submitted = time.perf_counter() - start
        result = ctx.wait(totals[0])
    wall = time.perf_counter() - start
    expected = sum(range(work_tasks, work_tasks * iterations + 1, work_tasks))
    rows = comm.gather((wall, submitted), root=0)
    if rank == 0:
        assert result[0] == expected, (result[0], expected)
        device = iterations * work_tasks * work_us * 1e-6
        print(
            f"ranks={size}: {iterations} iterations of {work_tasks} tasks x "
            f"{work_us:.0f} µs + a {nbytes}-byte exchange to the next rank: wall "
            f"{max(r[0] for r in rows):.3f} s (device work per rank {device:.3f} s), "
            f"submission done after {max(r[1] for r in rows):.3f} s"
        )


def _raw_host(comm: MPI.Comm, count: int, repeats: int) -> float:
    """Seconds for ``repeats`` raw ``Send``/``Recv`` of a NumPy buffer, 0 -> 1."""
    rank = comm.Get_rank()
    buffer = np.zeros(count)
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(repeats):
        if rank == 0:
            comm.Send(buffer, dest=1, tag=7)
        elif rank == 1:
            comm.Recv(buffer, source=0, tag=7)
    comm.Barrier()
    return time.perf_counter() - start


def _raw_staged(comm: MPI.Comm, count: int, repeats: int) -> float:
    """The same for a CuPy array on each rank, staged by hand through a pinned
    buffer (what one writes without CUDA-aware MPI): copy out, send, receive, copy
    in, one after the other."""
    import cupy
    import cupyx

    rank = comm.Get_rank()
    device, pinned = cupy.zeros(count), cupyx.empty_pinned(count)
    stream = cupy.cuda.get_current_stream()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(repeats):
        if rank == 0:
            device.get(out=pinned)  # blocking
            comm.Send(pinned, dest=1, tag=7)
        elif rank == 1:
            comm.Recv(pinned, source=0, tag=7)
            device.set(pinned)
    stream.synchronize()
    comm.Barrier()
    return time.perf_counter() - start


def _layer(comm: MPI.Comm, count: int, repeats: int, backend: str) -> float:
    """The same through a distributed context: rank 0 rewrites a vector it owns,
    rank 1 reads it."""
    with stf.distributed_context(comm, backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(count), owner=0)
        seen = ctx.logical_data(np.zeros(1), owner=1)
        with ctx.task(seen.rw(), x.read(), rank=1):  # a first exchange
            pass
        ctx.wait(seen)  # not fence(), which does not wait for the devices
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(repeats):
            with ctx.task(x.rw(), rank=0):  # a new version on rank 0
                pass
            with ctx.task(seen.rw(), x.read(), rank=1):  # brought to rank 1
                pass
        ctx.wait(seen)  # after the last copy in and its task (8 bytes)
        comm.Barrier()
        return time.perf_counter() - start


def profile_case(
    comm: MPI.Comm, sizes: list[int], repeats: int, backend: str, directory: str
) -> None:
    """``cProfile`` of ``repeats`` transfers through the layer, per rank."""
    import cProfile
    import pstats

    os.makedirs(directory, exist_ok=True)
    for nbytes in sizes:
        _layer(comm, nbytes // 8, 5, backend)  # warm up
        profile = cProfile.Profile()
        profile.enable()
        seconds = _layer(comm, nbytes // 8, repeats, backend)
        profile.disable()
        if comm.Get_rank() == 0:
            print(
                f"{nbytes / (1 << 20):7.3g} MiB under the profiler: "
                f"{seconds / repeats * 1e6:.0f} µs per transfer",
                flush=True,
            )
        path = os.path.join(directory, f"rank{comm.Get_rank()}-{nbytes}b.txt")
        with open(path, "w") as report:
            stats = pstats.Stats(profile, stream=report)
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(40)


def bandwidth_case(
    comm: MPI.Comm, sizes: list[int], repeats: int, backend: str, pieces: list[int]
) -> None:
    """Rank 0 rewrites a vector, rank 1 reads it: one transfer per repeat, against
    raw ``comm.Send`` / ``comm.Recv`` of a NumPy buffer of the same size (and, on
    CUDA, of the same device data staged by hand), for each piece size."""
    if comm.Get_size() < 2:
        raise SystemExit("--case bandwidth needs two ranks")
    cuda = backend == "cuda"
    for nbytes in sizes:
        count = nbytes // 8
        raw = _raw_host(comm, count, repeats)
        staged = _raw_staged(comm, count, repeats) if cuda else None
        layers = []
        for piece in pieces:
            os.environ["STFLOW_MPI_PIECE"] = str(piece or 1 << 62)
            layers.append(_layer(comm, count, repeats, backend))
        if comm.Get_rank() == 0:
            gb = repeats * nbytes / 1e9
            line = f"{nbytes / (1 << 20):7.3g} MiB: raw mpi4py host {gb / raw:6.2f} GB/s"
            if staged is not None:
                line += f", device staged by hand {gb / staged:6.2f} GB/s"
            for piece, layer in zip(pieces, layers):
                name = f"pieces of {piece >> 10} KiB" if piece else "one message"
                line += (
                    f"; stflow ({backend}, {name}) {gb / layer:6.2f} GB/s, "
                    f"x{raw / layer:.2f} host"
                )
                if staged is not None:
                    line += f", x{staged / layer:.2f} by hand"
            print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case", choices=("local", "exchange", "bandwidth", "private"), default="local"
    )
    parser.add_argument(
        "--sizes-mib",
        type=float,
        nargs="+",
        default=[1, 16, 64],
        help="message sizes of --case bandwidth",
    )
    parser.add_argument(
        "--pieces-mib",
        type=float,
        nargs="+",
        default=[4],
        help="STFLOW_MPI_PIECE values of --case bandwidth (0: one message per value)",
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="--case bandwidth: profile the layer's transfers instead",
    )
    parser.add_argument(
        "--backend",
        default="emulated",
        help="the local contexts' backend (--case bandwidth)",
    )
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--work-tasks", type=int, default=4)
    parser.add_argument("--work-us", type=float, default=500.0)
    parser.add_argument("--bytes", type=int, default=1 << 16)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if args.case == "local":
        local_case(comm, args.tasks, args.repeats)
    elif args.case == "private":
        private_case(comm, args.tasks)
    elif args.case == "bandwidth" and args.profile:
        profile_case(
            comm,
            [int(m * (1 << 20)) for m in args.sizes_mib],
            args.repeats,
            args.backend,
            args.profile,
        )
    elif args.case == "bandwidth":
        bandwidth_case(
            comm,
            [int(m * (1 << 20)) for m in args.sizes_mib],
            args.repeats,
            args.backend,
            [int(m * (1 << 20)) for m in args.pieces_mib],
        )
    else:
        exchange_case(comm, args.iterations, args.work_tasks, args.work_us, args.bytes)


if __name__ == "__main__":
    main()
