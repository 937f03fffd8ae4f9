"""Running random task programs through stflow, and the differential check.

:func:`run_program` registers a program's data in a context (the user arrays fresh
copies, views in fresh parents: :func:`user_arrays`, :func:`declare_data`), submits
its operations (:func:`submit`: each task with a body strategy of ``_bodies``, a
grid's places built once per program) and returns what it observed;
:func:`check_program` compares that with the sequential oracle (``_programs``), bit
for bit on the emulated backend, within a small tolerance on CUDA, optionally under a
memory budget (``_budgets``). The scoped, threaded and distributed programs submit
their operations with the same helpers.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ._bodies import BodyRunner, _host_fn, body_for
from ._budgets import smallest_budget, tight_budget
from ._grids import Built
from ._ops import TaskOp, _same
from ._parents import _parent_values, _view_index, parent_problems
from ._programs import Outcome, Program, run_oracle

__all__ = ["check_program", "declare_data", "run_program", "submit", "user_arrays"]


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
