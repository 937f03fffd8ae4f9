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

This module holds the program, its task body and the oracle; beside it,
``_generation`` draws a program from a seed (:func:`generate_program`), ``_parents``
makes the views, ``_bodies`` runs a task's body on each backend, ``_running`` runs a
program through stflow and checks it against the oracle (:func:`run_program`,
:func:`check_program`), and ``_budgets`` finds the memory budgets it runs within.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.reduce import REDUCE, reduce_op
from ..backends._base import poison
from ._grids import GridSpec
from ._ops import READ, RW, WRITE, DataSpec, TaskOp

__all__ = ["Outcome", "Program", "run_oracle", "task_body"]

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
