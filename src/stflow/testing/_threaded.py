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

Threads run under a watchdog (:func:`run_threads`): a hang is a failure that prints
the stacks of every thread.
"""

from __future__ import annotations

import gc
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.reduce import OPS, reduce_mode, reduce_op
from ._bodies import BodyRunner, body_for
from ._generation import add_bundles, initial_arrays
from ._grids import GridSpec, add_grids
from ._ops import READ, RW, WRITE, DataSpec, Op, TaskOp, _same
from ._parents import add_views, parent_problems
from ._programs import Program, task_body
from ._running import declare_data, submit, user_arrays

__all__ = [
    "Hang",
    "Scratch",
    "Segment",
    "ThreadedProgram",
    "all_stacks",
    "check_threaded_program",
    "generate_threaded_program",
    "run_threads",
]

MODES = ("stream", "graph", "scopes")


# -- running threads under a watchdog ------------------------------------------------


class Hang(AssertionError):
    """Threads did not finish in time."""


def all_stacks() -> str:
    """The current stack of every thread of the process, as text."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(
            f"--- thread {names.get(ident, '?')} ({ident}) ---\n"
            + "".join(traceback.format_stack(frame))
        )
    return "\n".join(parts)


def run_threads(fns: Sequence[Callable[[], Any]], timeout: float = 60.0) -> list[Any]:
    """Run every callable of ``fns`` on a thread of its own; return their results.

    Raises
    ------
    Hang
        A thread is still running after ``timeout`` seconds (the message holds the
        stacks of every thread).
    BaseException
        The first exception a thread raised (the others are in its notes).
    """
    results: list[Any] = [None] * len(fns)
    errors: list[tuple[int, BaseException]] = []
    lock = threading.Lock()

    def call(index: int, fn: Callable[[], Any]) -> None:
        try:
            results[index] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            with lock:
                errors.append((index, exc))

    threads = [
        threading.Thread(target=call, args=(i, fn), name=f"worker-{i}", daemon=True)
        for i, fn in enumerate(fns)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [thread.name for thread in threads if thread.is_alive()]
    if alive:
        raise Hang(f"threads {alive} still running after {timeout} s:\n{all_stacks()}")
    if errors:
        errors.sort(key=lambda item: item[0])
        first = errors[0][1]
        for index, other in errors[1:]:
            first.add_note(f"worker-{index} also raised {other!r}")
        raise first
    return results


# -- programs -------------------------------------------------------------------------


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


# -- running through stflow -------------------------------------------------------------


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
