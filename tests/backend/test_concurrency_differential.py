"""The concurrency differential test: host threads submit random programs to one
context (private data, shared read-only data, shared data written in turns, shared
data every thread reduces into with operations of its own, data registered and
dropped while other threads retire theirs), checked against the sequential oracle
(``stflow.testing.check_threaded_program``).

Stream mode, graph mode (``use_graph=True``) and scopes per thread (a stackable
context), on every backend, under a watchdog: a hang fails with every thread's stack.
``STFLOW_THREADED_SEEDS`` sets the seeds per mode (default 120; thousands locally).
"""

from __future__ import annotations

import os

import pytest

from stflow.testing import check_threaded_program

SEEDS = int(os.environ.get("STFLOW_THREADED_SEEDS", "120"))
CHUNK = 40


def _device_count(backend: str) -> int:
    from stflow.backends import get_backend

    return get_backend(backend).device_count


@pytest.mark.parametrize("mode", ["stream", "graph", "scopes"])
@pytest.mark.parametrize(
    "first",
    range(0, SEEDS, CHUNK),
    ids=lambda first: f"seeds{first}-{min(first + CHUNK, SEEDS) - 1}",
)
def test_threads_submitting_random_programs_match_the_oracle(backend, mode, first):
    devices = _device_count(backend)
    failures = []
    for seed in range(first, min(first + CHUNK, SEEDS)):
        threads = 2 + seed % 7  # 2 to 8 threads
        try:
            check_threaded_program(seed, threads, mode, backend, devices, timeout=120)
        except AssertionError as exc:
            failures.append(f"seed {seed} ({threads} threads): {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:2])


@pytest.mark.parametrize("mode", ["stream", "graph", "scopes"])
def test_the_null_backend_too(mode):
    """The null backend (synchronous; graphs run when launched) under threads."""
    for seed in range(40):
        check_threaded_program(seed, 2 + seed % 7, mode, "null", 2)


@pytest.mark.parametrize("mode", ["stream", "graph", "scopes"])
def test_threads_submitting_grid_tasks_match_the_oracle(backend, mode):
    """Threads whose programs run tasks on grids of places, with composite and
    replicated data (the grids and places are shared by all threads)."""
    devices = _device_count(backend)
    failures = []
    for seed in range(min(SEEDS, 40)):
        try:
            check_threaded_program(
                seed, 2 + seed % 5, mode, backend, devices, timeout=120, grids=True
            )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:2])
