"""The distributed differential test: random programs over MPI ranks.

:func:`check_distributed_program` draws a program (:func:`generate_program`, without
early drops; with the generator's accumulators, data only reduced into and read, when
``reductions=True``), gives every data a random owner rank and some tasks a
random executing rank, runs it through ``stf.distributed_context`` on every rank of
``comm``, and checks on every rank each ``wait`` result against the sequential NumPy
oracle, and on each owner the final user arrays it owns (the other ranks' arrays must
be unchanged). Tokens order work across ranks too; the dependencies keep their data places
(host, managed, a device) on the executing rank. Every rank must call it with the same
seed, at the same point: it is collective.

With ``edge_reductions=True`` the program gets accumulators of the shapes and
origins the generator's leave out (``_add_edge_reductions``): 0-d, zero-size
(``(0,)``, ``(3, 0)``, ``(0, 2)``) and ordinary ones, from a user array (written back
to its owner at ``finalize``), filled, or never written (``logical_data_empty``:
reduced into before any other access). A never-written data reduced into starts
from the identity of the operation, as in a local context: the oracle runs the
program with such an accumulator filled with the identity of its first reduction.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from .._core.reduce import OPS, REDUCE, reduce_mode, reduce_op
from ._bodies import _host_fn, flatten_bundles
from ._generation import generate_program
from ._ops import READ, RW, WRITE, DataSpec, Op, TaskOp, _same
from ._parents import parent_problems
from ._programs import Program, run_oracle, task_body
from ._running import _place, user_arrays

__all__ = ["check_distributed_program", "run_distributed_program"]

_EDGE_SHAPES: list[tuple[int, ...]] = [(), (), (0,), (3, 0), (0, 2), (5,), (2, 3)]
_EDGE_ORIGINS = ["array", "full", "empty", "empty"]


def _add_edge_reductions(program: Program, rng: random.Random) -> Program:
    """``program`` with one to three more accumulators, of the shapes and origins of
    ``_EDGE_SHAPES`` and ``_EDGE_ORIGINS`` (see the module docstring), and, between
    its operations, tasks and host callbacks on them: reducing into one (reading
    another data), reading one to update another data, waiting for one. A
    never-written accumulator is reduced into before anything else touches it."""
    data = list(program.data)
    initial = dict(program.initial)
    accumulators = _draw_edge_accumulators(rng, data, initial)
    devices = program.devices
    places = [None, None, "host", "managed", *range(devices)]
    initialised = {i for i, spec in enumerate(data) if spec.origin != "empty"}
    ops: list[Any] = []
    for op in [*program.ops, None]:
        while rng.random() < 0.4:
            acc = rng.choice(accumulators)
            readable = [
                i for i in sorted(initialised) if i != acc and data[i].origin != "token"
            ]
            if acc not in initialised or rng.random() < 0.6:  # reduce into acc
                ops.append(_draw_edge_reduce(rng, data, acc, readable, places, devices))
                initialised.add(acc)
                continue
            ops.append(_draw_edge_use(rng, data, acc, readable, places, devices))
        if op is None:
            break
        ops.append(op)
        if isinstance(op, TaskOp):
            initialised.update(i for i, mode, _ in op.deps if mode & WRITE)
    ops.extend(Op("wait", acc) for acc in accumulators if acc in initialised)
    return Program(program.seed, data, ops, devices, initial, list(program.grids))


def _draw_edge_accumulators(
    rng: random.Random, data: list[DataSpec], initial: dict[int, np.ndarray]
) -> list[int]:
    """Append one to three accumulators to ``data`` (their user arrays to
    ``initial``, for those from an array); their indices."""
    accumulators = []
    for _ in range(rng.randint(1, 3)):
        family = rng.choice(["add", "mul"])
        shape = rng.choice(_EDGE_SHAPES)
        dtype = rng.choice(["float32", "float64"])
        origin = rng.choice(_EDGE_ORIGINS)
        fill = rng.choice([1.0, 2.5] if family == "mul" else [0.0, 1.0, 2.5])
        data.append(
            DataSpec(
                shape,
                dtype,
                origin,
                fill=fill if origin == "full" else 0.0,
                accumulator=family,
            )
        )
        if origin == "array":  # dyadic, as the folds: sums exact in any order
            initial[len(data) - 1] = np.full(shape, fill, dtype=dtype)
        accumulators.append(len(data) - 1)
    return accumulators


def _draw_edge_reduce(
    rng: random.Random,
    data: list[DataSpec],
    acc: int,
    readable: list[int],
    places: list[Any],
    devices: int,
) -> TaskOp:
    """A task or host callback reducing into ``acc`` with an operation of its
    family, sometimes reading one of the ``readable`` data too."""
    names = (
        ["sum", "sum", "min", "max"]
        if data[acc].accumulator == "add"
        else ["prod", "prod", "min", "max"]
    )
    kind = "host_launch" if rng.random() < 0.2 else "task"
    host_places = [None, "host", "managed"]
    deps = [
        (
            acc,
            reduce_mode(OPS[rng.choice(names)]),
            rng.choice(host_places if kind == "host_launch" else places),
        )
    ]
    if readable and rng.random() < 0.6:
        deps.append(
            (
                rng.choice(readable),
                READ,
                rng.choice(host_places if kind == "host_launch" else places),
            )
        )
    return TaskOp(
        kind,
        tuple(deps),
        round(rng.uniform(-2, 2), 3),
        "host" if kind == "host_launch" else rng.choice(["host", *range(devices)]),
    )


def _draw_edge_use(
    rng: random.Random,
    data: list[DataSpec],
    acc: int,
    readable: list[int],
    places: list[Any],
    devices: int,
) -> Any:
    """A task reading ``acc`` to update another of the ``readable`` data (one that
    may be written), or, without one or at random, a wait for ``acc``."""
    writable = [i for i in readable if not data[i].readonly and not data[i].accumulator]
    if writable and rng.random() < 0.6:  # read acc, update another
        return TaskOp(
            "task",
            (
                (rng.choice(writable), RW, rng.choice(places)),
                (acc, READ, rng.choice(places)),
            ),
            round(rng.uniform(-2, 2), 3),
            rng.choice(["host", *range(devices)]),
        )
    return Op("wait", acc)


def _oracle_program(program: Program) -> Program:
    """``program`` as the oracle runs it: a never-written accumulator filled with the
    identity of the first reduction into it (where a local context starts it)."""
    data = list(program.data)
    pending = {
        i for i, spec in enumerate(data) if spec.accumulator and spec.origin == "empty"
    }
    for op in program.ops:
        if not pending:
            break
        if isinstance(op, TaskOp):
            for index, mode, _ in op.deps:
                if index in pending and mode & REDUCE:
                    spec = data[index]
                    identity = reduce_op(mode).identity(np.dtype(spec.dtype))
                    data[index] = DataSpec(
                        spec.shape,
                        spec.dtype,
                        "full",
                        fill=float(identity),
                        accumulator=spec.accumulator,
                    )
                    pending.discard(index)
    return Program(
        program.seed, data, program.ops, program.devices, program.initial, program.grids
    )


def _owners(program: Program, size: int) -> tuple[list[int], list[int | None]]:
    """Owners of the data, and the executing rank forced on each task (``None``: the
    default rule), drawn from the program's seed."""
    rng = random.Random(program.seed * 7 + size)
    owners = [rng.randrange(size) for _ in program.data]
    ranks = [
        rng.randrange(size) if isinstance(op, TaskOp) and rng.random() < 0.5 else None
        for op in program.ops
    ]
    return owners, ranks


def run_distributed_program(
    program: Program, comm: Any, backend: str = "emulated", use_graph: bool = False
) -> tuple[list[tuple[int, np.ndarray]], dict[int, np.ndarray], list[int]]:
    """Run ``program`` over ``comm`` (the ranks' local contexts in graph mode with
    ``use_graph``); returns this rank's wait results, its user arrays after
    ``finalize()``, and the owners."""
    import stflow as stf

    owners, ranks = _owners(program, int(comm.Get_size()))
    user = user_arrays(program)
    waits = []
    with stf.distributed_context(comm, backend=backend, use_graph=use_graph) as ctx:
        data: dict[int, Any] = {}
        for i, spec in enumerate(program.data):
            if spec.origin == "token":
                data[i] = ctx.token(owner=owners[i], name=f"d{i}")
            elif spec.origin == "array":
                data[i] = ctx.logical_data(user[i], owner=owners[i], name=f"d{i}")
            elif spec.origin == "full":
                data[i] = ctx.logical_data(
                    np.full(spec.shape or (), spec.fill, dtype=spec.dtype),
                    owner=owners[i],
                    name=f"d{i}",
                )
            else:
                data[i] = ctx.logical_data_empty(
                    spec.shape or (), spec.dtype or "f8", owner=owners[i], name=f"d{i}"
                )
        for op, rank in zip(program.ops, ranks):
            if isinstance(op, TaskOp):
                deps = [
                    _dep(data[index], mode, _place(stf, place))
                    for index, mode, place in op.deps
                ]
                modes = [
                    mode
                    for index, mode, _ in op.deps
                    if program.data[index].origin != "token"
                ]
                if op.bundle is not None:  # fields of different owners, one argument
                    shape = op.bundle
                    group = ctx.bundle(
                        **{
                            name: stf.constant(data[index]) if const else data[index]
                            for name, index, _, const in shape.fields
                        }
                    )
                    where = _place(stf, op.deps[shape.start][2])
                    deps[shape.start : shape.start + shape.count] = [
                        group.dep(where, **dict(shape.explicit))
                        if shape.how == "dep"
                        else getattr(group, shape.how)(where)
                    ]
                if op.kind == "host_launch":
                    ctx.host_launch(*deps, fn=_host_fn(modes, op.coef), rank=rank)
                    continue
                place = (
                    stf.exec_place.host()
                    if op.place_of_exec == "host"
                    else stf.exec_place.device(op.place_of_exec)
                )
                with ctx.task(*deps, rank=rank, place=place) as t:
                    t.run(
                        lambda xp, *arrays, modes=modes, coef=op.coef: task_body(
                            xp, flatten_bundles(arrays), modes, coef
                        )
                    )
            elif op.kind == "wait":
                waits.append((op.data, ctx.wait(data[op.data])))
            elif op.kind == "fence":
                ctx.fence()
    return waits, user, owners


def _dep(data: Any, mode: int, place: Any) -> Any:
    if mode & REDUCE:
        return data.reduce(reduce_op(mode).name, place)
    if mode == 1:
        return data.read(place)
    if mode == 2:
        return data.write(place)
    return data.rw(place)


def check_distributed_program(
    seed: int,
    comm: Any,
    backend: str = "emulated",
    reductions: bool = False,
    use_graph: bool = False,
    edge_reductions: bool = False,
    **options: Any,
) -> None:
    """Run the program of ``seed`` over ``comm`` and compare with the oracle (on
    every rank; collective). ``reductions``: with accumulators (``ld.reduce(op)`` by
    tasks on random ranks, combined across ranks); ``edge_reductions``: with
    accumulators that are 0-d, zero-size or never written
    (``_add_edge_reductions``); ``use_graph``: the ranks' local contexts in
    graph mode.

    Raises
    ------
    AssertionError
        With the program listing and the first differences, on the rank that saw
        them (after every rank finished the program).
    """
    program = generate_program(
        seed, _devices(comm, backend), reductions=reductions, drops=False, **options
    )
    if edge_reductions:
        program = _add_edge_reductions(program, random.Random(seed * 6151 + 29))
    expected = run_oracle(_oracle_program(program))
    waits, final, owners = run_distributed_program(program, comm, backend, use_graph)
    rank = int(comm.Get_rank())
    exact = backend == "emulated"
    problems = []
    if len(waits) != len(expected.waits):
        problems.append(f"{len(waits)} wait results, expected {len(expected.waits)}")
    for number, ((index, got), (_, want)) in enumerate(zip(waits, expected.waits)):
        if not _same(got, want, exact):
            problems.append(
                f"wait #{number} of d{index}: got {got.ravel()[:6]}, "
                f"expected {want.ravel()[:6]}"
            )
    wants = {}
    for index, want in expected.final.items():
        if owners[index] != rank:
            want = program.initial[index]  # another rank's array: untouched
        wants[index] = want
        if not _same(final[index], want, exact):
            problems.append(
                f"user array d{index} (owner {owners[index]}): got "
                f"{final[index].ravel()[:6]}, expected {want.ravel()[:6]}"
            )
    problems += parent_problems(program, final, wants, exact)
    if problems:
        raise AssertionError(
            f"rank {rank} differs from the sequential oracle:\n  "
            + "\n  ".join(problems)
            + "\n"
            + program.describe()
            + f"\nowners: {owners}"
        )


def _devices(comm: Any, backend: str) -> int:
    """The devices the program may name: two, or fewer where a rank has fewer (the
    same on every rank)."""
    from mpi4py import MPI

    from ..backends import get_backend

    return int(comm.allreduce(min(get_backend(backend).device_count, 2), op=MPI.MIN))
