"""The concurrency differential test: random programs submitted by several host
threads to one context, against the sequential oracle.

A :class:`ThreadedProgram` has data of three kinds:

- *private* data, two or three per thread, that only its thread touches;
- *shared* read-mostly data, read by every thread (read-only logical data);
- *turn* data, written by every thread, each in its turns only: the threads pass a
  turn from one to the next in a drawn order (the user's own ordering), and a thread
  ends its turn by reading back (``ctx.wait``) what it wrote, so its host knows the
  value before it hands over.

Each thread runs its own random sequence of *segments* (tasks, host callbacks, waits,
fences; in a stackable context some segments are graph scopes), some of them turns.

Two more kinds of work target races between threads:

- *mixed accumulators*: user arrays every thread reduces into at any time, with
  ``sum``, ``max``, ``min`` (and ``prod`` on one element), each thread with its own
  operations. Only the sums change the value: a max contribution is below and a min
  contribution above any value the data reaches (the generator bounds the sums; a
  product multiplies by 1), so the result is the same in any interleaving, while a
  partial result combined with another operation than its own (an identity of max,
  ``-inf``, summed) changes it.
- *registrations* (:class:`Scratch`): a thread registers a fresh user array as logical
  data, runs a task on it and drops it (sometimes collecting garbage), so that the
  data is retired while other threads register theirs; its array is checked at the
  end.
The oracle runs every segment sequentially with NumPy, turns in their global order;
since threads share nothing else, any interleaving the runtime allows must give the
same ``wait`` results and the same final user arrays.

This module holds the program and the oracle (:func:`run_threaded_oracle`);
``_threaded_generation`` draws a program from a seed
(:func:`generate_threaded_program`), and ``_threaded_running`` runs it through
stflow and checks it (:func:`check_threaded_program`). Threads run under a watchdog
(``_watchdog``, :func:`run_threads`): a hang is a failure that prints the stacks of
every thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.reduce import reduce_op
from ._grids import GridSpec
from ._ops import DataSpec, TaskOp
from ._programs import Program, task_body

__all__ = [
    "MODES",
    "SCRATCH",
    "Scratch",
    "Segment",
    "ThreadedProgram",
    "run_threaded_oracle",
]

MODES = ("stream", "graph", "scopes")


@dataclass
class Segment:
    """A run of one thread's operations; ``turn``: it may touch the turn data;
    ``scoped``: recorded as a graph scope (stackable contexts)."""

    ops: list[Any]
    turn: bool = False
    scoped: bool = False


SCRATCH = -1
"""The data index of a :class:`Scratch`'s own data in its task's dependencies."""


@dataclass
class Scratch:
    """Register ``initial`` (a fresh copy) as logical data, run ``op`` on it (its
    data ``SCRATCH``, maybe reading shared data), drop it; ``collect``: then collect
    garbage."""

    initial: np.ndarray
    op: TaskOp
    collect: bool = False

    def __str__(self) -> str:
        deps = ", ".join(
            f"{'scratch' if i == SCRATCH else f'd{i}'}.{m}({p!r})"
            for i, m, p in self.op.deps
        )
        return (
            f"register {self.initial.dtype}{list(self.initial.shape)}, "
            f"{self.op.kind}@{self.op.place_of_exec!r}({deps}) c={self.op.coef}, "
            f"drop{', gc' if self.collect else ''}"
        )


@dataclass
class ThreadedProgram:
    seed: int
    mode: str
    data: list[DataSpec]
    private: list[list[int]]  # thread -> its data indices
    shared: list[int]
    turn_data: list[int]
    threads: list[list[Segment]]
    turns: list[tuple[int, int]]  # (thread, segment), in turn order
    devices: int
    initial: dict[int, np.ndarray] = field(default_factory=dict)
    grids: list[GridSpec] = field(default_factory=list)
    mixed: list[int] = field(default_factory=list)  # mixed accumulators

    def as_program(self) -> Program:
        """The data part, as a :class:`Program` (for the shared helpers)."""
        return Program(self.seed, self.data, [], self.devices, self.initial, self.grids)

    def describe(self) -> str:
        lines = [
            f"threaded program seed={self.seed} mode={self.mode} devices={self.devices}"
        ]
        for i, spec in enumerate(self.data):
            role = (
                "shared"
                if i in self.shared
                else "turn"
                if i in self.turn_data
                else "mixed accumulator"
                if i in self.mixed
                else f"private to {[t for t, p in enumerate(self.private) if i in p]}"
            )
            lines.append(f"  d{i} ({role}): {spec}")
        lines.append(f"  turns: {self.turns}")
        for t, segments in enumerate(self.threads):
            lines.append(f"  thread {t}:")
            for s, segment in enumerate(segments):
                flags = (" turn" if segment.turn else "") + (
                    " scoped" if segment.scoped else ""
                )
                lines.append(f"    segment {s}{flags}:")
                for op in segment.ops:
                    lines.append(f"      {op}")
        return "\n".join(lines)


# -- the oracle -------------------------------------------------------------------------


def run_threaded_oracle(
    program: ThreadedProgram,
) -> tuple[list[list[np.ndarray]], dict[Any, np.ndarray]]:
    """Every thread's ``wait`` results, and the final user arrays (those of
    :class:`Scratch` work keyed ``(thread, number)``), sequentially."""
    values: dict[int, np.ndarray] = {}
    for i, spec in enumerate(program.data):
        if spec.origin == "array":
            values[i] = program.initial[i].copy()
        else:
            values[i] = np.full(spec.shape or (), spec.fill, dtype=spec.dtype)
    waits: list[list[np.ndarray]] = [[] for _ in program.threads]
    done = [0] * len(program.threads)
    scratch: dict[Any, np.ndarray] = {}

    def run_segments(t: int, upto: int) -> None:
        while done[t] < upto:
            for op in program.threads[t][done[t]].ops:
                if isinstance(op, Scratch):
                    value = op.initial.copy()
                    task_body(
                        np,
                        [value if i == SCRATCH else values[i] for i, _, _ in op.op.deps],
                        [m for _, m, _ in op.op.deps],
                        op.op.coef,
                    )
                    scratch[(t, len([k for k in scratch if k[0] == t]))] = value
                elif isinstance(op, TaskOp) and op.deps[0][0] in program.mixed:
                    ((index, mode, _),) = op.deps  # a private view: the identity
                    operation = reduce_op(mode)
                    value = values[index]
                    private = np.full(
                        value.shape, operation.identity(value.dtype), dtype=value.dtype
                    )
                    task_body(np, [private], [mode], op.coef)
                    operation.ufunc(value, private, out=value)
                elif isinstance(op, TaskOp):
                    task_body(
                        np,
                        [values[i] for i, _, _ in op.deps],
                        [m for _, m, _ in op.deps],
                        op.coef,
                    )
                elif op.kind == "wait":
                    waits[t].append(values[op.data].copy())
            done[t] += 1

    for t, s in program.turns:
        run_segments(t, s + 1)
    for t, segments in enumerate(program.threads):
        run_segments(t, len(segments))
    final: dict[Any, np.ndarray] = {
        i: values[i] for i, spec in enumerate(program.data) if spec.origin == "array"
    }
    final.update(scratch)
    return waits, final
