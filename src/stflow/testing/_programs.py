"""Random task programs and their sequential NumPy oracle (the differential test).

A :class:`Program` is a plain description: some logical data (from user arrays, by
``logical_data_full`` / ``zeros``, empty, or tokens) and a list of operations (tasks on
random execution places with random access modes and data-place overrides, host
callbacks, ``wait``, ``fence``, dropping a logical data early). :func:`run_oracle`
executes it sequentially with NumPy; :func:`run_program` executes it through stflow.
Both apply the same :func:`task_body` to the same bytes, so on the emulated backend the
results must be identical bit for bit; on CUDA the bodies may fuse multiply-adds, so
:func:`check_program` compares with a small tolerance there.

Task bodies read three elements of every input (first, middle, last) and rewrite every
element of every output, so a stale copy, a missing copy or a race shows up.

Strided data: some user arrays are views of larger *parent* arrays
(:func:`add_views`): a view with steps and offsets of its own parent, or several data
sharing one parent, side by side as tiles of a matrix or interleaved row by row. The
bytes of a parent outside its views hold values drawn from the seed, and every check
compares the whole parent (:func:`parent_problems`): a write-back may touch the
view's elements only.

Reductions: some data are *accumulators*, only reduced into (``reduce`` with sum, min
or max, or with prod, min or max) and read. A reducing body folds a contribution of
small dyadic values (quarters; powers of two for prod) into its view, which holds the
identity; the oracle folds each task's result into the data in program order. Sums of
such values are exact in any order, so the runtime may combine partial results as it
likes and still match bit for bit.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.reduce import OPS, REDUCE, reduce_mode, reduce_op
from ..backends._base import poison
from ._grids import Built, GridSpec, add_grids
from ._ops import READ, RW, WRITE, BundleSpec, DataSpec, Op, TaskOp, _same
from ._parents import _parent_values, _view_index, add_views, parent_problems

__all__ = [
    "DataSpec",
    "Program",
    "TaskOp",
    "add_views",
    "check_program",
    "generate_program",
    "parent_problems",
    "run_oracle",
    "run_program",
    "smallest_budget",
    "task_body",
]

_MODE_NAMES = {READ: "read", WRITE: "write", RW: "rw"}


@dataclass
class Program:
    seed: int
    data: list[DataSpec]
    ops: list[Any]
    devices: int
    initial: dict[int, np.ndarray] = field(default_factory=dict)
    grids: list[GridSpec] = field(default_factory=list)

    def describe(self) -> str:
        """A readable listing, printed when a check fails."""
        lines = [f"program seed={self.seed} devices={self.devices}"]
        for i, spec in enumerate(self.data):
            lines.append(f"  d{i}: {spec}")
        for i, grid in enumerate(self.grids):
            lines.append(f"  grid{i}: {grid}")
        for op in self.ops:
            if isinstance(op, TaskOp):
                deps = ", ".join(f"d{i}.{_mode_text(m)}({p!r})" for i, m, p in op.deps)
                member = (
                    f" member {op.member}" if isinstance(op.place_of_exec, tuple) else ""
                )
                lines.append(
                    f"  {op.kind}@{op.place_of_exec!r}{member}"
                    f"{' launch' if op.launch else ''}({deps}) c={op.coef}"
                )
                if op.bundle is not None:
                    lines.append(
                        f"    deps {op.bundle.start}..{op.bundle.start + op.bundle.count - 1}"
                        f" as a bundle: {op.bundle}"
                    )
            else:
                lines.append(
                    f"  {op.kind} d{op.data}" if op.data >= 0 else f"  {op.kind}"
                )
        return "\n".join(lines)


def _mode_text(mode: int) -> str:
    if mode & REDUCE:
        return f"reduce[{reduce_op(mode).name}]"
    return _MODE_NAMES[mode]


def task_body(xp: Any, arrays: Sequence[Any], modes: Sequence[int], coef: float) -> None:
    """The computation of every generated task, for NumPy (``xp=numpy``) or CuPy.

    Reads three samples of each input, then rewrites each output: ``rw`` outputs as
    ``0.5 * old + base``, ``write`` outputs as ``ramp + base``; folds a dyadic
    contribution into each reduction's view (see the module docstring).
    """
    total = None
    for array, mode in zip(arrays, modes):
        if mode & READ and array.size:
            flat = array.reshape(-1)
            sample = (
                flat[0].astype(xp.float64)
                + flat[flat.size // 2].astype(xp.float64)
                + flat[-1].astype(xp.float64)
            )
            total = sample if total is None else total + sample
    # A Python float, not an array: no host-to-device transfer, which a body recorded
    # into a CUDA graph could not make (the host value would be read at replay).
    base: Any = float(coef)
    if total is not None:
        base = total * 0.1 + base
    for array, mode in zip(arrays, modes):
        if mode & REDUCE and array.size:
            _fold(xp, array, reduce_op(mode), base)
            continue
        if not mode & WRITE or not array.size:
            continue
        if mode == RW:
            new = array.astype(xp.float64) * 0.5 + base
        else:
            ramp = xp.arange(array.size, dtype=xp.float64).reshape(array.shape)
            new = ramp * 0.001 + base
        array[...] = new.astype(array.dtype)


def _fold(xp: Any, array: Any, op: Any, base: Any) -> None:
    """``array = op(array, contribution)``: quarters in [-8, 10] (``sum``, ``min``,
    ``max``), or 2, 1/2 and 1 (``prod``); NaN when ``base`` is."""
    index = xp.arange(array.size, dtype=xp.float64).reshape(array.shape)
    nan_guard = base * 0.0 + 1.0
    if op.name == "prod":
        k = (index + xp.floor(base)) % 3
        contribution = xp.where(k == 0, 2.0, xp.where(k == 1, 0.5, 1.0)) * nan_guard
    else:
        contribution = (
            xp.clip(xp.floor(base * 4.0) / 4.0, -8.0, 8.0) + index % 3
        ) * nan_guard
    op.ufunc(array, contribution.astype(array.dtype), out=array)


# -- generation ------------------------------------------------------------------


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


# -- the oracle ------------------------------------------------------------------


@dataclass
class Outcome:
    """What a run observed: every ``wait`` result, and the final user arrays."""

    waits: list[tuple[int, np.ndarray]]
    final: dict[int, np.ndarray]


def run_oracle(program: Program) -> Outcome:
    """Run ``program`` sequentially with NumPy."""
    values: dict[int, np.ndarray | None] = {}
    for i, spec in enumerate(program.data):
        if spec.origin == "array":
            values[i] = program.initial[i].copy()
        elif spec.origin == "full":
            values[i] = np.full(spec.shape or (), spec.fill, dtype=spec.dtype)
        elif spec.origin == "empty":
            # What the emulated and null backends give data never written (memory an
            # oracle left to np.empty would hold whatever the heap held before).
            empty = np.empty(spec.shape or (), dtype=spec.dtype or "f8")
            poison(empty.reshape(-1).view(np.uint8), empty.dtype)
            values[i] = empty
        else:
            values[i] = None
    waits = []
    for op in program.ops:
        if isinstance(op, TaskOp):
            arrays, modes, folds = [], [], []
            for index, mode, _ in op.deps:
                value = values[index]
                if value is None:
                    continue
                if mode & REDUCE:  # a private view holding the identity
                    operation = reduce_op(mode)
                    private = np.full(
                        value.shape, operation.identity(value.dtype), dtype=value.dtype
                    )
                    folds.append((operation, value, private))
                    value = private
                arrays.append(value)
                modes.append(mode)
            task_body(np, arrays, modes, op.coef)
            for operation, value, private in folds:
                operation.ufunc(value, private, out=value)
        elif op.kind == "wait":
            waits.append((op.data, values[op.data].copy()))  # type: ignore[union-attr]
    final = {
        i: values[i] for i, spec in enumerate(program.data) if spec.origin == "array"
    }
    return Outcome(waits, final)  # type: ignore[arg-type]


# -- running through stflow ------------------------------------------------------

BodyRunner = Callable[[Any, TaskOp, list[int]], None]
"""``body(task, op, modes)``: run the body of a generated task inside its window."""


def emulated_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for the emulated backend: direct host access or a launch."""
    _emulated(t, op, modes, op.launch)


def host_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for the null backend: direct host access (its device memory is
    host memory and all earlier work has completed when a body runs)."""
    _emulated(t, op, modes, False)


def emulated_graph_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for graph mode on the emulated backend: always a launch (what a
    captured body enqueues is recorded; direct host access is refused)."""
    _emulated(t, op, modes, True)


def launched_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for graph mode on the null backend: the work launched on the
    body's stream (``Backend.launch_callable``), which a capture records."""
    from .._interchange.views import stream_handle

    native = t._runtime.backend.native
    stream = native.stream_from_handle(stream_handle(_body_stream(t, op)))

    def kernel(*arrays: np.ndarray) -> None:
        task_body(np, arrays, modes, op.coef)

    native.launch_callable(stream, kernel, tuple(_task_views(t, op)), "a generated task")


def body_for(backend: str, recorded: bool) -> BodyRunner:
    """The body strategy for ``backend``, for tasks that may be recorded into graphs
    (graph mode, scopes) or not."""
    if backend == "cuda":
        return cupy_body
    if backend == "null":
        return launched_body if recorded else host_body
    return emulated_graph_body if recorded else emulated_body


def _body_stream(t: Any, op: TaskOp) -> Any:
    """The stream a body enqueues on: on a grid, that of member ``op.member``."""
    if isinstance(op.place_of_exec, tuple):
        return t.get_stream_at_index(op.member)
    return t.stream_ptr()


def _task_views(t: Any, op: TaskOp) -> list[Any]:
    """The body's views in dependency order (a bundle's fields flattened)."""
    if op.bundle is not None:
        return flatten_bundles(t.views())
    views = t.args_cai()
    return [] if views is None else list(views) if isinstance(views, tuple) else [views]


def flatten_bundles(values: Any) -> list[Any]:
    """``values`` with each bundle's named tuple replaced by its fields' values
    (fields without memory, ``None``, left out)."""
    from .._handles.bundles import is_view

    flat: list[Any] = []
    for value in values:
        if is_view(value):
            flat.extend(v for v in value if v is not None)
        else:
            flat.append(value)
    return flat


def _emulated(t: Any, op: TaskOp, modes: list[int], launched: bool) -> None:
    if (
        launched
        and op.bundle is not None
        and op.bundle.run
        and not isinstance(op.place_of_exec, tuple)
    ):
        t.run(lambda xp, *arrays: task_body(xp, flatten_bundles(arrays), modes, op.coef))
        return
    views = _task_views(t, op)
    if launched:
        from ..emulated import launch

        def kernel(*arrays: np.ndarray) -> None:
            task_body(np, arrays, modes, op.coef)

        launch(_body_stream(t, op), kernel, *views)
    else:
        task_body(np, [np.asarray(v) for v in views], modes, op.coef)


def cupy_body(t: Any, op: TaskOp, modes: list[int]) -> None:
    """Body strategy for the CUDA backend: CuPy kernels on the task stream.

    Device kernels reach every place an instance can be in (device memory, and pinned
    host or managed memory through unified addressing), so host tasks use CuPy too.
    """
    import cupy

    from ..interop.cupy import as_cupy, cupy_stream

    views = _task_views(t, op)
    with cupy_stream(_body_stream(t, op)):
        task_body(cupy, [as_cupy(v) for v in views], modes, op.coef)


def _place(stf: Any, place: Any, built: Built | None = None) -> Any:
    if place is None:
        return None
    if isinstance(place, tuple):
        assert built is not None
        return built.dep_place(place)
    if place == "host":
        return stf.data_place.host()
    if place == "managed":
        return stf.data_place.managed()
    return stf.data_place.device(place)


def user_arrays(program: Program) -> dict[int, np.ndarray]:
    """Fresh copies of the program's user arrays (read-only where the spec says);
    views are made in fresh parent arrays (:func:`add_views`)."""
    user = {}
    parents: dict[int, np.ndarray] = {}
    for i, array in program.initial.items():
        spec = program.data[i]
        if spec.view is None:
            user[i] = array.copy()
            continue
        number = spec.view[0]
        if number not in parents:
            parents[number] = _parent_values(program, number, spec)
        view = parents[number][_view_index(spec)]
        view[...] = array
        user[i] = view
    for i, spec in enumerate(program.data):
        if spec.readonly:
            user[i].setflags(write=False)
    return user


def declare_data(
    stf: Any, ctx: Any, program: Program, user: dict[int, np.ndarray]
) -> dict[int, Any]:
    """The program's logical data in ``ctx`` (a context or a stackable context)."""
    lds: dict[int, Any] = {}
    for i, spec in enumerate(program.data):
        if spec.origin == "array":
            lds[i] = ctx.logical_data(user[i], name=f"d{i}")
        elif spec.origin == "full":
            exec_place = None
            if spec.fill_place == "host":
                exec_place = stf.exec_place.host()
            elif spec.fill_place is not None:
                exec_place = stf.exec_place.device(spec.fill_place)
            lds[i] = ctx.logical_data_full(
                spec.shape,
                spec.fill,
                dtype=spec.dtype,
                exec_place=exec_place,
                name=f"d{i}",
            )
        elif spec.origin == "empty":
            lds[i] = ctx.logical_data_empty(spec.shape, spec.dtype, name=f"d{i}")
        else:
            lds[i] = ctx.token()
    return lds


def run_program(
    program: Program,
    backend: str = "emulated",
    body: BodyRunner | None = None,
    use_graph: bool = False,
    memory_budget: Any = None,
) -> Outcome:
    """Run ``program`` through stflow on ``backend`` (in graph mode with
    ``use_graph``, within ``memory_budget`` bytes per device); returns what it
    observed."""
    import stflow as stf

    if body is None:
        body = body_for(backend, use_graph)
    user = user_arrays(program)
    waits = []
    with stf.context(
        backend=backend, use_graph=use_graph, memory_budget=memory_budget
    ) as ctx:
        lds = declare_data(stf, ctx, program, user)
        for op in program.ops:
            if isinstance(op, TaskOp):
                submit(stf, ctx, program, op, lds, body)  # keeps no reference
            elif op.kind == "wait":
                waits.append((op.data, ctx.wait(lds[op.data])))
            elif op.kind == "fence":
                ctx.fence()
            elif op.kind == "drop":
                del lds[op.data]
    final = {i: user[i] for i in program.initial}
    return Outcome(waits, final)


def submit(
    stf: Any,
    ctx: Any,
    program: Program,
    op: TaskOp,
    lds: dict[int, Any],
    body: BodyRunner,
) -> None:
    """Submit one task or host callback; nothing of it outlives the call, so a later
    ``drop`` really drops the data (its retirement is then exercised)."""
    built = _built(stf, program) if program.grids else None
    deps: list[Any] = []
    modes = []
    for index, mode, place in op.deps:
        deps.append(stf.dep(lds[index], mode, _place(stf, place, built)))
        if program.data[index].origin != "token":
            modes.append(mode)
    if op.bundle is not None:
        spec = op.bundle
        fields = {
            name: stf.constant(lds[index]) if const else lds[index]
            for name, index, _, const in spec.fields
        }
        group = ctx.bundle(**fields)
        where = _place(stf, op.deps[spec.start][2], built)
        if spec.how == "dep":
            made = group.dep(where, **dict(spec.explicit))
        else:
            made = getattr(group, spec.how)(where)
        deps[spec.start : spec.start + spec.count] = [made]
    if op.kind == "host_launch":
        ctx.host_launch(*deps, fn=_host_fn(modes, op.coef))
        return
    if isinstance(op.place_of_exec, tuple):
        assert built is not None
        place = built.exec_place(op.place_of_exec)
    else:
        place = (
            stf.exec_place.host()
            if op.place_of_exec == "host"
            else stf.exec_place.device(op.place_of_exec)
        )
    with ctx.task(place, *deps) as t:
        body(t, op, modes)


_BUILT: dict[int, tuple[Program, Built]] = {}
_BUILT_LOCK = threading.Lock()


def _built(stf: Any, program: Program) -> Built:
    """The grids and places of ``program``, built once (kept for the last few
    programs; threads submitting one program share them)."""
    with _BUILT_LOCK:
        kept = _BUILT.get(id(program))
        if kept is None or kept[0] is not program:
            if len(_BUILT) > 8:
                _BUILT.clear()
            kept = _BUILT[id(program)] = (program, Built(stf, program.grids))
        return kept[1]


def _nbytes(spec: DataSpec) -> int:
    if spec.shape is None:
        return 0
    return int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize


def task_working_sets(
    program: Program, ops: Sequence[Any] | None = None
) -> list[dict[int, set[int]]]:
    """For every task of ``ops`` (default: the program's): device -> the data it
    needs there."""
    sets = []
    for op in program.ops if ops is None else ops:
        if not isinstance(op, TaskOp) or op.kind != "task":
            continue
        at: dict[int, set[int]] = {}
        for index, _, place in op.deps:
            if program.data[index].shape is None:
                continue
            for device in _devices_of(program, op.place_of_exec, place):
                at.setdefault(device, set()).add(index)
        sets.append(at)
    return sets


def _devices_of(program: Program, exec_place: Any, place: Any) -> list[Any]:
    """The devices whose memory budget a dependency at ``place`` of a task on
    ``exec_place`` uses (composite memory is outside the budgets)."""
    grid = program.grids[exec_place[1]] if isinstance(exec_place, tuple) else None
    if place is None:
        if grid is None:
            return [exec_place] if isinstance(exec_place, int) else []
        return [grid.members[0]] if grid.affine == "device" else []
    if isinstance(place, tuple):
        if place[0] != "replicated":
            return []
        if place[1] is not None:
            return list(program.grids[place[1]].members)
        if grid is not None:
            return list(grid.members)
        return [exec_place] if isinstance(exec_place, int) else []
    return [place] if isinstance(place, int) else []


def smallest_budget(program: Program, groups: Sequence[set[int]] = ()) -> int:
    """The smallest device memory budget ``program`` runs within: the largest
    working set of one task at one device, or of one group of data that must stay
    resident together (the data of an open scope, ``groups``)."""
    need = 0
    for at in task_working_sets(program):
        for indices in at.values():
            need = max(need, sum(_nbytes(program.data[i]) for i in indices))
    for spec in program.data:  # logical_data_full fills on a device
        if spec.origin == "full" and spec.fill_place != "host":
            need = max(need, _nbytes(spec))
    # Partial results of reductions wait in private instances until combined (into
    # the data and a moved copy): room for all of them, at worst on one device.
    reductions = [0] * len(program.data)
    for op in program.ops:
        if isinstance(op, TaskOp):
            for index, mode, _ in op.deps:
                if mode & REDUCE:
                    reductions[index] += 1
    need += sum(
        (count + 2) * _nbytes(program.data[index])
        for index, count in enumerate(reductions)
        if count
    )
    for group in groups:
        need = max(need, sum(_nbytes(program.data[i]) for i in group))
    return need


def tight_budget(seed: int, smallest: int) -> int:
    """A budget drawn from ``seed`` between ``smallest`` and 1.5 times it."""
    return smallest + random.Random(seed * 31 + 7).randint(0, smallest // 2)


def _host_fn(modes: list[int], coef: float) -> Callable[..., None]:
    def fn(*arrays: np.ndarray) -> None:
        task_body(np, flatten_bundles(arrays), modes, coef)

    return fn


def check_program(
    program: Program,
    backend: str = "emulated",
    body: BodyRunner | None = None,
    exact: bool | None = None,
    use_graph: bool = False,
    memory_budget: Any = None,
) -> None:
    """Run ``program`` through stflow and the oracle; raise if they differ.

    ``memory_budget`` (bytes per device) makes the runtime evict; it must hold the
    data of any one task at one place (:func:`smallest_budget`). ``"tight"`` draws
    one from the program's seed between that smallest budget and 1.5 times it.

    Raises
    ------
    AssertionError
        With the program listing and the first difference.
    """
    if exact is None:
        exact = backend == "emulated"
    expected = run_oracle(program)
    if memory_budget == "tight":
        memory_budget = tight_budget(program.seed, smallest_budget(program))
    actual = run_program(program, backend, body, use_graph, memory_budget)
    problems = []
    if len(actual.waits) != len(expected.waits):
        problems.append(
            f"{len(actual.waits)} wait results, expected {len(expected.waits)}"
        )
    for number, ((index, got), (_, want)) in enumerate(zip(actual.waits, expected.waits)):
        if not _same(got, want, exact):
            problems.append(
                f"wait #{number} of d{index}: got {got.ravel()[:6]}..., "
                f"expected {want.ravel()[:6]}..."
            )
    for index, want in expected.final.items():
        got = actual.final[index]
        if not _same(got, want, exact):
            problems.append(
                f"final user array d{index}: got {got.ravel()[:6]}..., "
                f"expected {want.ravel()[:6]}..."
            )
    problems += parent_problems(program, actual.final, expected.final, exact)
    if problems:
        budget = "" if memory_budget is None else f"\nmemory budget: {memory_budget}"
        raise AssertionError(
            "stflow differs from the sequential oracle:\n  "
            + "\n  ".join(problems)
            + "\n"
            + program.describe()
            + budget
        )
