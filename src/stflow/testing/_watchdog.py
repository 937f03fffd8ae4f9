"""Running callables on threads of their own under a watchdog.

:func:`run_threads` runs each callable on a thread of its own and returns their
results, or raises the first exception a thread raised (the others in its notes). A
thread still running after the timeout is a failure too, :class:`Hang`, whose message
holds the stacks of every thread of the process (:func:`all_stacks`): a deadlock shows
where each thread waits.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Hang", "all_stacks", "run_threads"]


class Hang(AssertionError):
    """Threads did not finish in time."""


def all_stacks() -> str:
    """The current stack of every thread of the process, as text."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(
            f"--- thread {names.get(ident, '?')} ({ident}) ---\n"
            + "".join(traceback.format_stack(frame))
        )
    return "\n".join(parts)


def run_threads(fns: Sequence[Callable[[], Any]], timeout: float = 60.0) -> list[Any]:
    """Run every callable of ``fns`` on a thread of its own; return their results.

    Raises
    ------
    Hang
        A thread is still running after ``timeout`` seconds (the message holds the
        stacks of every thread).
    BaseException
        The first exception a thread raised (the others are in its notes).
    """
    results: list[Any] = [None] * len(fns)
    errors: list[tuple[int, BaseException]] = []
    lock = threading.Lock()

    def call(index: int, fn: Callable[[], Any]) -> None:
        try:
            results[index] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            with lock:
                errors.append((index, exc))

    threads = [
        threading.Thread(target=call, args=(i, fn), name=f"worker-{i}", daemon=True)
        for i, fn in enumerate(fns)
    ]
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
