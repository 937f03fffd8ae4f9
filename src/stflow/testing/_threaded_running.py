"""Running threaded programs through stflow, and the concurrency differential check.

:func:`run_threaded_program` runs every program thread on a host thread of its own
(``_Worker``), all in one context (modes ``stream`` and ``graph``) or one stackable
context (``scopes``), under the watchdog (``_watchdog``) with a short switch interval,
so that the threads interleave tightly. The turns go from thread to thread in their
drawn order (``_Turns``); with ``jitter``, bodies pause at random inside their task
windows. :func:`check_threaded_program` compares every thread's ``wait`` results and
the final user arrays with the oracle (``_threaded``).
"""

from __future__ import annotations

import gc
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._bodies import BodyRunner, body_for
from ._ops import DataSpec, TaskOp, _same
from ._parents import parent_problems
from ._programs import Program
from ._running import declare_data, submit, user_arrays
from ._threaded import SCRATCH, Scratch, Segment, ThreadedProgram, run_threaded_oracle
from ._threaded_generation import generate_threaded_program
from ._watchdog import Hang, run_threads

__all__ = ["check_threaded_program", "run_threaded_program"]


def run_threaded_program(
    program: ThreadedProgram,
    backend: str = "emulated",
    body: BodyRunner | None = None,
    timeout: float = 120.0,
    jitter: bool = True,
) -> tuple[list[list[np.ndarray]], dict[Any, np.ndarray]]:
    """Run ``program``, one host thread per program thread, under a watchdog.

    ``jitter``: threads pause for up to 0.2 ms at random inside task windows, so that
    other threads' submissions, fences and waits fall while tasks are started."""
    import stflow as stf

    mode = program.mode
    if body is None:
        body = _default_body(backend, mode)
    data_program = program.as_program()
    user = user_arrays(data_program)
    ctx: Any = (
        stf.stackable_context(backend=backend)
        if mode == "scopes"
        else stf.context(backend=backend, use_graph=mode == "graph")
    )
    waits: list[list[np.ndarray]] = [[] for _ in program.threads]
    scratch: list[list[np.ndarray]] = [[] for _ in program.threads]
    try:
        lds = declare_data(stf, ctx, data_program, user)
        if mode == "scopes":
            for index in program.shared:
                lds[index].set_read_only()
        turns = _Turns(program.turns)
        workers: list[Callable[[], None]] = []
        for t in range(len(program.threads)):
            pause = _jitter(program.seed * 1009 + t) if jitter else None
            run_body = body if pause is None else _paused(body, pause)
            workers.append(
                _Worker(
                    stf,
                    ctx,
                    program,
                    data_program,
                    t,
                    lds,
                    run_body,
                    waits[t],
                    scratch[t],
                    turns,
                )
            )
        try:
            _run_switching_often(workers, timeout)
        except Hang:
            ctx = None  # threads are stuck in it: leave it be
            raise
    finally:
        if ctx is not None:
            ctx.finalize()
    final: dict[Any, np.ndarray] = {i: user[i] for i in program.initial}
    for t, arrays in enumerate(scratch):
        final.update(((t, number), array) for number, array in enumerate(arrays))
    return waits, final


def _default_body(backend: str, mode: str) -> BodyRunner:
    """The task body runner for ``backend`` (and, emulated, for ``mode``)."""
    return body_for(backend, mode != "stream")


class _Turns:
    """The turns of the threads (``(thread, segment)`` in turn order), handed over
    from one to the next; ``failed``: set when a thread raised, so that the others
    stop waiting for a turn that never comes."""

    def __init__(self, order: list[tuple[int, int]]) -> None:
        self.order = order
        self.turn = 0
        self.handover = threading.Condition()
        self.failed = threading.Event()

    def wait_for(self, key: tuple[int, int]) -> None:
        """Block until it is the turn of segment ``key``."""
        with self.handover:
            while self.order[self.turn] != key:
                if self.failed.is_set():
                    raise RuntimeError("another thread failed; its turn never came")
                self.handover.wait(0.05)

    def pass_on(self) -> None:
        """End the current turn: the next one may start."""
        with self.handover:
            self.turn += 1
            self.handover.notify_all()


@dataclass(eq=False)
class _Worker:
    """The host thread of program thread ``t``: its segments in order, turns in
    their turn, scoped segments in a graph scope."""

    stf: Any
    ctx: Any
    program: ThreadedProgram
    data_program: Program
    t: int
    lds: dict[int, Any]
    body: BodyRunner
    waits: list[np.ndarray]
    scratch: list[np.ndarray]
    turns: _Turns

    def __call__(self) -> None:
        try:
            for s, segment in enumerate(self.program.threads[self.t]):
                if segment.turn:
                    self.turns.wait_for((self.t, s))
                if segment.scoped:
                    with self.ctx.graph_scope():
                        self._run(segment)
                else:
                    self._run(segment)
                if segment.turn:
                    self.turns.pass_on()
        except BaseException:
            self.turns.failed.set()
            raise

    def _run(self, segment: Segment) -> None:
        _run_ops(
            self.stf,
            self.ctx,
            self.data_program,
            segment.ops,
            self.lds,
            self.body,
            self.waits,
            self.scratch,
        )


def _run_switching_often(workers: list[Callable[[], None]], timeout: float) -> None:
    """:func:`run_threads`, with threads that switch often: tight interleavings."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        run_threads(workers, timeout)
    finally:
        sys.setswitchinterval(interval)


def _jitter(seed: int) -> Callable[[], None]:
    rng = random.Random(seed)

    def pause() -> None:
        if rng.random() < 0.3:
            time.sleep(rng.random() * 2e-4)

    return pause


def _paused(body: BodyRunner, pause: Callable[[], None]) -> BodyRunner:
    def run(t: Any, op: TaskOp, modes: list[int]) -> None:
        pause()
        body(t, op, modes)
        pause()

    return run


def _run_ops(
    stf: Any,
    ctx: Any,
    program: Program,
    ops: list[Any],
    lds: dict[int, Any],
    body: BodyRunner,
    waits: list[np.ndarray],
    scratch: list[np.ndarray],
) -> None:
    for op in ops:
        if isinstance(op, Scratch):
            _run_scratch(stf, ctx, program, op, lds, body, scratch)
        elif isinstance(op, TaskOp):
            submit(stf, ctx, program, op, lds, body)
        elif op.kind == "wait":
            waits.append(ctx.wait(lds[op.data]))
        elif op.kind == "fence":
            ctx.fence()


def _run_scratch(
    stf: Any,
    ctx: Any,
    program: Program,
    work: Scratch,
    lds: dict[int, Any],
    body: BodyRunner,
    kept: list[np.ndarray],
) -> None:
    """Register a fresh array, run the task on it, drop it (the array stays alive in
    ``kept``: its bytes are never another buffer's while registered)."""
    array = work.initial.copy()
    kept.append(array)
    index = len(program.data)
    spec = DataSpec(array.shape, str(array.dtype), "array")
    extended = Program(program.seed, [*program.data, spec], [], program.devices)
    op = work.op
    op = TaskOp(
        op.kind,
        tuple((index if i == SCRATCH else i, m, p) for i, m, p in op.deps),
        op.coef,
        op.place_of_exec,
        op.launch,
    )
    mine = dict(lds)
    mine[index] = ctx.logical_data(array)
    submit(stf, ctx, extended, op, mine, body)
    del mine  # collected: retired at a later submission
    if work.collect:
        gc.collect(0)  # the young generation: cheap


def check_threaded_program(
    seed: int,
    threads: int = 4,
    mode: str = "stream",
    backend: str = "emulated",
    devices: int = 2,
    body: BodyRunner | None = None,
    exact: bool | None = None,
    timeout: float = 120.0,
    **options: Any,
) -> None:
    """Run the threaded program of ``seed`` and the oracle; raise ``AssertionError``
    (with the listing) if a ``wait`` result or a final user array differs, and
    :class:`Hang` if the threads do not finish within ``timeout`` seconds."""
    if exact is None:
        exact = backend == "emulated"
    program = generate_threaded_program(seed, threads, mode, devices, **options)
    want_waits, want_final = run_threaded_oracle(program)
    try:
        got_waits, got_final = run_threaded_program(program, backend, body, timeout)
    except Hang as exc:
        exc.add_note(program.describe())
        raise
    except BaseException as exc:
        exc.add_note(program.describe())
        raise
    problems = []
    for t, (got_t, want_t) in enumerate(zip(got_waits, want_waits)):
        if len(got_t) != len(want_t):
            problems.append(
                f"thread {t}: {len(got_t)} wait results, expected {len(want_t)}"
            )
        for number, (g, w) in enumerate(zip(got_t, want_t)):
            if not _same(g, w, exact):
                problems.append(
                    f"thread {t} wait #{number}: got {g.ravel()[:6]}..., "
                    f"expected {w.ravel()[:6]}..."
                )
    for index, want in want_final.items():
        got = got_final.get(index)
        name = (
            f"d{index}"
            if isinstance(index, int)
            else f"of thread {index[0]}'s registration #{index[1]}"
        )
        if got is None or not _same(got, want, exact):
            problems.append(
                f"final user array {name}: got "
                f"{None if got is None else got.ravel()[:6]}..., "
                f"expected {want.ravel()[:6]}..."
            )
    problems += parent_problems(program, got_final, want_final, exact)
    if problems:
        raise AssertionError("\n".join(problems) + "\n" + program.describe())
