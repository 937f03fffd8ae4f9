"""Drawing random task programs from a seed (:func:`generate_program`).

The data and the operations of a program are drawn from ``random.Random(seed)``, the
user arrays' values from ``numpy.random.default_rng(seed)`` (:func:`initial_arrays`).
Views, accumulators with their reductions (see ``_programs``' module docstring),
grids (``_grids``) and bundles (:func:`add_bundles`, also used by the threaded
generator) are added by passes that draw from generators of their own, each seeded
from ``seed``: what is drawn before a pass does not depend on whether it runs, and a
seed always draws the same program.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core.reduce import OPS, reduce_mode
from ._grids import GridSpec, add_grids
from ._ops import READ, RW, WRITE, BundleSpec, DataSpec, Op, TaskOp
from ._parents import add_views
from ._programs import Program

__all__ = ["add_bundles", "generate_program", "initial_arrays"]


def generate_program(
    seed: int,
    devices: int = 2,
    *,
    max_data: int = 6,
    max_ops: int = 24,
    host_callbacks: bool = True,
    drops: bool = True,
    reductions: bool = True,
    grids: bool = False,
    views: bool = True,
    bundles: bool = True,
) -> Program:
    """Draw a random program from ``seed`` (``reductions``: with accumulators, data
    only reduced into and read; ``grids``: with tasks on grids of places and data at
    composite and replicated places, see ``_grids.py``; ``views``: some user arrays
    strided views of parent arrays, see :func:`add_views`)."""
    rng = random.Random(seed)
    data = _draw_data(rng, devices, max_data)
    if views:
        data = add_views(seed, data)
    initialised = {i for i, spec in enumerate(data) if spec.origin != "empty"}
    dropped: set[int] = set()
    ops: list[Any] = []
    for _ in range(rng.randint(4, max_ops)):
        roll = rng.random()
        alive = [i for i in range(len(data)) if i not in dropped]
        if not alive:
            break
        if roll < 0.08:
            ops.append(Op("fence"))
            continue
        with_memory = [i for i in alive if data[i].origin != "token" and i in initialised]
        if roll < 0.18 and with_memory:
            ops.append(Op("wait", rng.choice(with_memory)))
            continue
        if roll < 0.21 and drops and with_memory:
            victim = rng.choice(with_memory)
            dropped.add(victim)
            ops.append(Op("drop", victim))
            continue
        kind = "host_launch" if host_callbacks and roll < 0.33 else "task"
        ops.append(_draw_task(rng, kind, data, alive, initialised, devices))
    if reductions:
        ops = _add_reductions(
            random.Random(seed * 7919 + 17), data, ops, devices, host_callbacks
        )
        initialised.update(i for i, spec in enumerate(data) if spec.accumulator)
    grid_specs: list[GridSpec] = []
    if grids:
        ops = add_grids(random.Random(seed * 104729 + 3), ops, devices, grid_specs)
    if bundles:
        ops = add_bundles(random.Random(seed * 15485863 + 5), data, ops)
    # Observe every surviving data without a user buffer at the end.
    for i, spec in enumerate(data):
        if i not in dropped and spec.origin in ("full", "empty") and i in initialised:
            ops.append(Op("wait", i))
    program = Program(seed, data, ops, devices, grids=grid_specs)
    program.initial = initial_arrays(program)
    return program


def _draw_data(rng: random.Random, devices: int, max_data: int) -> list[DataSpec]:
    """The data of a program: tokens, user arrays (some 0-d or empty, some
    read-only), data filled at a place and data without an initial value."""
    data: list[DataSpec] = []
    for _ in range(rng.randint(2, max_data)):
        roll = rng.random()
        if roll < 0.12:
            data.append(DataSpec(None, None, "token"))
            continue
        shape: tuple[int, ...] = (
            (rng.randint(1, 300),)
            if rng.random() < 0.6
            else (rng.randint(1, 20), rng.randint(1, 20))
        )
        dtype = rng.choice(["float32", "float64"])
        if roll < 0.6:
            if rng.random() < 0.08:
                shape = rng.choice([(), (0,), (3, 0)])  # 0-d and zero-size buffers
            data.append(DataSpec(shape, dtype, "array", readonly=rng.random() < 0.15))
        elif roll < 0.85:
            fill_place = rng.choice([None, "host", *range(devices)])
            data.append(
                DataSpec(
                    shape,
                    dtype,
                    "full",
                    fill=rng.choice([0.0, 1.0, 2.5]),
                    fill_place=fill_place,
                )
            )
        else:
            data.append(DataSpec(shape, dtype, "empty"))
    return data


def _draw_task(
    rng: random.Random,
    kind: str,
    data: list[DataSpec],
    alive: list[int],
    initialised: set[int],
    devices: int,
) -> TaskOp:
    """A task or host callback (``kind``) on some of the ``alive`` data: modes that
    write what is not ``initialised`` yet (which it then is), places, sometimes the
    same data twice."""
    chosen = rng.sample(alive, rng.randint(1, min(4, len(alive))))
    initialised_before = set(initialised)
    deps = []
    for index in chosen:
        spec = data[index]
        if spec.readonly:
            mode = READ
        elif index not in initialised:
            mode = WRITE
        else:
            mode = rng.choice([READ, READ, RW, RW, WRITE])
        if spec.origin == "token":
            place = None
        elif kind == "host_launch":
            place = rng.choice([None, None, "host", "managed"])
        else:
            place = rng.choice([None, None, None, "host", "managed", *range(devices)])
        deps.append((index, mode, place))
        if mode & WRITE:
            initialised.add(index)
    if deps and rng.random() < 0.15:
        # The same data twice: read again elsewhere, or read + rw at one place.
        index, mode, place = rng.choice(deps)
        spec = data[index]
        if spec.origin != "token" and index in initialised_before:
            if mode == READ:
                again = (
                    rng.choice([None, "host", "managed", *range(devices)])
                    if kind == "task"
                    else rng.choice([None, "host", "managed"])
                )
                deps.append((index, READ, again))
            elif not spec.readonly:
                deps.append((index, READ, place))
    place_of_exec = (
        "host" if kind == "host_launch" else rng.choice(["host", *range(devices)])
    )
    return TaskOp(
        kind,
        tuple(deps),
        round(rng.uniform(-2, 2), 3),
        place_of_exec,
        launch=kind == "task" and rng.random() < 0.4,
    )


def add_bundles(
    rng: random.Random,
    data: list[DataSpec],
    ops: list[Any],
    spare: Sequence[int] | None = None,
) -> list[Any]:
    """Submit some deps of some tasks as one bundle (``ctx.bundle``): deps of
    distinct data at one place, moved next to each other (the oracle runs the same
    order), spelt with ``read()``, ``rw()``, ``write()`` or ``dep(**modes)`` as their
    modes allow, ``constant`` fields where they read, and fields left out with
    ``AccessMode.NONE`` (data the task does not otherwise touch; among ``spare``
    when given)."""
    dropped: set[int] = set()
    result: list[Any] = []
    for op in ops:
        if isinstance(op, Op):
            if op.kind == "drop":
                dropped.add(op.data)
            result.append(op)
            continue
        if (
            not isinstance(op, TaskOp)
            or op.bundle is not None
            or not op.deps
            or rng.random() > 0.35
        ):
            result.append(op)
            continue
        place = rng.choice([p for _, _, p in op.deps])
        candidates, seen = [], set()
        for position, (index, _, p) in enumerate(op.deps):
            if p == place and index not in seen:
                seen.add(index)
                candidates.append(position)
        chosen = rng.sample(candidates, rng.randint(1, len(candidates)))
        rest = [d for k, d in enumerate(op.deps) if k not in chosen]
        start = rng.randint(0, len(rest))
        block = [op.deps[k] for k in chosen]
        deps = (*rest[:start], *block, *rest[start:])
        modes = [mode for _, mode, _ in block]
        others = set(modes) - {READ}
        options = ["dep"]
        if not others:
            options += ["read", "rw", "write"]  # rw/write: every field constant
        elif len(others) == 1 and others <= {RW, WRITE}:
            options.append("rw" if RW in others else "write")
        how = rng.choice(options)
        fields = []
        explicit = []
        for k, (index, mode, _) in enumerate(block):
            name = f"f{k}_d{index}"
            if how in ("rw", "write"):
                const = mode == READ
            else:
                const = mode == READ and rng.random() < 0.4
            fields.append((name, index, True, const))
            if how == "dep" and (mode != READ or rng.random() < 0.5):
                explicit.append((name, mode))
        if how == "dep":
            untouched = [
                i
                for i in (range(len(data)) if spare is None else spare)
                if i not in dropped and i not in {index for index, _, _ in op.deps}
            ]
            for index in rng.sample(untouched, min(len(untouched), rng.randint(0, 2))):
                name = f"none_d{index}"
                fields.insert(
                    rng.randint(0, len(fields)), (name, index, False, rng.random() < 0.3)
                )
                explicit.append((name, 0))
        rng.shuffle(explicit)
        spec = BundleSpec(
            start, len(block), tuple(fields), how, tuple(explicit), run=rng.random() < 0.5
        )
        result.append(
            TaskOp(op.kind, deps, op.coef, op.place_of_exec, op.launch, op.member, spec)
        )
    return result


def _add_reductions(
    rng: random.Random,
    data: list[DataSpec],
    ops: list[Any],
    devices: int,
    host_callbacks: bool,
) -> list[Any]:
    """Add one or two accumulators to ``data`` and, between the operations of
    ``ops``, tasks that reduce into them or read them (writing other data)."""
    if rng.random() < 0.3:
        return ops
    accumulators = _draw_accumulators(rng, data, devices)
    places = [None, None, "host", "managed", *range(devices)]
    initialised = {i for i, spec in enumerate(data) if spec.origin != "empty"}
    dropped: set[int] = set()
    result: list[Any] = []
    for op in [*ops, None]:
        while rng.random() < 0.35:
            acc = rng.choice(accumulators)
            readable = [
                i
                for i, spec in enumerate(data)
                if i != acc
                and i not in dropped
                and spec.shape is not None
                and i in initialised
            ]
            if rng.random() < 0.7:  # reduce into acc, reading another data
                result.append(
                    _draw_reduce_into(
                        rng, data, acc, readable, places, devices, host_callbacks
                    )
                )
                continue
            use = _draw_accumulator_read(rng, data, acc, readable, places, devices)
            if use is not None:
                result.append(use)
        if op is None:
            break
        result.append(op)
        if isinstance(op, TaskOp):
            initialised.update(i for i, mode, _ in op.deps if mode & WRITE)
        elif op.kind == "drop":
            dropped.add(op.data)
    return result


def _draw_accumulators(
    rng: random.Random, data: list[DataSpec], devices: int
) -> list[int]:
    """Append one or two accumulators to ``data``, filled at a random place with
    values of their family (sums or products); their indices."""
    accumulators = []
    for _ in range(rng.randint(1, 2)):
        family = rng.choice(["add", "add", "mul"])
        shape = (
            (rng.randint(1, 64),)
            if rng.random() < 0.7
            else (rng.randint(1, 6), rng.randint(1, 6))
        )
        fill = rng.choice([1.0, 2.5] if family == "mul" else [0.0, 1.0, 2.5])
        data.append(
            DataSpec(
                shape,
                rng.choice(["float32", "float64"]),
                "full",
                fill=fill,
                fill_place=rng.choice([None, "host", *range(devices)]),
                accumulator=family,
            )
        )
        accumulators.append(len(data) - 1)
    return accumulators


def _draw_reduce_into(
    rng: random.Random,
    data: list[DataSpec],
    acc: int,
    readable: list[int],
    places: list[Any],
    devices: int,
    host_callbacks: bool,
) -> TaskOp:
    """A task (or host callback) reducing into ``acc`` with an operation of its
    family, mostly reading one of the ``readable`` data too."""
    ops_of = (
        ["sum", "sum", "min", "max"]
        if data[acc].accumulator == "add"
        else ["prod", "prod", "min", "max"]
    )
    kind = "host_launch" if host_callbacks and rng.random() < 0.2 else "task"
    mode = reduce_mode(OPS[rng.choice(ops_of)])
    place = (
        rng.choice([None, "host", "managed"])
        if kind == "host_launch"
        else rng.choice(places)
    )
    deps = [(acc, mode, place)]
    if readable and rng.random() < 0.7:
        deps.append(
            (
                rng.choice(readable),
                READ,
                rng.choice([None, "host", "managed"])
                if kind == "host_launch"
                else rng.choice(places),
            )
        )
    exec_place = (
        "host" if kind == "host_launch" else rng.choice(["host", *range(devices)])
    )
    return TaskOp(
        kind,
        tuple(deps),
        round(rng.uniform(-2, 2), 3),
        exec_place,
        launch=kind == "task" and rng.random() < 0.5,
    )


def _draw_accumulator_read(
    rng: random.Random,
    data: list[DataSpec],
    acc: int,
    readable: list[int],
    places: list[Any],
    devices: int,
) -> Any:
    """A task reading ``acc`` to update another of the ``readable`` data (one that
    may be written); without one, sometimes a wait for ``acc``, else ``None``."""
    writable = [i for i in readable if not data[i].readonly and not data[i].accumulator]
    if writable:  # read acc, update another data
        target = rng.choice(writable)
        return TaskOp(
            "task",
            (
                (target, RW, rng.choice(places)),
                (acc, READ, rng.choice(places)),
            ),
            round(rng.uniform(-2, 2), 3),
            rng.choice(["host", *range(devices)]),
            launch=rng.random() < 0.5,
        )
    if rng.random() < 0.5:
        return Op("wait", acc)
    return None


def initial_arrays(program: Program) -> dict[int, np.ndarray]:
    """The user arrays of ``origin="array"`` data, drawn from the program's seed."""
    rng = np.random.default_rng(program.seed)
    arrays = {}
    for i, spec in enumerate(program.data):
        if spec.origin == "array":
            arrays[i] = rng.uniform(-1, 1, spec.shape).astype(spec.dtype)
    return arrays
