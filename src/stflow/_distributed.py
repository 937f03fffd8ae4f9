"""The same sequential task flow over MPI ranks (``stf.distributed_context``).

The model is StarPU-MPI's. **Every rank runs the same program.** Each logical data
has an *owner* rank, which holds its initial value and gets its final value. A task
*executes* on one rank — the one its ``rank=`` names, else the owner of its first
written data, else of its first data — and only there: its body runs on that rank
(``t.runs_here``), in a local context of the rank's own backend (emulated or CUDA).

Every rank keeps the same bookkeeping, so all agree without talking about it: for
each data, which ranks hold its current version (``holders``). Before a task
executes on rank ``E``, each data it reads that ``E`` does not hold is sent to ``E``
by the lowest rank holding it; after the task, a data it wrote is held by ``E`` alone.
``wait(ld)`` gives the value on every rank; ``finalize()`` brings each data back to
its owner, whose user array gets it (other ranks' arrays are left alone).

Exchanges, first version: a transfer happens at the program point of the task that
needs it, as a blocking ``Send`` on the source (after its local value is ready) and a
``Recv`` on the destination. Every rank meets the transfers in the same order, so they
pair up and cannot deadlock; they do not yet overlap computation (non-blocking
exchanges are the next step). Bodies written with ``t.run(fn)`` are correct on every
rank unchanged: on a rank where the task does not execute ``run`` does nothing, and
touching a view there raises :class:`RemoteTaskError`.

A failure on one rank would leave the others waiting in their next transfer: a
``distributed_context`` used as a ``with`` block aborts the communicator
(``comm.Abort``) when an exception leaves it, after printing the error.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

import numpy as np

from ._access import READ, WRITE
from ._errors import RemoteTaskError, ScopeError

__all__ = ["dist_data", "dist_dep", "dist_task", "distributed_context"]

_TAG_LIMIT = 32767
"""Tags stay below the smallest upper bound MPI guarantees."""


class dist_data:
    """A logical data of a :class:`distributed_context`: the rank's local logical
    data, its owner, and which ranks hold its current version (the same on every
    rank)."""

    __slots__ = ("local", "owner", "holders", "index", "shape", "dtype", "name",
                 "is_token", "_deps", "_local_deps")

    def __init__(self, local: Any, owner: int, index: int, shape: tuple[int, ...],
                 dtype: np.dtype, name: str, holders: set[int],
                 is_token: bool = False) -> None:
        self.local = local
        self.owner = owner
        self.index = index
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.holders = holders
        self.is_token = is_token
        # Dependencies are values: one of each mode, made once (here and locally).
        self._deps = {mode: dist_dep(self, mode) for mode in (READ, WRITE, READ | WRITE)}
        self._local_deps: dict[int, Any] = {}       # made when first used

    def local_dep(self, mode: int, place: Any = None) -> Any:
        """The local dependency of ``mode`` at data place ``place`` (read-only data
        refuse writes here, on first use, as a local ``ld.write()`` does)."""
        dep = self._local_deps.get(mode) if place is None else None
        if dep is None:
            local = self.local
            dep = (local.read(place) if mode == READ else local.write(place)
                   if mode == WRITE else local.rw(place))
            if place is None:
                self._local_deps[mode] = dep
        return dep

    def read(self, dplace: Any = None) -> dist_dep:
        """A read dependency, seen at ``dplace`` on the executing rank."""
        return self._deps[READ] if dplace is None else dist_dep(self, READ, dplace)

    def write(self, dplace: Any = None) -> dist_dep:
        return self._deps[WRITE] if dplace is None else dist_dep(self, WRITE, dplace)

    def rw(self, dplace: Any = None) -> dist_dep:
        return (self._deps[READ | WRITE] if dplace is None
                else dist_dep(self, READ | WRITE, dplace))

    def __repr__(self) -> str:
        return (f"<dist_data {self.name} owner={self.owner} "
                f"holders={sorted(self.holders)}>")


class dist_dep(tuple):
    """``(data, mode, place)``: a dependency of a distributed task (``ld.read()``,
    ...; ``place``: the data place on the executing rank, ``None`` for affine)."""

    __slots__ = ()

    def __new__(cls, data: dist_data, mode: int, place: Any = None) -> dist_dep:
        return super().__new__(cls, (data, mode, place))

    def __repr__(self) -> str:
        return f"dist_dep({self[0].name}, {('read', 'write', 'rw')[self[1] - 1]})"


class dist_task:
    """A task of a :class:`distributed_context` (use it in a ``with`` block).

    On the executing rank it wraps a local task (``t.local``); elsewhere it is
    empty: ``runs_here`` is False, ``run`` does nothing, views raise.
    """

    def __init__(self, ctx: distributed_context, deps: list[dist_dep],
                 rank: int | None, place: Any) -> None:
        self._ctx = ctx
        self._deps = deps
        self.rank = ctx._executing_rank(deps, rank)
        self.runs_here = self.rank == ctx.rank
        self._place = place
        self.local: Any = None

    def __enter__(self) -> dist_task:
        ctx = self._ctx
        rank = self.rank
        for data, mode, _ in self._deps:
            if mode & READ and rank not in data.holders:
                ctx._bring(data, rank)
        if self.runs_here:
            local_deps = [data.local_dep(mode, place) for data, mode, place in self._deps]
            if self._place is not None:
                local_deps.insert(0, self._place)
            self.local = ctx.local.task(*local_deps)
            self.local.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.local is not None:
            self.local.__exit__(*exc)
        _executed(self._deps, self.rank)

    def run(self, fn: Callable[..., Any], *indices: int) -> None:
        """``fn(xp, *arrays)`` on the executing rank (``task.run``: ``indices``
        default to the non-token dependencies); nothing elsewhere."""
        if self.runs_here:
            if not indices:
                indices = tuple(i for i, (data, _, _) in enumerate(self._deps)
                                if not data.is_token)
                if not indices:                    # tokens only: no arrays
                    self.local.run(lambda xp, *_: fn(xp), 0)
                    return
            self.local.run(fn, *indices)

    def _refuse(self, what: str) -> None:
        raise RemoteTaskError(
            f"{what} on rank {self._ctx.rank}: this task executes on rank "
            f"{self.rank}; guard the body with 'if t.runs_here:' or write it with "
            "t.run(fn), which runs only where the task executes")

    def views(self) -> tuple[Any, ...]:
        """Views of the non-token dependencies (on the executing rank only)."""
        if not self.runs_here:
            self._refuse("views()")
        return tuple(self.local.get_arg_cai(i) for i, (data, _, _) in
                     enumerate(self._deps) if not data.is_token)

    def get_arg_cai(self, index: int) -> Any:
        if not self.runs_here:
            self._refuse("get_arg_cai()")
        return self.local.get_arg_cai(index)

    def stream_ptr(self) -> Any:
        if not self.runs_here:
            self._refuse("stream_ptr()")
        return self.local.stream_ptr()


def _executed(deps: list[dist_dep], rank: int) -> None:
    """After work on ``rank``: the data it wrote are held by ``rank`` alone (the other
    copies are stale), the data it read by ``rank`` too."""
    for data, mode, _ in deps:
        holders = data.holders
        if mode & WRITE:
            if len(holders) != 1 or rank not in holders:
                data.holders = {rank}
        else:
            holders.add(rank)


class distributed_context:
    """A sequential task flow over the ranks of ``comm`` (see the module docstring).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Every rank of it runs the same program.
    backend, use_graph
        Of each rank's local context (``stf.context``).

    Notes
    -----
    Collective: every rank must create the same data and submit the same tasks, in
    the same order (the program is the same on every rank).
    """

    def __init__(self, comm: Any, *, backend: str | None = None,
                 use_graph: bool = False) -> None:
        from ._context import context
        self.comm = comm
        self.rank = int(comm.Get_rank())
        self.size = int(comm.Get_size())
        self.local = context(backend=backend, use_graph=use_graph)
        self._data: list[dist_data] = []
        self._finalized = False

    # -- data ------------------------------------------------------------------------
    def _check_owner(self, owner: Any) -> int:
        if isinstance(owner, bool) or not isinstance(owner, int):
            raise TypeError(f"owner must be a rank (an int), got {type(owner).__name__}")
        if not 0 <= owner < self.size:
            raise ValueError(f"owner {owner} is not a rank of this communicator "
                             f"(0..{self.size - 1})")
        return owner

    def logical_data(self, array: np.ndarray, *, owner: int = 0,
                     name: str | None = None) -> dist_data:
        """``array`` as logical data owned by rank ``owner``: its value there is the
        initial value, and ``finalize()`` writes the final value into it there (the
        other ranks' arrays are never read or written)."""
        owner = self._check_owner(owner)
        array = np.asarray(array)
        index = len(self._data)
        label = name or f"d{index}"
        if self.rank == owner:
            local = self.local.logical_data(array, name=label)
        else:                 # a private buffer: receives copies, never the user's
            local = self.local.logical_data(np.zeros(array.shape, array.dtype),
                                            name=label)
        data = dist_data(local, owner, index, array.shape, array.dtype, label, {owner})
        self._data.append(data)
        return data

    def token(self, *, owner: int = 0, name: str | None = None) -> dist_data:
        """Data without bytes that only orders tasks, also across ranks: a task
        reading it on another rank waits for the last one writing it (a one-byte
        message carries the order)."""
        data = self.logical_data_empty((1,), np.uint8, owner=owner, name=name)
        data.is_token = True
        return data

    def logical_data_empty(self, shape: tuple[int, ...], dtype: Any = np.float64, *,
                           owner: int = 0, name: str | None = None) -> dist_data:
        """Data without a value yet (written first), owned by ``owner``."""
        owner = self._check_owner(owner)
        index = len(self._data)
        label = name or f"d{index}"
        buffer = np.zeros(shape, dtype)              # private on every rank
        local = self.local.logical_data(buffer, name=label)
        data = dist_data(local, owner, index, buffer.shape, buffer.dtype, label,
                         {owner})
        self._data.append(data)
        return data

    # -- work ------------------------------------------------------------------------
    def _executing_rank(self, deps: list[dist_dep], rank: int | None
                        ) -> int:
        for dep in deps:
            if not isinstance(dep, dist_dep) or not self._owns(dep[0]):
                raise TypeError(f"a dependency of a distributed task is "
                                f"ld.read()/write()/rw() of this context's data, got "
                                f"{type(dep).__name__}")
        if rank is not None:
            return self._check_owner(rank)
        for data, mode, _ in deps:
            if mode & WRITE:
                return data.owner
        return deps[0][0].owner if deps else 0

    def _owns(self, data: dist_data) -> bool:
        index = data.index
        return index < len(self._data) and self._data[index] is data

    def task(self, *deps: dist_dep, rank: int | None = None,
             place: Any = None) -> dist_task:
        """A task executing on ``rank`` (default: the owner of its first written
        data), on execution place ``place`` there."""
        self._check_live("task()")
        return dist_task(self, list(deps), rank, place)

    def host_launch(self, *deps: dist_dep, fn: Callable[..., Any],
                    rank: int | None = None) -> None:
        """``fn(*arrays)`` on the host of the executing rank, after its data."""
        self._check_live("host_launch()")
        if not callable(fn):
            raise TypeError(f"host_launch: fn must be callable, got {type(fn).__name__}")
        t = dist_task(self, list(deps), rank, None)
        for data, mode, _ in t._deps:
            if mode & READ:
                self._bring(data, t.rank)
        if t.runs_here:
            arrays = [data.local_dep(mode, place) for data, mode, place in t._deps
                      if not data.is_token]
            tokens = [data.local_dep(mode) for data, mode, _ in t._deps if data.is_token]
            count = len(arrays)          # the tokens' bytes are not the callback's
            self.local.host_launch(*arrays, *tokens,
                                   fn=lambda *values: fn(*values[:count]))
        _executed(t._deps, t.rank)

    # -- exchanges -------------------------------------------------------------------
    def _tag(self, data: dist_data) -> int:
        return data.index % _TAG_LIMIT

    def _bring(self, data: dist_data, rank: int) -> None:
        """Make ``rank`` hold ``data``'s current version (collective bookkeeping; a
        Send/Recv between the lowest holder and ``rank``)."""
        if rank in data.holders:
            return
        source = min(data.holders)
        if self.rank == source:
            value = np.array(self.local.wait(data.local), order="C")
            self.comm.Send(value, dest=rank, tag=self._tag(data))
        elif self.rank == rank:
            buffer = np.empty(data.shape, dtype=data.dtype)
            self.comm.Recv(buffer, source=source, tag=self._tag(data))
            with self.local.task(data.local.write()) as t:
                t.run(lambda xp, target: target.__setitem__(Ellipsis,
                                                            xp.asarray(buffer)))
        data.holders.add(rank)

    def wait(self, data: dist_data) -> np.ndarray:
        """The current value of ``data``, on every rank (collective)."""
        self._check_live("wait()")
        source = min(data.holders)
        if self.rank == source:
            value = np.array(self.local.wait(data.local), order="C")   # keeps 0-d
        else:
            value = np.empty(data.shape, dtype=data.dtype)
        self.comm.Bcast(value, root=source)
        return value

    def fence(self) -> None:
        """The local context's fence on every rank."""
        self.local.fence()

    def finalize(self) -> None:
        """Bring every data back to its owner, then finalize the local contexts: each
        owner's array gets its data's final value (collective)."""
        if self._finalized:
            return
        for data in self._data:
            self._bring(data, data.owner)
        self._finalized = True
        self.local.finalize()
        self.comm.Barrier()

    def _check_live(self, what: str) -> None:
        if self._finalized:
            raise ScopeError(f"distributed_context.{what} after finalize()")

    def __enter__(self) -> distributed_context:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.finalize()
            return
        # The other ranks would wait in their next exchange forever: abort them.
        err = sys.__stderr__ or sys.stderr           # not a capture that dies with us
        print(f"stflow: rank {self.rank} of {self.size} failed; aborting the "
              f"communicator:", file=err)
        traceback.print_exception(exc_type, exc, tb, file=err)
        err.flush()
        self.comm.Abort(1)

    def __repr__(self) -> str:
        return (f"distributed_context(rank={self.rank}, size={self.size}, "
                f"data={len(self._data)})")
