"""The handles of a :mod:`distributed context <stflow._dist.context>`: its data
(:class:`dist_data`, the dependencies :class:`dist_dep`) and its tasks
(:class:`dist_task`, :class:`dist_kernel`), with the bookkeeping every rank does for
each task (which ranks hold a data's current version, :func:`executed`).

A task's hot path, on every rank for every task, is :meth:`dist_task._prepare` and
:meth:`dist_task.__exit__`; the exchanges they need are the context's
(:meth:`~stflow._dist.context.distributed_context._prepare`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._compile import mypyc_attr
from .._core.access import READ, WRITE, mode_name
from .._core.errors import AccessModeError, RemoteTaskError
from .._core.reduce import REDUCE, ReduceOp, reduce_mode, reduce_op, resolve_op
from .._handles.bundles import Slot

if TYPE_CHECKING:
    from .exchanges import Exchanges, Incoming

__all__ = [
    "Reduction",
    "TaskContext",
    "dist_data",
    "dist_dep",
    "dist_kernel",
    "dist_task",
    "executed",
    "one_place",
]


class TaskContext(Protocol):
    """What a distributed task uses of its context (``_distributed.distributed_context``,
    which imports this module: the protocol keeps the arrow one way)."""

    rank: int
    local: Any
    """The rank's own context."""
    _check_each: bool
    _calls: int
    _exchanges: Exchanges
    _arriving: int

    def _check_owner(self, owner: Any) -> int:
        """``owner`` as a rank of the communicator (raises naming the ranks)."""

    def _prepare(self, data: dist_data, mode: int, rank: int) -> None:
        """The exchanges ``data`` needs before a task on ``rank`` accesses it."""

    def _land(self, deps: Any) -> None:
        """Land the values received for ``deps``."""

    def _agree(self, signature: tuple) -> None:
        """Check that every rank makes the same collective call."""


class dist_data:
    """A logical data of a :class:`distributed_context`: the rank's local logical
    data, its owner, and which ranks hold its current version (the same on every
    rank).

    ``version`` counts the writes and combinations so far; version 0 of data made
    without a value (``logical_data_empty``, ``has_initial`` false) holds none, so
    reductions into it start from the identity (:meth:`never_written`)."""

    __slots__ = (
        "local",
        "owner",
        "holders",
        "index",
        "shape",
        "dtype",
        "name",
        "is_token",
        "reduction",
        "partial",
        "version",
        "incoming",
        "context",
        "nbytes",
        "has_initial",
        "_deps",
        "_local_deps",
    )

    def __init__(
        self,
        local: Any,
        owner: int,
        index: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        name: str,
        holders: set[int],
        is_token: bool = False,
        has_initial: bool = True,
    ) -> None:
        self.local = local
        self.owner = owner
        self.index = index
        self.shape = shape
        self.dtype = dtype
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.name = name
        self.holders = holders
        self.is_token = is_token
        self.reduction: Reduction | None = None  # partials not combined yet
        self.partial: Any = None  # this rank's local partial (made when needed)
        self.version = 0  # writes and combinations so far: message tags
        self.has_initial = has_initial  # version 0 has a value (from the user's array)
        self.incoming: Incoming | None = None  # a value received, not landed yet
        self.context: Any = None  # the distributed_context
        # Dependencies are values: one of each mode, made once (here and locally).
        self._deps = {mode: dist_dep(self, mode) for mode in (READ, WRITE, READ | WRITE)}
        self._local_deps: dict[int, Any] = {}  # made when first used

    def never_written(self) -> bool:
        """Whether the data holds no value yet: made by ``logical_data_empty`` and
        neither written nor combined since (the same on every rank)."""
        return self.version == 0 and not self.has_initial

    def local_dep(self, mode: int, place: Any = None) -> Any:
        """The local dependency of ``mode`` at data place ``place`` (read-only data
        refuse writes here, on first use, as a local ``ld.write()`` does)."""
        dep = self._local_deps.get(mode) if place is None else None
        if dep is None:
            local = self.local
            dep = (
                local.read(place)
                if mode == READ
                else local.write(place)
                if mode == WRITE
                else local.rw(place)
                if mode == READ | WRITE
                else self.partial.reduce(reduce_op(mode).name, place)
            )
            if place is None:
                self._local_deps[mode] = dep
        return dep

    def read(self, dplace: Any = None) -> dist_dep:
        """A read dependency, seen at ``dplace`` on the executing rank."""
        return self._deps[READ] if dplace is None else dist_dep(self, READ, dplace)

    def write(self, dplace: Any = None) -> dist_dep:
        return self._deps[WRITE] if dplace is None else dist_dep(self, WRITE, dplace)

    def rw(self, dplace: Any = None) -> dist_dep:
        return (
            self._deps[READ | WRITE]
            if dplace is None
            else dist_dep(self, READ | WRITE, dplace)
        )

    def reduce(self, op: Any = "sum", dplace: Any = None) -> dist_dep:
        """A reduction dependency (``logical_data.reduce``): the task's view holds
        ``op``'s identity and what it leaves there is combined into the data with
        ``op``; tasks on different ranks reducing into the data each accumulate into
        a partial of their rank, combined in rank order when the data is next
        accessed otherwise (or waited on, or finalized)."""
        if self.is_token:
            raise TypeError(
                f"reduce() on token {self.name}: a token holds no data "
                "to reduce into; use read()/rw()"
            )
        operation = resolve_op(op)
        operation.check_dtype(self.dtype, f"reduce() on {self.name}")
        mode = reduce_mode(operation)
        if dplace is not None:
            return dist_dep(self, mode, dplace)
        dep = self._deps.get(mode)
        if dep is None:
            dep = self._deps[mode] = dist_dep(self, mode)
        return dep

    def __repr__(self) -> str:
        return (
            f"<dist_data {self.name} owner={self.owner} holders={sorted(self.holders)}>"
        )


@mypyc_attr(native_class=False)  # a tuple subclass: a Python class when compiled
class dist_dep(tuple):
    """``(data, mode, place)``: a dependency of a distributed task (``ld.read()``,
    ...; ``place``: the data place on the executing rank, ``None`` for affine)."""

    __slots__ = ()

    def __new__(cls, data: dist_data, mode: int, place: Any = None) -> dist_dep:
        return tuple.__new__(cls, (data, mode, place))

    def __repr__(self) -> str:
        return f"dist_dep({self[0].name}, {mode_name(self[1])})"


class Reduction:
    """The reductions into one data not combined yet: their operation and the ranks
    holding a partial result (the same on every rank)."""

    __slots__ = ("op", "mode", "ranks")

    def __init__(self, mode: int) -> None:
        self.mode = mode
        self.op: ReduceOp = reduce_op(mode)
        self.ranks: set[int] = set()

    def __repr__(self) -> str:
        return f"<Reduction {self.op.name} on ranks {sorted(self.ranks)}>"


class dist_task:
    """A task of a :class:`distributed_context` (use it in a ``with`` block).

    On the executing rank it wraps a local task (``t.local``); elsewhere it is
    empty: ``runs_here`` is False, ``run`` does nothing, views raise.
    """

    __slots__ = (
        "_ctx",
        "_deps",
        "rank",
        "runs_here",
        "_place",
        "_symbol",
        "local",
        "_layout",
    )

    def __init__(
        self,
        ctx: TaskContext,
        deps: tuple[Any, ...],
        rank: Any,
        place: Any,
        symbol: str | None = None,
    ) -> None:
        # Check the dependencies; the task executes on `rank`, else on the owner of
        # its first written data, else of its first data (rank 0 without any).
        written = None
        reduces = False
        for dep in deps:
            if dep.__class__ is not dist_dep or dep[0].context is not ctx:
                raise TypeError(
                    f"a dependency of a distributed task is "
                    f"ld.read()/write()/rw()/reduce() of this context's "
                    f"data, got {type(dep).__name__}"
                )
            mode = dep[1]
            if mode & WRITE:
                if written is None:
                    written = dep[0].owner
            elif mode & REDUCE:
                reduces = True
        if reduces:
            _check_reductions(deps)
        if rank is not None:
            rank = ctx._check_owner(rank)
        else:
            rank = written if written is not None else deps[0][0].owner if deps else 0
        self._ctx = ctx
        self._deps = deps
        self.rank = rank
        self.runs_here = rank == ctx.rank
        self._place = place
        self._symbol = symbol
        self.local: Any = None
        self._layout: Any = None  # with bundles: the arguments' layout

    def __enter__(self) -> dist_task:
        local_deps = self._prepare()
        if local_deps is not None:
            if self._layout is not None:
                local_deps = _regrouped(local_deps, self._layout)
            if self._place is not None:
                local_deps.insert(0, self._place)
            local = self.local = self._local_task(local_deps)
            local.__enter__()
        return self

    def _local_task(self, local_deps: list[Any]) -> Any:
        """This rank's local task (the executing rank)."""
        local = self._ctx.local
        if self._symbol is None:
            return local.task(*local_deps)
        return local.task(*local_deps, symbol=self._symbol)

    def __exit__(self, *exc: Any) -> None:
        if self.local is not None:
            self.local.__exit__(*exc)
        rank = self.rank
        for data, mode, _ in self._deps:  # _executed(), inlined: hot path
            if mode & WRITE:
                data.version += 1
                holders = data.holders
                if len(holders) != 1 or rank not in holders:
                    data.holders = {rank}
            elif mode & READ:
                data.holders.add(rank)

    def _prepare(self) -> list[Any] | None:
        """The collective bookkeeping before the task, and its exchanges; on the
        executing rank, the local dependencies (``None`` elsewhere).

        This is the hot path of every rank for every task: a dependency needs
        :meth:`distributed_context._prepare` only when its data has a pending
        reduction, is reduced into, or is read on a rank not holding it.
        """
        ctx = self._ctx
        rank = self.rank
        if ctx._check_each:
            ctx._agree(
                (
                    "task",
                    rank,
                    tuple([(data.index, mode) for data, mode, _ in self._deps]),
                    ctx._calls,
                )
            )
        ctx._calls += 1
        exchanges = ctx._exchanges
        if exchanges.in_flight or exchanges.waiting:
            exchanges.progress()
        for data, mode, _ in self._deps:
            if (
                data.reduction is not None
                or mode & REDUCE
                or (mode & READ and rank not in data.holders)
            ):
                ctx._prepare(data, mode, rank)
        if not self.runs_here:
            return None
        if ctx._arriving:
            ctx._land(self._deps)
        local_deps = []  # a loop, not a comprehension: no frame
        for data, mode, place in self._deps:
            dep = None if place is not None else data._local_deps.get(mode)
            local_deps.append(dep if dep is not None else data.local_dep(mode, place))
        return local_deps

    def run(self, fn: Callable[..., Any], *indices: int) -> None:
        """``fn(xp, *arrays)`` on the executing rank (``task.run``: ``indices``
        default to the non-token dependencies); nothing elsewhere."""
        if self.runs_here:
            if self._layout is not None:  # slots: the local task's
                self._run_slots(fn, indices)
                return
            if not indices:
                indices = tuple(
                    i for i, (data, _, _) in enumerate(self._deps) if not data.is_token
                )
                if not indices:  # tokens only: no arrays
                    self.local.run(_XpOnly(fn), 0)
                    return
            self.local.run(fn, *indices)

    def _slots_with_memory(self) -> list[int]:
        """The arguments that are bundles or data (not tokens), with bundles."""
        layout = self._layout
        return [
            i
            for i in range(len(layout))
            if isinstance(layout[i], Slot) or not self._deps[layout[i]][0].is_token
        ]

    def _without_tokens(self, index: int, value: Any) -> Any:
        """Argument ``index``'s value with a bundle's token fields ``None`` (the
        local data of a distributed token has bytes, which are not the body's)."""
        entry = self._layout[index]
        if not isinstance(entry, Slot):
            return value
        fields = list(value)
        k = 0
        for position in range(len(entry.dep.acquired)):
            if entry.dep.acquired[position]:
                if self._deps[entry.start + k][0].is_token:
                    fields[position] = None
                k += 1
        return type(value)(*fields)

    def _run_slots(self, fn: Callable[..., Any], indices: tuple[int, ...]) -> None:
        """``run`` of a task with bundles: one array (a bundle's named tuple) per
        argument, tokens left out as in :meth:`run`."""
        chosen = list(indices) if indices else self._slots_with_memory()
        if not chosen:
            self.local.run(_XpOnly(fn), 0)
            return
        self.local.run(_SlotsBody(self, fn, chosen), *chosen)

    def _refuse(self, what: str) -> None:
        raise RemoteTaskError(
            f"{what} on rank {self._ctx.rank}: this task executes on rank "
            f"{self.rank}; guard the body with 'if t.runs_here:' or write it with "
            "t.run(fn), which runs only where the task executes"
        )

    def views(self) -> tuple[Any, ...]:
        """Views of the non-token dependencies (on the executing rank only)."""
        if not self.runs_here:
            self._refuse("views()")
        if self._layout is not None:
            return tuple(
                self._without_tokens(i, self.local.get_arg_cai(i))
                for i in self._slots_with_memory()
            )
        return tuple(
            self.local.get_arg_cai(i)
            for i, (data, _, _) in enumerate(self._deps)
            if not data.is_token
        )

    def args_cai(self) -> Any:
        """The views as ``task.args_cai()`` gives them: ``None``, one view, or a
        tuple (on the executing rank only)."""
        views = self.views()
        return None if not views else views[0] if len(views) == 1 else views

    def get_arg_cai(self, index: int) -> Any:
        if not self.runs_here:
            self._refuse("get_arg_cai()")
        if self._layout is not None:
            return self._without_tokens(index, self.local.get_arg_cai(index))
        return self.local.get_arg_cai(index)

    def get(self, index: int) -> Any:
        """Argument ``index``'s view; a bundle's named tuple of views
        (``task.get``; on the executing rank only)."""
        return self.get_arg_cai(index)

    def stream_ptr(self) -> Any:
        if not self.runs_here:
            self._refuse("stream_ptr()")
        return self.local.stream_ptr()

    def local_task(self, what: str) -> Any:
        """The local task on the executing rank (the framework adapters use it);
        :class:`RemoteTaskError` naming ``what`` elsewhere."""
        if not self.runs_here:
            self._refuse(what)
        return self.local

    def start(self) -> None:
        """``__enter__`` (the explicit form of a task)."""
        self.__enter__()

    def end(self) -> None:
        """``__exit__`` (the explicit form of a task)."""
        self.__exit__(None, None, None)


class dist_kernel(dist_task):
    """A :meth:`distributed_context.cuda_kernel` task: its launches run on the
    executing rank only, so the code describing them is correct on every rank
    unchanged (``k.get_arg(i)`` gives an inert placeholder elsewhere, which only
    ``launch`` accepts)."""

    __slots__ = ()

    def _local_task(self, local_deps: list[Any]) -> Any:
        local = self._ctx.local
        if self._symbol is None:
            return local.cuda_kernel(*local_deps)
        return local.cuda_kernel(*local_deps, symbol=self._symbol)

    def get_arg(self, index: int) -> Any:
        """Dependency ``index``'s device pointer for ``launch`` (a placeholder on
        ranks where the kernel does not run)."""
        if not self.runs_here:
            return _RemoteArgument(self.rank, index)
        if self._layout is not None:
            return self._without_tokens(index, self.local.get_arg(index))
        return self.local.get_arg(index)

    def launch(
        self, kernel: Any, grid: Any, block: Any, args: Any, shmem: int = 0
    ) -> None:
        """``cuda_kernel.launch`` on the executing rank; nothing elsewhere."""
        if self.runs_here:
            self.local.launch(kernel, grid, block, args, shmem)


class _RemoteArgument:
    """``get_arg`` of a kernel on a rank where it does not run: ``launch`` ignores
    it there; anything else using it fails."""

    __slots__ = ("rank", "index")

    def __init__(self, rank: int, index: int) -> None:
        self.rank = rank
        self.index = index

    def __repr__(self) -> str:
        return (
            f"<argument {self.index} of a kernel executing on rank {self.rank}: "
            "nothing on this rank>"
        )


def _regrouped(local_deps: list[Any], layout: list[Any]) -> list[Any]:
    """The local task's arguments: each bundle's local field dependencies back in a
    bundle dependency (so the local task counts it as one slot)."""
    grouped: list[Any] = []
    for entry in layout:
        if isinstance(entry, Slot):
            grouped.append(
                entry.dep.with_deps(
                    local_deps[entry.start : entry.start + len(entry.dep.deps)]
                )
            )
        else:
            grouped.append(local_deps[entry])
    return grouped


def one_place(place: Any, given: Any, what: str) -> Any:
    """An execution place given first among the arguments, as locally (``place=``
    is the other spelling; not both)."""
    if place is not None:
        raise TypeError(
            f"{what}: an execution place both as the first argument and as place="
        )
    return given


def executed(deps: tuple[dist_dep, ...], rank: int) -> None:
    """After work on ``rank``: the data it wrote are held by ``rank`` alone (the other
    copies are stale), the data it read by ``rank`` too (a reduction changes no
    holder: its partial waits on ``rank``)."""
    for data, mode, _ in deps:
        holders = data.holders
        if mode & WRITE:
            data.version += 1
            if len(holders) != 1 or rank not in holders:
                data.holders = {rank}
        elif mode & READ:
            holders.add(rank)


def _check_reductions(deps: tuple[dist_dep, ...]) -> None:
    """Refuse, on every rank alike, a task reducing into a data and accessing it
    again (as a local task does)."""
    seen = [data for data, _, _ in deps]
    for data, mode, _ in deps:
        if mode & REDUCE and seen.count(data) > 1:
            raise AccessModeError(
                f"a distributed task reduces into {data.name} and accesses it again; "
                "a task reduces into a data once and does nothing else with it "
                "(reduce in one task, read in a later one)"
            )


# Task bodies as objects rather than closures: a body runs later, on another thread
# where the backend runs bodies there, and the compiled build's closure environments
# have not survived that (see _handles.callbacks._HostCallback).


class _XpOnly:
    """The body of a task whose dependencies are all tokens: ``fn(xp)``."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, xp: Any, *_: Any) -> None:
        self.fn(xp)


class _SlotsBody:
    """The body of a task with bundles: ``fn`` on the ``chosen`` arguments, each with
    its token fields ``None``."""

    __slots__ = ("task", "fn", "chosen")

    def __init__(self, task: Any, fn: Callable[..., Any], chosen: list[int]) -> None:
        self.task = task
        self.fn = fn
        self.chosen = chosen

    def __call__(self, xp: Any, *arrays: Any) -> None:
        task = self.task
        self.fn(xp, *[task._without_tokens(i, a) for i, a in zip(self.chosen, arrays)])
