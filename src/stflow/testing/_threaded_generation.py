"""Drawing threaded programs from a seed (:func:`generate_threaded_program`).

Every thread's private data, the shared and the turn data, every thread's segments
and the turn order are drawn from ``random.Random(seed)``; the views, grids, mixed
accumulators with their reductions, registrations (:class:`Scratch` work) and
bundles are added by passes that draw from generators of their own, seeded from
``seed``, so that what is drawn before a pass stays as it was and a seed always draws
the same program. The reductions into mixed accumulators are bounded so that their
result is the same in any interleaving (see ``_threaded``'s module docstring).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from .._core.reduce import OPS, reduce_mode
from ._generation import add_bundles, initial_arrays
from ._grids import GridSpec, add_grids
from ._ops import READ, RW, WRITE, DataSpec, Op, TaskOp
from ._parents import add_views
from ._threaded import MODES, SCRATCH, Scratch, Segment, ThreadedProgram

__all__ = ["generate_threaded_program"]


def generate_threaded_program(
    seed: int,
    threads: int = 4,
    mode: str = "stream",
    devices: int = 2,
    *,
    max_segments: int = 4,
    max_ops: int = 6,
    grids: bool = False,
    reductions: bool = True,
    registrations: bool = True,
    views: bool = True,
    bundles: bool = True,
) -> ThreadedProgram:
    """Draw a threaded program from ``seed`` for ``mode`` (``stream``, ``graph``:
    ``context(use_graph=...)``; ``scopes``: a ``stackable_context``; ``grids``: some
    tasks on grids of places, some data at composite or replicated places;
    ``reductions``: mixed accumulators; ``registrations``: :class:`Scratch` work;
    ``views``: user arrays that are strided views of shared parents; see the
    module)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    rng = random.Random(seed)
    data: list[DataSpec] = []
    private = [
        [_new_data(rng, data, devices) for _ in range(rng.randint(2, 3))]
        for _ in range(threads)
    ]
    shared = [
        _new_data(rng, data, devices, readonly=True) for _ in range(rng.randint(1, 3))
    ]
    turn_data = [_new_data(rng, data, devices) for _ in range(rng.randint(1, 2))]
    if views:  # views of shared parents: threads register interleaved bytes
        data[:] = add_views(seed, data)
    per_thread = [
        _draw_segments(
            rng, mode, private[t], shared, turn_data, devices, max_segments, max_ops
        )
        for t in range(threads)
    ]
    turns = _turn_order(rng, per_thread)
    grid_specs: list[GridSpec] = []
    if grids:
        _add_segment_grids(
            random.Random(seed * 104729 + 5), per_thread, devices, grid_specs
        )
    extra = random.Random(seed * 6007 + 3)  # the programs above stay as they were
    mixed: list[int] = []
    fills: dict[int, float] = {}
    if reductions and extra.random() < 0.7:
        _add_accumulators(extra, data, mixed, fills, per_thread, devices)
    if registrations and extra.random() < 0.7:
        _add_registrations(extra, shared, per_thread, devices)
    if bundles:  # some deps as one bundle (NONE fields: the thread's own data)
        _add_segment_bundles(
            random.Random(seed * 15485863 + 7), data, private, shared, per_thread
        )
    program = ThreadedProgram(
        seed,
        mode,
        data,
        private,
        shared,
        turn_data,
        per_thread,
        turns,
        devices,
        grids=grid_specs,
        mixed=mixed,
    )
    program.initial = initial_arrays(program.as_program())
    for index, fill in fills.items():  # dyadic: sums exact in any order
        program.initial[index] = np.full(
            data[index].shape or (), fill, dtype=data[index].dtype
        )
    return program


def _new_data(
    rng: random.Random, data: list[DataSpec], devices: int, readonly: bool = False
) -> int:
    """Append a data to ``data``: a user array (always when ``readonly``) or a data
    filled at a random place; its index."""
    shape = (
        (rng.randint(1, 64),)
        if rng.random() < 0.7
        else (rng.randint(1, 8), rng.randint(1, 8))
    )
    dtype = rng.choice(["float32", "float64"])
    if readonly or rng.random() < 0.6:
        data.append(DataSpec(shape, dtype, "array", readonly=readonly))
    else:
        data.append(
            DataSpec(
                shape,
                dtype,
                "full",
                fill=rng.choice([0.0, 1.5]),
                fill_place=rng.choice([None, "host", *range(devices)]),
            )
        )
    return len(data) - 1


def _draw_segments(
    rng: random.Random,
    mode: str,
    private: list[int],
    shared: list[int],
    turn_data: list[int],
    devices: int,
    max_segments: int,
    max_ops: int,
) -> list[Segment]:
    """One thread's segments, on its ``private`` data and the ``shared`` data; some
    of them turns (touching ``turn_data`` too, ending with a wait for one of them
    outside scopes), some graph scopes in ``scopes`` mode."""
    segments = []
    for _ in range(rng.randint(2, max_segments)):
        turn = rng.random() < 0.4
        scoped = mode == "scopes" and rng.random() < 0.5
        ops = [
            _draw_op(
                rng,
                mode,
                private,
                shared,
                turn_data if turn else [],
                devices,
                scoped,
            )
            for _ in range(rng.randint(1, max_ops))
        ]
        if turn and mode != "scopes":
            ops.append(Op("wait", rng.choice(turn_data)))  # the user's handover
        segments.append(Segment(ops, turn, scoped))
    return segments


def _add_segment_grids(
    rng: random.Random,
    per_thread: list[list[Segment]],
    devices: int,
    grid_specs: list[GridSpec],
) -> None:
    """Move some tasks of every segment onto grids of places (``add_grids``; the
    grids, appended to ``grid_specs``, shared by all threads)."""
    for segments in per_thread:
        for segment in segments:
            segment.ops[:] = add_grids(rng, segment.ops, devices, grid_specs)


def _add_segment_bundles(
    rng: random.Random,
    data: list[DataSpec],
    private: list[list[int]],
    shared: list[int],
    per_thread: list[list[Segment]],
) -> None:
    """Submit some deps of the tasks of every segment as one bundle
    (``add_bundles``; fields left out name the thread's own or shared data)."""
    for t, segments in enumerate(per_thread):
        for segment in segments:
            segment.ops[:] = add_bundles(
                rng, data, segment.ops, spare=[*private[t], *shared]
            )


def _turn_order(
    rng: random.Random, per_thread: list[list[Segment]]
) -> list[tuple[int, int]]:
    """The turn order: every thread's turns in its own order, interleaved at
    random."""
    queues = [
        [(t, s) for s, segment in enumerate(segments) if segment.turn]
        for t, segments in enumerate(per_thread)
    ]
    turns = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        turns.append(queue.pop(0))
    return turns


def _add_accumulators(
    rng: random.Random,
    data: list[DataSpec],
    mixed: list[int],
    fills: dict[int, float],
    per_thread: list[list[Segment]],
    devices: int,
) -> None:
    """One or two accumulators reduced into with mixed ops (appended to ``data``,
    their indices to ``mixed``, their initial values to ``fills``), and the
    reductions into them."""
    for _ in range(rng.randint(1, 2)):
        shape = (1,) if rng.random() < 0.4 else (rng.randint(2, 48),)
        data.append(
            DataSpec(
                shape, rng.choice(["float32", "float64"]), "array", accumulator="mixed"
            )
        )
        mixed.append(len(data) - 1)
        fills[len(data) - 1] = rng.choice([0.0, 1.0, -1.0])
    _add_mixed_reductions(rng, data, mixed, fills, per_thread, devices)


# Contributions of mixed reductions (``_programs._fold`` with ``base = coef``, a task
# reading nothing else): a sum adds q, q + 1 or q + 2 per element (q = -1 or -0.5);
# max contributions are in [-8, -6] and min ones in [8, 10], so both change nothing
# while the value stays in [-6, 8]; a product on one element multiplies by 1.
_LOW, _HIGH = -6.0, 8.0
_NEUTRAL = {"max": -8.0, "min": 8.0, "prod": 2.0}


def _add_mixed_reductions(
    rng: random.Random,
    data: list[DataSpec],
    mixed: list[int],
    fills: dict[int, float],
    per_thread: list[list[Segment]],
    devices: int,
) -> None:
    """Insert reductions into the mixed accumulators at random places of every
    thread's segments; each thread has operations of its own. A scoped segment
    reduces into the first accumulator only (two scopes of two threads each holding
    one accumulator and waiting for the other's would be the user's deadlock)."""
    low = {index: fills[index] for index in mixed}
    high = dict(low)
    for segments in per_thread:
        ops_of = rng.sample(["sum", "max", "min", "prod"], rng.randint(1, 3))
        for _ in range(rng.randint(1, 5)):
            segment = rng.choice(segments)
            acc = mixed[0] if segment.scoped else rng.choice(mixed)
            op = rng.choice(ops_of)
            if op == "prod" and data[acc].shape != (1,):
                op = "max"
            if op == "sum":
                q = rng.choice([-1.0, -0.5])
                if low[acc] + q < _LOW or high[acc] + q + 2 > _HIGH:
                    continue  # the bounds would not hold
                low[acc] += q
                high[acc] += q + 2
                coef = q
            else:
                coef = _NEUTRAL[op]
            host = not segment.scoped and rng.random() < 0.2
            place = (
                rng.choice([None, "host", "managed"])
                if host
                else rng.choice([None, None, "host", "managed", *range(devices)])
            )
            exec_place = "host" if host else rng.choice(["host", *range(devices)])
            task = TaskOp(
                "host_launch" if host else "task",
                ((acc, reduce_mode(OPS[op]), place),),
                coef,
                exec_place,
                launch=not host and rng.random() < 0.5,
            )
            segment.ops.insert(rng.randint(0, len(segment.ops)), task)


def _add_registrations(
    rng: random.Random, shared: list[int], per_thread: list[list[Segment]], devices: int
) -> None:
    """Insert :class:`Scratch` work into the segments that are not scopes."""
    for segments in per_thread:
        unscoped = [segment for segment in segments if not segment.scoped]
        if not unscoped:
            continue
        for _ in range(rng.randint(2, 6)):
            shape = (rng.randint(1, 40),)
            dtype = rng.choice(["float32", "float64"])
            initial = (
                np.random.default_rng(rng.getrandbits(32))
                .uniform(-1, 1, shape)
                .astype(dtype)
            )
            host = rng.random() < 0.25
            deps: list[tuple[int, int, Any]] = [
                (
                    SCRATCH,
                    rng.choice([RW, WRITE]),
                    rng.choice([None, "host", "managed"])
                    if host
                    else rng.choice([None, None, "host", "managed", *range(devices)]),
                )
            ]
            if shared and rng.random() < 0.5:
                deps.append((rng.choice(shared), READ, None))
            op = TaskOp(
                "host_launch" if host else "task",
                tuple(deps),
                round(rng.uniform(-2, 2), 3),
                "host" if host else rng.choice(["host", *range(devices)]),
                launch=not host and rng.random() < 0.5,
            )
            segment = rng.choice(unscoped)
            segment.ops.insert(
                rng.randint(0, len(segment.ops)),
                Scratch(initial, op, collect=rng.random() < 0.15),
            )


def _draw_op(
    rng: random.Random,
    mode: str,
    private: list[int],
    shared: list[int],
    turn_data: list[int],
    devices: int,
    scoped: bool,
) -> Any:
    roll = rng.random()
    writable = private + turn_data
    if roll < 0.08 and not scoped:
        return Op("fence")
    if roll < 0.2 and mode != "scopes":
        return Op("wait", rng.choice(writable))
    kind = "host_launch" if roll < 0.3 else "task"
    chosen = rng.sample(writable, rng.randint(1, min(2, len(writable))))
    chosen += rng.sample(shared, rng.randint(0, min(2, len(shared))))
    deps = []
    for index in chosen:
        mode_ = READ if index in shared else rng.choice([READ, RW, RW, WRITE])
        if kind == "host_launch":
            place = rng.choice([None, None, "host", "managed"])
        else:
            place = rng.choice([None, None, None, "host", "managed", *range(devices)])
        deps.append((index, mode_, place))
    exec_place = (
        "host" if kind == "host_launch" else rng.choice(["host", *range(devices)])
    )
    launch = kind == "task" and (mode != "stream" or rng.random() < 0.5)
    return TaskOp(kind, tuple(deps), round(rng.uniform(-2, 2), 3), exec_place, launch)
