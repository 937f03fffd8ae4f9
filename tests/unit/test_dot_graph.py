"""The DOT task graph at scale: an exact, near-linear transitive reduction, and the
summary (one node per symbol) drawn for graphs too large to read."""

from __future__ import annotations

import random
import re
import time
from collections import Counter

import pytest

import stflow._core.config
from stflow._instruments.reduction import _reduction_width
from stflow._instruments.seam import WorkRecord
from stflow.instrument import DotRecorder, transitive_reduction

READ, WRITE, RW = 1, 2, 3


def _recorder(tasks, **options):
    """A recorder fed ``tasks``: (symbol, [(data key, mode), ...]) in submission
    order, as the runtime would feed it (no backend needed)."""
    recorder = DotRecorder(**options)
    for ident, (symbol, accesses) in enumerate(tasks, 1):
        recorder.work_submitted(
            WorkRecord(
                ident,
                "task",
                f"task '{symbol}'",
                ident % 2,
                0,
                [(key, f"d{key}", mode, 0) for key, mode in accesses],
                [],
            )
        )
    return recorder


def _chain(n):
    return [("step", [(0, RW)])] * n


def _uniform(n, data=16, seed=3):
    """Tasks touching 1-3 of ``data`` logical data at random."""
    rng = random.Random(seed)
    return [
        (
            f"t{rng.randrange(5)}",
            [
                (key, rng.choice((READ, READ, WRITE, RW)))
                for key in rng.sample(range(data), rng.randint(1, 3))
            ],
        )
        for _ in range(n)
    ]


def _stencil(n, blocks=8):
    """Iterations like the demo's: per block a stencil over its neighbours, a
    reduction of every block into one scalar, an update of every block by it."""
    tasks = []
    while len(tasks) < n:
        for i in range(blocks):
            tasks.append(
                (
                    f"stencil[{i}]",
                    [
                        (100 + (i - 1) % blocks, READ),
                        (100 + i, READ),
                        (100 + (i + 1) % blocks, READ),
                        (200 + i, WRITE),
                    ],
                )
            )
        tasks.append(("dot", [(200 + i, READ) for i in range(blocks)] + [(1, RW)]))
        for i in range(blocks):
            tasks.append((f"update[{i}]", [(1, READ), (200 + i, READ), (100 + i, RW)]))
    return tasks[:n]


def _brute_reduction(edges):
    """Keep ``a -> b`` unless ``b`` is reachable from ``a`` without that edge."""
    successors = {}
    for a, b in edges:
        successors.setdefault(a, set()).add(b)
    kept = set()
    for a, b in edges:
        stack, seen = [s for s in successors[a] if s != b], set()
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(successors.get(node, ()))
        if b not in seen:
            kept.add((a, b))
    return kept


# -- the transitive reduction -------------------------------------------------------


def test_the_reduction_is_exact_on_random_dags():
    rng = random.Random(7)
    for _ in range(400):
        n = rng.randint(1, 30)
        names = rng.sample(range(-50, 500), n)  # any ints, in a topological order
        density = rng.choice((0.05, 0.15, 0.4, 0.8))
        edges = {
            (names[i], names[j])
            for i in range(n)
            for j in range(i + 1, n)
            if rng.random() < density
        }
        # long edges from the first nodes: they become landmarks
        edges |= {
            (names[i], names[j])
            for i in range(min(3, n))
            for j in range(n // 2, n)
            if i < j and rng.random() < 0.5
        }
        expected = _brute_reduction(edges)
        assert transitive_reduction(edges) == expected
        assert transitive_reduction(edges, names) == expected
        assert transitive_reduction(iter(sorted(edges) * 2), names) == expected


def test_the_reduction_refuses_cycles_and_wrong_orders():
    with pytest.raises(
        ValueError,
        match=r"cycle \(through \[1, 2, 3\]\).*directed "
        r"acyclic graph",
    ):
        transitive_reduction({(1, 2), (2, 3), (3, 1), (0, 1)})
    with pytest.raises(ValueError, match=r"edge \(2, 1\) goes against the order"):
        transitive_reduction({(2, 1)}, [1, 2])
    with pytest.raises(ValueError, match=r"node 3 of edge \(1, 3\) is not in the order"):
        transitive_reduction({(1, 3)}, [1, 2])
    with pytest.raises(ValueError, match="order lists a node twice"):
        transitive_reduction({(1, 2)}, [1, 2, 1])


@pytest.mark.parametrize("program", [_chain, _uniform, _stencil])
def test_the_reduction_work_grows_about_linearly(program):
    # The reduction's work is about edges * (1 + width / 64) steps, width the bits a
    # node keeps; ten times the tasks must cost well under twenty times the work.
    small, large = _recorder(program(1_000)), _recorder(program(10_000))
    work = []
    for recorder in (small, large):
        edges = recorder.edges(reduce=False)
        work.append(len(edges) * (1 + _reduction_width(edges, recorder._order) / 64))
    assert work[1] < 20 * work[0]
    if program is not _uniform:
        assert _reduction_width(large.edges(reduce=False), large._order) <= 17


def test_to_dot_of_ten_thousand_tasks_takes_well_under_a_second_of_cpu():
    # was 40 s and more (a search per edge); about 0.2 s now: a generous bound
    recorder = _recorder(_uniform(10_000))
    started = time.process_time()
    text = recorder.to_dot(summary=False)
    assert time.process_time() - started < 8
    assert text.count(" -> ") == len(recorder.edges())


# -- the summary --------------------------------------------------------------------


def _parse_summary(text):
    """Groups {label: (members, node id)} and edges {(label, label): count}."""
    groups, ids = {}, {}
    for node, label, members in re.findall(
        r'^\s*(g\d+) \[label="(.*?)\\n× (\d+)', text, re.MULTILINE
    ):
        groups[label] = int(members)
        ids[node] = label
    edges = {
        (ids[a], ids[b]): int(count)
        for a, b, count in re.findall(
            r'^\s*(g\d+) -> (g\d+) \[label="(\d+)"\];', text, re.MULTILINE
        )
    }
    return groups, edges


@pytest.mark.parametrize("reduce", [True, False])
def test_the_summary_counts_the_tasks_and_edges_of_the_full_graph(reduce):
    tasks = _stencil(3_000)
    recorder = _recorder(tasks, reduce=reduce)
    text = recorder.to_dot()  # 3 000 nodes > 500: summarised
    groups, edges = _parse_summary(text)
    assert groups == {
        f"task '{symbol}'": count
        for symbol, count in Counter(s for s, _ in tasks).items()
    }
    label = {r.ident: r.label for r in recorder.records}
    expected = Counter((label[a], label[b]) for a, b in recorder.edges())
    assert edges == dict(expected)
    assert sum(edges.values()) == len(recorder.edges(reduce)) > 0
    assert (
        f"summary of 3000 nodes (3000 tasks and host callbacks, 0 copies, 0 waits "
        f"and fences) in {len(groups)} groups by symbol; max_nodes=500." in text
    )
    assert "to_dot(summary=False)" in text and "STFLOW_DOT_MAX_NODES=0" in text
    assert re.search(r'^  label="summary of 3000 tasks in 17 groups', text, re.MULTILINE)


def test_the_full_graph_is_one_argument_away():
    recorder = _recorder(_stencil(600))
    full = recorder.to_dot(summary=False)
    assert full.count(" [label=") == 600 and "summary" not in full
    assert full == _recorder(_stencil(600), summary=False).to_dot()
    assert full == _recorder(_stencil(600), max_nodes=0).to_dot()
    assert full == _recorder(_stencil(600), max_nodes=600).to_dot()
    assert "summary of 600 nodes" in _recorder(_stencil(600), max_nodes=599).to_dot()
    small = _recorder(_stencil(40))
    assert "summary" not in small.to_dot()  # small graphs stay whole
    assert "summary of 40 nodes" in small.to_dot(summary=True)


def test_too_many_symbols_are_grouped_with_numbers_as_stars():
    tasks = [(f"step {k}", [(k % 3, RW)]) for k in range(60)]
    text = _recorder(tasks, max_nodes=10).to_dot()
    groups, edges = _parse_summary(text)
    assert groups == {"task 'step *'": 60}
    assert edges == {("task 'step *'", "task 'step *'"): 57}  # 3 chains of 20
    assert "by symbol, numbers as *" in text


def test_the_summary_keeps_scopes_waits_and_fences():
    recorder = DotRecorder(summary=True)
    ident = 0

    def task(symbol, mode):
        nonlocal ident
        ident += 1
        recorder.work_submitted(
            WorkRecord(ident, "task", f"task '{symbol}'", 0, 0, [(0, "x", mode, 0)], [])
        )
        return ident

    first = task("init", RW)
    recorder.scope_opened("repeat", 3)
    for _ in range(3):
        task("step", RW)
    recorder.scope_closed(False)
    recorder.fence()
    last = task("after", READ)
    ident += 1
    recorder.work_submitted(WorkRecord(ident, "wait", "wait 'x'", -1, 0, [], [last]))
    text = recorder.to_dot()
    assert first == 1 and "summary of 7 nodes" in text
    cluster = text[text.index("subgraph cluster_1 {") :]
    cluster = cluster[: cluster.index("}")]
    assert 'label="repeat(3)"' in cluster and "task 'step'\\n× 3 on dev0" in cluster
    groups, edges = _parse_summary(text)
    assert groups == {
        "task 'init'": 1,
        "task 'step'": 3,
        "fence": 1,
        "task 'after'": 1,
        "wait 'x'": 1,
    }
    assert edges == {
        ("task 'init'", "task 'step'"): 1,
        ("task 'step'", "task 'step'"): 2,
        ("task 'step'", "fence"): 1,
        ("task 'step'", "task 'after'"): 1,
        ("task 'after'", "wait 'x'"): 1,
    }
    assert re.search(r'g\d+ \[label="fence\\n× 1", shape=octagon', text)
    # with more groups than max_nodes, the scopes go (no empty clusters left), then
    # the numbers in symbols
    recorder.max_nodes = 4
    text = recorder.to_dot()
    assert "cluster" not in text and "groups by symbol, numbers as *;" in text
    assert _parse_summary(text) == (groups, edges)


def test_recorder_arguments_are_checked():
    with pytest.raises(
        TypeError,
        match=r"DotRecorder\(max_nodes=True\): give the "
        r"largest number of nodes",
    ):
        DotRecorder(max_nodes=True)
    with pytest.raises(ValueError, match=r"max_nodes=-1\): give a number of nodes >= 0"):
        DotRecorder(max_nodes=-1)
    with pytest.raises(TypeError, match=r"DotRecorder\(summary='yes'\): give True"):
        DotRecorder(summary="yes")
    with pytest.raises(TypeError, match=r"to_dot\(summary=1\): give True"):
        DotRecorder().to_dot(summary=1)
    with pytest.raises(TypeError, match=r"DotRecorder\(reduce=None\)"):
        DotRecorder(reduce=None)
    with pytest.raises(TypeError, match=r"DotRecorder\(path=3\): give a file path"):
        DotRecorder(3)


def test_the_threshold_comes_from_the_environment(monkeypatch):
    monkeypatch.setattr(stflow._core.config, "_config", stflow._core.config.config())
    monkeypatch.setenv("STFLOW_DOT_MAX_NODES", "20")
    stflow._core.config.reload()
    assert DotRecorder().max_nodes == 20 and DotRecorder(max_nodes=7).max_nodes == 7
    assert "summary of 30 nodes" in _recorder(_chain(30)).to_dot()
    monkeypatch.setenv("STFLOW_DOT_MAX_NODES", "0")
    stflow._core.config.reload()
    assert "summary" not in _recorder(_chain(3_000)).to_dot()
    monkeypatch.delenv("STFLOW_DOT_MAX_NODES")
    assert stflow._core.config.reload().dot_max_nodes == 500
    monkeypatch.setenv("STFLOW_DOT_MAX_NODES", "lots")
    with pytest.raises(
        ValueError,
        match=r"STFLOW_DOT_MAX_NODES='lots' is not an "
        r"integer >= 0; set it to the largest",
    ):
        stflow._core.config.reload().dot_max_nodes
