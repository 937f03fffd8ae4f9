"""The cost of the distributed layer per task, on every rank.

    mpiexec -n N python benchmarks/distributed_overhead.py [--tasks 4000]

A ``distributed_context`` on the null backend (no device work); task ``i`` writes the
data owned by rank ``i % N``, so every task executes where its data lives (no
transfer). Every rank unrolls every task; the figure per task *submitted* is what a
rank pays for the whole flow, to compare with a single-process task
(``stf.context``) measured on the same rank.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import stflow as stf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4000)
    tasks = parser.parse_args().tasks
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    with stf.distributed_context(comm, backend="null") as ctx:
        data = [ctx.logical_data(np.zeros(16), owner=r) for r in range(size)]
        comm.Barrier()
        start = time.perf_counter()
        for i in range(tasks):
            with ctx.task(data[i % size].rw()):
                pass
        distributed = (time.perf_counter() - start) / tasks
        comm.Barrier()
    with stf.context(backend="null") as plain:
        x = plain.logical_data(np.zeros(16))
        start = time.perf_counter()
        for _ in range(tasks):
            with plain.task(x.rw()):
                pass
        single = (time.perf_counter() - start) / tasks
    rows = comm.gather((distributed, single), root=0)
    if rank == 0:
        worst = max(r[0] for r in rows) * 1e6
        plain_us = max(r[1] for r in rows) * 1e6
        print(f"ranks={size}: {worst:.2f} µs per task submitted (the slowest rank; "
              f"every rank unrolls every task); single-process task {plain_us:.2f} µs")


if __name__ == "__main__":
    main()
