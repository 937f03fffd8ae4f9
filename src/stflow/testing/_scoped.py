"""The differential test for scopes: random programs with graph scopes, loops and
launchable graphs, against the sequential oracle with the repetitions unrolled.

:func:`generate_scoped_program` draws a program (:func:`generate_program`) and wraps
random runs of its tasks in scopes of a ``stackable_context``: ``graph_scope``,
``repeat(k)``, ``while_loop`` (counting ``k`` iterations down in device memory) and, at
the root, ``launchable_graph_scope`` launched ``k`` times; scopes nest ``depth`` deep
(two by default; deeper nestings such as ``repeat > graph_scope > repeat >
while_loop`` come with ``depth=3`` or more, and with them ``repeat(0)`` bodies).
``wait`` has no stackable counterpart, so final user buffers are compared; host
callbacks, fences and drops stay at the root level.

With ``abandon=True`` the program stops at a random point: one or two scopes are
opened with ``push()``, some of the tasks that follow are recorded in them, and the
``with`` block raises. The open scopes are discarded (with a warning) and the root
level finalized, so the user buffers must hold what the program before that point
computed (:func:`abandon_point`).
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.access import READ, WRITE
from ._bodies import BodyRunner, body_for
from ._budgets import smallest_budget, tight_budget
from ._generation import generate_program
from ._ops import TaskOp, _same
from ._parents import parent_problems
from ._programs import Outcome, Program, run_oracle
from ._running import declare_data, submit, user_arrays

__all__ = [
    "Scoped",
    "abandon_point",
    "check_scoped_program",
    "generate_scoped_program",
    "smallest_scoped_budget",
]

KINDS = ("graph", "repeat", "while", "launchable")


@dataclass
class Scoped:
    """A scope of a scoped program: ``kind``, its count ``k`` and what it holds."""

    kind: str
    k: int
    items: list[Any] = field(default_factory=list)

    def times(self) -> int:
        return 1 if self.kind in ("graph", "flat") else self.k


def generate_scoped_program(
    seed: int,
    devices: int = 2,
    *,
    single_device_loops: bool = False,
    depth: int = 2,
    **options: Any,
) -> tuple[Program, list[Any]]:
    """A program and its ops arranged in scopes (nested lists of ops and
    :class:`Scoped`).

    ``single_device_loops`` keeps loops and nested graph scopes (conditional graph
    nodes) to tasks on device 0, as CUDA requires of a conditional node's body.
    ``depth`` is the deepest nesting of scopes (``1``: no nesting); the programs of
    the default ``2`` do not depend on it.
    """
    if depth < 1:
        raise ValueError(
            f"depth is the deepest nesting of scopes, at least 1, not {depth}"
        )
    program = generate_program(seed, devices, **options)
    rng = random.Random(seed * 7919 + 1)
    ops = [
        op for op in program.ops if not (not isinstance(op, TaskOp) and op.kind == "wait")
    ]
    longest = 6 if depth <= 2 else 4 * depth  # room for deeper nestings
    items: list[Any] = []
    i = 0
    while i < len(ops):
        op = ops[i]
        if _scopable(op) and rng.random() < 0.35:
            span: list[Any] = []
            while (
                i < len(ops) and _scopable(ops[i]) and len(span) < rng.randint(1, longest)
            ):
                span.append(ops[i])
                i += 1
            items.append(
                _wrap(
                    span,
                    rng,
                    root=True,
                    single=single_device_loops,
                    depth=depth,
                    nest=0.4 if depth <= 2 else 0.8,
                )
            )
            continue
        items.append(op)
        i += 1
    _keep_first_writes(program, items)
    return program, items


def _keep_first_writes(program: Program, items: list[Any]) -> None:
    """Give ``repeat(1)`` to each ``repeat(0)`` that would leave empty data unwritten
    where the program reads it.

    :func:`generate_program` writes empty data (``logical_data_empty``) before any
    task reads it; a ``repeat(0)`` holding that first write would make the read see
    memory nobody wrote: the poison pattern on the emulated and null backends, garbage
    on a GPU, nothing an oracle can match on every backend. Changes no ``rng`` draw,
    so programs without such a ``repeat(0)`` stay as they were.
    """
    while True:
        unwritten = _first_unwritten_read(program, _unrolled(items))
        if unwritten is None:
            return
        scope = _skipped_write(items, unwritten)
        assert scope is not None, "a read of unwritten data with no repeat(0) before it"
        scope.k = 1


def _first_unwritten_read(program: Program, ops: list[Any]) -> int | None:
    """The first empty data that ``ops`` (an unrolled program) read before writing."""
    written = {index for index, spec in enumerate(program.data) if spec.origin != "empty"}
    for op in ops:
        if not isinstance(op, TaskOp):
            continue
        for index, mode, _ in op.deps:
            if index not in written and mode & READ:
                return index
        written.update(index for index, mode, _ in op.deps if mode & WRITE)
    return None


def _skipped_write(items: list[Any], index: int) -> Scoped | None:
    """The outermost ``repeat(0)`` (first in program order) that holds a write of data
    ``index``."""
    for item in items:
        if isinstance(item, Scoped):
            if item.kind == "repeat" and item.k == 0 and _writes(item.items, index):
                return item
            found = _skipped_write(item.items, index)
            if found is not None:
                return found
    return None


def _writes(items: list[Any], index: int) -> bool:
    return any(
        _writes(item.items, index)
        if isinstance(item, Scoped)
        else isinstance(item, TaskOp)
        and any(i == index and mode & WRITE for i, mode, _ in item.deps)
        for item in items
    )


def _scopable(op: Any) -> bool:
    return isinstance(op, TaskOp) and op.kind == "task"


def _wrap(
    span: list[Any], rng: random.Random, root: bool, single: bool, depth: int, nest: float
) -> Scoped:
    kinds: tuple[str, ...] = KINDS if root else KINDS[:3]
    if single and any(op.place_of_exec != 0 for op in span):
        kinds = ("graph", "launchable") if root else ()
    if not kinds:  # cannot nest here: record it at the parent level
        return Scoped("flat", 1, span)
    kind = rng.choice(kinds)
    scope = Scoped(kind, rng.randint(1, 3))
    if nest != 0.4 and kind == "repeat" and rng.random() < 0.15:
        scope.k = 0  # deep programs: bodies that never run too
    if depth > 1 and len(span) > 1 and rng.random() < nest:
        start = rng.randrange(len(span))
        stop = rng.randint(start + 1, len(span))
        scope.items = [
            *span[:start],
            _wrap(span[start:stop], rng, False, single, depth - 1, nest),
            *span[stop:],
        ]
    else:
        scope.items = span
    return scope


def _unrolled(items: list[Any]) -> list[Any]:
    ops: list[Any] = []
    for item in items:
        if isinstance(item, Scoped):
            for _ in range(item.times()):
                ops.extend(_unrolled(item.items))
        else:
            ops.append(item)
    return ops


def _recorded(items: list[Any]) -> list[Any]:
    """The ops of ``items`` as recorded: each once, those of ``repeat(0)`` bodies too
    (recorded, then discarded, their instances allocated all the same)."""
    ops: list[Any] = []
    for item in items:
        ops.extend(_recorded(item.items) if isinstance(item, Scoped) else [item])
    return ops


def smallest_scoped_budget(program: Program, items: list[Any]) -> int:
    """The smallest device memory budget a scoped program runs within: data an open
    scope recorded work on stays resident until the scope closes, so every top-level
    scope's data must fit at once (plus a loop counter or two)."""
    groups = []
    for item in items:
        if isinstance(item, Scoped):
            touched: set[int] = set()
            for op in _recorded([item]):
                if isinstance(op, TaskOp):
                    touched.update(
                        index
                        for index, _, _ in op.deps
                        if program.data[index].shape is not None
                    )
            groups.append(touched)
    return smallest_budget(program, groups) + 64


class _Abandoned(Exception):
    """Raised by an abandoned scoped program with its scopes open."""


def abandon_point(seed: int, items: list[Any]) -> tuple[int, list[list[TaskOp]]]:
    """Where the program of ``items`` is abandoned: the number of top-level items
    run first, then the tasks recorded in each of one or two ``push()`` scopes
    (drawn from the tasks that follow, in their order; nothing of them runs)."""
    rng = random.Random(seed * 7333 + 11)
    cut = rng.randint(0, len(items))
    following = [op for op in _unrolled(items[cut:]) if _scopable(op)]
    levels: list[list[TaskOp]] = []
    for _ in range(rng.randint(1, 2)):
        count = rng.randint(0, 4)
        levels.append(following[:count])
        following = following[count:]
    return cut, levels


def run_scoped_program(
    program: Program,
    items: list[Any],
    backend: str = "emulated",
    body: BodyRunner | None = None,
    memory_budget: Any = None,
    abandon: list[list[TaskOp]] | None = None,
) -> dict[int, np.ndarray]:
    """Run a scoped program through a ``stackable_context``; returns the final user
    arrays. ``abandon``: then push a scope per list, record its tasks, and raise
    inside the ``with`` block (the warning that the scopes were discarded is
    checked)."""
    import stflow as stf

    if body is None:
        body = body_for(backend, True)
    user = user_arrays(program)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with stf.stackable_context(
                backend=backend, memory_budget=memory_budget
            ) as sctx:
                lds = declare_data(stf, sctx, program, user)
                _run_items(stf, sctx, program, items, lds, body, backend)
                if abandon is not None:
                    for level in abandon:
                        sctx.push()
                        for op in level:
                            submit(stf, sctx, program, op, lds, body)
                    raise _Abandoned
        except _Abandoned:
            pass
    messages = [str(warning.message) for warning in caught]
    if abandon is not None and not any(
        f"raised _Abandoned with {len(abandon)} open scope(s)" in message
        for message in messages
    ):
        raise AssertionError(
            f"no warning that {len(abandon)} open scope(s) were "
            f"discarded; the warnings: {messages}"
        )
    for warning in caught:  # the others, as they came
        if not str(warning.message).startswith("stackable_context: the with block"):
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return user


def _run_items(
    stf: Any,
    sctx: Any,
    program: Program,
    items: list[Any],
    lds: dict[int, Any],
    body: BodyRunner,
    backend: str,
) -> None:
    for item in items:
        if isinstance(item, Scoped):
            _run_scope(stf, sctx, program, item, lds, body, backend)
        elif isinstance(item, TaskOp):
            submit(stf, sctx, program, item, lds, body)
        elif item.kind == "fence":
            sctx.fence()
        elif item.kind == "drop":
            del lds[item.data]


def _run_scope(
    stf: Any,
    sctx: Any,
    program: Program,
    scope: Scoped,
    lds: dict[int, Any],
    body: BodyRunner,
    backend: str,
) -> None:
    inner = (stf, sctx, program, scope.items, lds, body, backend)
    if scope.kind == "flat":
        _run_items(*inner)
    elif scope.kind == "graph":
        with sctx.graph_scope():
            _run_items(*inner)
    elif scope.kind == "repeat":
        with sctx.repeat(scope.k):
            _run_items(*inner)
    elif scope.kind == "while":
        # Filled in the enclosing scope, so that an enclosing loop refills it.
        counter = sctx.logical_data_full((1,), scope.k, dtype=np.int64, name="counter")
        with sctx.while_loop() as loop:
            _run_items(*inner)
            with sctx.task(counter.rw()) as t:
                _decrement(t, backend)
            loop.continue_while(counter > 0)
    else:
        with sctx.launchable_graph_scope() as lg:
            _run_items(*inner)
            for _ in range(scope.k):
                lg.launch()


def _decrement(t: Any, backend: str) -> None:
    if backend == "cuda":
        from ..interop.cupy import as_cupy, cupy_stream

        with cupy_stream(t.stream_ptr()):
            as_cupy(t.get_arg_cai(0))[...] -= 1
        return
    t.run(lambda xp, a: a.__isub__(1), 0)  # emulated, null: enqueued, recorded


def check_scoped_program(
    seed: int,
    devices: int = 2,
    backend: str = "emulated",
    body: BodyRunner | None = None,
    exact: bool | None = None,
    memory_budget: Any = None,
    abandon: bool = False,
    **options: Any,
) -> None:
    """Run the scoped program of ``seed`` and the unrolled oracle; raise
    ``AssertionError`` (with both listings) if a final user buffer differs.

    ``memory_budget="tight"`` runs within a random budget between the smallest the
    program fits in (:func:`smallest_scoped_budget`) and 1.5 times that.
    ``abandon``: the program raises with scopes open at a random point
    (:func:`abandon_point`); the oracle runs what came before."""
    if exact is None:
        exact = backend == "emulated"
    program, items = generate_scoped_program(
        seed, devices, single_device_loops=backend == "cuda", **options
    )
    pushed: list[list[TaskOp]] | None = None
    run = items
    if abandon:
        cut, pushed = abandon_point(seed, items)
        run = items[:cut]
    unrolled = Program(
        program.seed, program.data, _unrolled(run), devices, program.initial
    )
    expected: Outcome = run_oracle(unrolled)
    if memory_budget == "tight":
        recorded = run + [
            Scoped("graph", 1, [op for level in pushed or [] for op in level])
        ]
        memory_budget = tight_budget(seed, smallest_scoped_budget(program, recorded))
    actual = run_scoped_program(program, run, backend, body, memory_budget, pushed)
    problems = [
        f"final user array d{index}: got {actual[index].ravel()[:6]}..., "
        f"expected {want.ravel()[:6]}..."
        for index, want in expected.final.items()
        if not _same(actual[index], want, exact)
    ]
    problems += parent_problems(program, actual, expected.final, exact)
    if problems:
        abandoned = (
            ""
            if pushed is None
            else f"\nabandoned after {len(run)} items, with push() scopes "
            f"recording: {pushed}"
        )
        raise AssertionError(
            "\n".join(problems)
            + "\n"
            + program.describe()
            + "\nscopes:\n"
            + _describe(items)
            + f"\nmemory budget: {memory_budget}{abandoned}"
        )


def _describe(items: list[Any], indent: str = "  ") -> str:
    lines = []
    for item in items:
        if isinstance(item, Scoped):
            lines.append(f"{indent}{item.kind}({item.k}):")
            lines.append(_describe(item.items, indent + "  "))
        else:
            lines.append(f"{indent}{item}")
    return "\n".join(lines)
