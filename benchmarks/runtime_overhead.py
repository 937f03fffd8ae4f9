"""The runtime's own cost per task, with a backend that does nothing.

    python benchmarks/runtime_overhead.py [--tasks 20000] [--profile]

Replaces the device with a null backend (no threads, no driver calls), so the
figures are the Python cost of submit → acquire → release alone: the part of B1's
overhead that stflow itself adds on top of the CUDA calls a task needs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import stflow as stf
from stflow.backends._base import Allocation, Backend, Event, Stream


class NullBackend(Backend):
    """The backend contract, doing nothing."""

    name = "null"
    bodies_wait_on_host = False

    def __init__(self) -> None:
        self._streams = 0

    @property
    def device_count(self) -> int:
        return 2

    def current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        pass

    def create_stream(self, device: int) -> Stream:
        self._streams += 1
        return Stream(self._streams, device)

    def destroy_stream(self, stream: Stream) -> None:
        pass

    def stream_from_handle(self, handle: int) -> Stream:
        return Stream(handle, 0)

    def record(self, stream: Stream) -> Event:
        stream.recorded += 1
        event = Event(stream, stream.recorded)
        stream.last_event = event
        return event

    def wait(self, stream: Stream, event: Event) -> None:
        pass

    def query(self, event: Event) -> bool:
        return True

    def synchronize(self, event: Event) -> None:
        pass

    def allocate(self, device, nbytes, stream, dtype):  # type: ignore[no-untyped-def]
        return Allocation(0x1000, nbytes, device, dtype)

    def free(self, allocation, stream):  # type: ignore[no-untyped-def]
        pass

    def locate(self, ptr: int) -> int:
        return -1

    def copy(self, dst, src, nbytes, stream):  # type: ignore[no-untyped-def]
        pass

    def fill(self, ptr, nbytes, pattern, stream):  # type: ignore[no-untyped-def]
        pass

    def launch_host_func(self, stream, fn):  # type: ignore[no-untyped-def]
        pass

    def task_view(self, allocation, offset, shape, dtype, readonly):  # type: ignore
        return None


def install() -> None:
    """Make ``backend="null"`` resolve to the null backend."""
    import stflow._context as context_module
    from stflow import backends
    null = NullBackend()
    original = backends.get_backend

    def get_backend(name: str, *, notify: bool = True):  # type: ignore[no-untyped-def]
        return null if name == "null" else original(name, notify=notify)

    backends.get_backend = get_backend
    context_module.get_backend = get_backend  # type: ignore[attr-defined]


def chain(tasks: int, reads: int) -> float:
    with stf.context(backend="null") as ctx:
        x = ctx.logical_data(np.zeros(16))
        inputs = [ctx.logical_data(np.zeros(16)) for _ in range(reads)]
        deps = [x.rw(), *[i.read() for i in inputs]]
        start = time.perf_counter()
        for _ in range(tasks):
            with ctx.task(*deps) as t:
                t.stream_ptr()
        return (time.perf_counter() - start) / tasks * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    install()
    chain(1000, 0)
    for reads in (0, 1, 3):
        best = min(chain(args.tasks, reads) for _ in range(3))
        print(f"runtime cost, rw + {reads} read(s): {best:.2f} µs per task")
    if args.profile:
        import cProfile
        import pstats
        cProfile.runctx("chain(args.tasks, 1)", globals(), {"args": args, "chain": chain},
                        "/tmp/stflow-runtime.prof")
        pstats.Stats("/tmp/stflow-runtime.prof").sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
