"""The differential test: random task programs against a sequential NumPy oracle.

Every seed draws a program (stflow.testing.generate_program), runs it through stflow
and through the oracle, and compares every ``wait()`` result and every final user
buffer (bit for bit on the emulated backend). ``STFLOW_DIFFERENTIAL_SEEDS`` sets how
many seeds run (default 1000); ``-m slow`` adds a campaign of large programs. The
same programs also run under tight device memory budgets (eviction).
"""

from __future__ import annotations

import os

import pytest

from stflow.testing import check_program, check_scoped_program, generate_program

SEEDS = int(os.environ.get("STFLOW_DIFFERENTIAL_SEEDS", "1000"))
CHUNK = 100


def _device_count(backend: str) -> int:
    from stflow.backends import get_backend

    return get_backend(backend).device_count


def _run_seeds(backend: str, seeds: range, use_graph: bool = False, **options) -> None:
    devices = _device_count(backend)
    failures = []
    for seed in seeds:
        try:
            program = generate_program(seed, devices, **options)
            check_program(program, backend, use_graph=use_graph)
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:3])


@pytest.mark.parametrize(
    "first",
    range(0, SEEDS, CHUNK),
    ids=lambda first: f"seeds{first}-{min(first + CHUNK, SEEDS) - 1}",
)
def test_random_programs_match_the_oracle(backend, first):
    _run_seeds(backend, range(first, min(first + CHUNK, SEEDS)))


@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 500), CHUNK),
    ids=lambda first: f"seeds{first}-{first + CHUNK - 1}",
)
def test_random_programs_on_the_null_backend_match_the_oracle(first):
    """The null backend (everything completes when enqueued) runs the runtime unchanged."""
    _run_seeds("null", range(first, first + CHUNK))


@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 300), CHUNK),
    ids=lambda first: f"seeds{first}-{first + CHUNK - 1}",
)
def test_graph_mode_on_the_null_backend_matches_the_oracle(first):
    """Graphs recorded on the null backend run when launched, their nodes in a
    seeded random order that respects the edges."""
    failures = []
    for seed in range(first, first + CHUNK):
        try:
            check_program(generate_program(seed, 2), "null", use_graph=True)
            check_scoped_program(seed, 2, "null")
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:3])


def test_large_programs_match_the_oracle(backend):
    _run_seeds(backend, range(10_000, 10_050), max_data=10, max_ops=120)


@pytest.mark.slow
@pytest.mark.parametrize("first", range(20_000, 25_000, 500))
def test_campaign_of_large_programs(backend, first):
    _run_seeds(backend, range(first, first + 500), max_data=10, max_ops=120)


@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 500), CHUNK),
    ids=lambda first: f"seeds{first}-{first + CHUNK - 1}",
)
def test_random_programs_in_graph_mode_match_the_oracle(backend, first):
    _run_seeds(backend, range(first, first + CHUNK), use_graph=True)


@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 400), CHUNK),
    ids=lambda first: f"seeds{first}-{first + CHUNK - 1}",
)
def test_graph_mode_with_an_epoch_every_three_tasks_matches_the_oracle(
    backend, first, monkeypatch
):
    """Graph mode launching an epoch every three tasks: most dependencies cross
    epochs (launched graphs, their completion events, retirement)."""
    import stflow._graph.scopes as scopes

    monkeypatch.setattr(scopes, "EPOCH_TASKS", 3)
    _run_seeds(backend, range(first, first + CHUNK), use_graph=True)


@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 400), CHUNK),
    ids=lambda first: f"seeds{first}-{first + CHUNK - 1}",
)
def test_random_scoped_programs_match_the_unrolled_oracle(backend, first):
    """Graph scopes, repeat/while loops and launchable graphs (stackable_context)
    around random runs of tasks, against the oracle with the repetitions unrolled."""
    devices = _device_count(backend)
    failures = []
    for seed in range(first, first + CHUNK):
        try:
            check_scoped_program(seed, devices, backend)
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:3])


@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 200), CHUNK),
    ids=lambda first: f"seeds{first}-{first + CHUNK - 1}",
)
def test_scoped_programs_abandoned_by_an_exception_keep_the_root(backend, first):
    """Issue 24: a program that raises inside its ``with stackable_context()`` with
    push() scopes open: the scopes are discarded (with a warning) and the root
    level's results written back, those of the program before that point."""
    devices = _device_count(backend)
    failures = []
    for seed in range(first, first + CHUNK):
        try:
            check_scoped_program(seed, devices, backend, abandon=True)
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:3])


@pytest.mark.slow
@pytest.mark.parametrize("first", range(30_000, 32_000, 500))
def test_campaign_of_large_scoped_programs(backend, first):
    devices = _device_count(backend)
    for seed in range(first, first + 500):
        check_scoped_program(seed, devices, backend, max_data=10, max_ops=80)


# -- under memory pressure: random small budgets make the runtime evict ----------------


@pytest.mark.parametrize("mode", ["stream", "graph", "scopes"])
@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 300), CHUNK),
    ids=lambda first: f"seeds{first}-{first + CHUNK - 1}",
)
def test_random_programs_under_a_tight_memory_budget_match_the_oracle(
    backend, mode, first
):
    """Each seed runs within a budget between the smallest its program fits in and
    1.5 times that (``memory_budget="tight"``): instances are evicted, the only valid
    copies written back first, and the results must not change."""
    devices = _device_count(backend)
    failures = []
    for seed in range(first, first + CHUNK):
        try:
            if mode == "scopes":
                check_scoped_program(seed, devices, backend, memory_budget="tight")
            else:
                check_program(
                    generate_program(seed, devices),
                    backend,
                    use_graph=mode == "graph",
                    memory_budget="tight",
                )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:3])


# -- grids of places: grid tasks, composite and replicated data -------------------------


@pytest.mark.parametrize("mode", ["stream", "graph", "scopes", "tight"])
@pytest.mark.parametrize(
    "first",
    range(0, min(SEEDS, 300), CHUNK),
    ids=lambda first: f"seeds{first}-{first + CHUNK - 1}",
)
def test_random_programs_on_grids_match_the_oracle(backend, mode, first):
    """Some tasks run on grids of places (their bodies on a random member's stream)
    and some data are accessed at composite places (blocked, cyclic or scattered
    mappers) or, for reads, at replicated places: values must not change."""
    devices = _device_count(backend)
    failures = []
    for seed in range(first, first + CHUNK):
        try:
            if mode == "scopes":
                check_scoped_program(seed, devices, backend, grids=True)
            else:
                check_program(
                    generate_program(seed, devices, grids=True),
                    backend,
                    use_graph=mode == "graph",
                    memory_budget="tight" if mode == "tight" else None,
                )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, f"{len(failures)} failing seed(s):\n" + "\n\n".join(failures[:3])
