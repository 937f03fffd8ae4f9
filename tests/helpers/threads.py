"""Running test code on several host threads, under a watchdog.

``run_threads(fns)`` starts one thread per callable, joins them all, and re-raises the
first exception a thread raised (the others are attached to its notes). A thread still
running after ``timeout`` seconds is a hang: the test fails with the stacks of every
thread of the process, so the place where they wait for each other is visible.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Callable, Sequence


class Hang(AssertionError):
    """Threads did not finish in time."""


def all_stacks() -> str:
    """The current stack of every thread of the process, as text."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f"--- thread {names.get(ident, '?')} ({ident}) ---\n"
                     + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def run_threads(fns: Sequence[Callable[[], object]], timeout: float = 60.0) -> list:
    """Run every callable of ``fns`` on a thread of its own; returns their results."""
    results: list = [None] * len(fns)
    errors: list[tuple[int, BaseException]] = []
    lock = threading.Lock()

    def call(index: int, fn: Callable[[], object]) -> None:
        try:
            results[index] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            with lock:
                errors.append((index, exc))

    threads = [threading.Thread(target=call, args=(i, fn), name=f"worker-{i}",
                                daemon=True) for i, fn in enumerate(fns)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [thread.name for thread in threads if thread.is_alive()]
    if alive:
        raise Hang(f"threads {alive} still running after {timeout} s:\n{all_stacks()}")
    if errors:
        errors.sort(key=lambda item: item[0])
        first = errors[0][1]
        for index, other in errors[1:]:
            first.add_note(f"worker-{index} also raised {other!r}")
        raise first
    return results
