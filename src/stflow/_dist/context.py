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

Exchanges: every rank meets the transfers at the same program points, in the same order.
The source posts an ``Isend`` of its value as soon as that value is ready on it (it
waits for the local work producing it, never for the receiver) and completes it lazily
(tested at every later task, waited for at ``fence``/``finalize``), keeping the buffer
alive until then. The destination posts the ``Irecv`` at once and completes it only when
local work needs the data, writing the bytes into its local data with a local task. A
large value goes as several messages (pieces), so that its copies between device and
host overlap the messages (in stream mode, pooled pinned host buffers, or device buffers
handed to a CUDA-aware MPI: :mod:`stflow._dist.staging`). Tags come from the data and its
version (the writes and combinations so far, the same on every rank), so messages cannot
be confused whatever the interleaving of ranks (where tags wrap around, both sides post
in program order, which MPI's non-overtaking rule keeps). No deadlock: a rank blocks
only in a local wait (which depends on local work only), waiting for a receive, or,
above the send limit of :mod:`stflow._dist.staging`, waiting for one of its own earlier sends
to be received; by then every send of the program points it has passed is posted
(sending ahead, ``STFLOW_MPI_SEND_AHEAD=1``: is posted while it waits, once its local
copy completed, which depends on local work only; before a collective such as
``wait()``'s broadcast every staged send is posted). The rank it waits for posts the
matching send, or completes the matching receive, at a program point earlier than ours,
which it reaches without waiting for us (everything it waits for before it comes from
earlier points; a receive is completed at its own program point). Bodies written with
``t.run(fn)`` are correct on every rank unchanged: on a rank where the task does not
execute ``run`` does nothing, and touching a view there raises :class:`RemoteTaskError`.

Reductions (``ld.reduce(op)``): a task reducing into a data on rank ``E`` reduces
into ``E``'s *partial* of it (a local data filled with the identity of ``op`` when
``E`` first contributes); the holders do not change. The next other access of the
data (or ``wait``, ``finalize``, or a reduction with another operation) combines on
the rank that needs it: the current value (the identity where the data has none
yet: made by ``logical_data_empty``, neither written nor combined since, as
locally), then every contributing rank's partial in rank order (each sent by its
rank), so the result is the same wherever it is combined; that rank then holds the
data alone. Partials are private data of their rank, 0-d and empty ones included.

The hot path: on every rank, every task costs the check of its dependencies, a test
per dependency (pending reduction, reduction, or read by a rank not holding the
data) and the update of the holders (:mod:`stflow._dist.handles`, where the data and
task handles live); only the executing rank builds a local task, and only the ranks
of an exchange do more.

A failure on one rank would leave the others waiting in their next transfer: a
``distributed_context`` used as a ``with`` block aborts the communicator
(``comm.Abort``) when an exception leaves it, after printing the error.
"""

from __future__ import annotations

import sys
import traceback
import types
from collections.abc import Callable
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from .._core.access import READ, WRITE
from .._core.errors import ContextFinalizedError, ScopeError, ShapeError
from .._core.reduce import REDUCE, ReduceOp, reduce_op
from .._handles.bundles import Regrouping, bundle_dep, expand, make_bundle
from .._handles.bundles import bundle as _Bundle
from .._interchange.sources import describe_buffer
from .._places.places import exec_place
from .collective import agree, check_each_call
from .exchanges import Exchanges
from .handles import (
    Reduction,
    dist_data,
    dist_dep,
    dist_kernel,
    dist_task,
    executed,
    one_place,
)

__all__ = ["distributed_context"]

Rank = Union[int, Any]  # noqa: UP007 - evaluated at import, as typing.Any allows on 3.10
"""A rank in a public signature: an ``int`` (checked by the methods themselves, with
messages naming the remedy, rather than by the compiled build's argument checks)."""

Dependency = Union["dist_dep", Any]
"""A dependency in a public signature: ``ld.read()`` and the like (checked the same
way)."""


def _described(array: Any, registered: bool) -> tuple[Any, tuple[int, ...], np.dtype]:
    """What to register for ``array`` (the object itself where a local context
    registers it: a NumPy array, a CUDA Array Interface, DLPack or buffer object;
    else ``numpy.asarray(array)``), and its shape and dtype. A rank that does not own
    the data (``registered`` false) reads only the shape and dtype, of any layout."""
    if isinstance(array, np.ndarray):
        return array, array.shape, array.dtype
    if hasattr(array, "__cuda_array_interface__") or hasattr(array, "__dlpack__"):
        try:
            source = describe_buffer(array)
        except ShapeError:
            if registered:
                raise  # the local context would refuse it too
        else:
            return array, source.shape, source.dtype
    converted = np.asarray(array)
    return converted, converted.shape, converted.dtype


_COMM_METHODS = (
    "Get_rank",
    "Get_size",
    "Isend",
    "Irecv",
    "Bcast",
    "allgather",
    "Barrier",
    "Abort",
)
"""What the layer calls on its communicator (an mpi4py ``Intracomm`` has them all)."""

_COMM_REMEDY = (
    "pass an MPI communicator: 'from mpi4py import MPI' then "
    "distributed_context(MPI.COMM_WORLD) (pip install 'stflow[mpi]')"
)


def _check_comm(comm: Any) -> None:
    """Refuse what is not an intracommunicator the layer can use: an mpi4py
    ``Intracomm`` other than ``COMM_NULL``, or an object with its methods."""
    MPI = sys.modules.get("mpi4py.MPI")  # imported wherever a communicator exists
    if MPI is not None and isinstance(comm, MPI.Comm):
        if comm == MPI.COMM_NULL:
            raise ValueError(
                f"distributed_context: comm is MPI.COMM_NULL, which has "
                f"no ranks; {_COMM_REMEDY}"
            )
        if comm.Is_inter():
            raise TypeError(
                f"distributed_context: comm must be an intracommunicator "
                f"(mpi4py.MPI.Intracomm), got an intercommunicator "
                f"({type(comm).__name__}); merge it first "
                f"(comm.Merge()) or {_COMM_REMEDY}"
            )
        return
    missing = [name for name in _COMM_METHODS if not callable(getattr(comm, name, None))]
    if not missing:
        return
    kind = type(comm).__name__
    if comm is None:
        got = "None"
    elif isinstance(comm, types.ModuleType):
        got = f"the module {comm.__name__}"
    elif len(missing) < len(_COMM_METHODS):
        got = f"an object of type {kind} without {', '.join(missing)}"
    elif isinstance(comm, (int, float, str)):
        got = f"{kind} {comm!r}"
    else:
        got = f"an object of type {kind}"
    raise TypeError(
        f"distributed_context: comm must be an MPI communicator (an "
        f"mpi4py.MPI.Intracomm such as MPI.COMM_WORLD, or an object with "
        f"its methods {', '.join(_COMM_METHODS)}), got {got}; "
        f"{_COMM_REMEDY}"
    )


class distributed_context:
    """A sequential task flow over the ranks of ``comm`` (see the module docstring).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        Every rank of it runs the same program (``MPI.COMM_WORLD``, or any
        intracommunicator; an object with the methods of one will do).
    backend, use_graph
        Of each rank's local context (``stf.context``).
    device : int, optional
        The device this rank's tasks run on when they name no place (made the
        current device of the calling thread). By default, on a backend with several
        devices, the rank's index among the ranks of its node, modulo the devices:
        two ranks on a two-GPU node use one GPU each.

    Attributes
    ----------
    rank, size : int
        This rank and the number of ranks.
    local : stflow.context
        This rank's own context. Work on data that only this rank ever touches may be
        given to it directly (under ``if ctx.rank == r:``), so that the other ranks
        skip it altogether; never pass it a distributed data's local part.

    Notes
    -----
    Collective: every rank must create the same data and submit the same tasks, in
    the same order (the program is the same on every rank), apart from work given to
    ``local``.
    """

    def __init__(
        self,
        comm: Any,
        *,
        backend: str | None = None,
        use_graph: bool = False,
        device: int | None = None,
    ) -> None:
        from .._handles.context import context

        _check_comm(comm)
        self._check_each = check_each_call()  # STFLOW_DISTRIBUTED_CHECK=1
        self.comm = comm
        self.rank = int(comm.Get_rank())
        self.size = int(comm.Get_size())
        self.local = context(backend=backend, use_graph=use_graph)
        self._backend: Any = self.local._live().backend
        self._previous_device = -1
        try:
            self.device = self._choose_device(device)
            self._exchanges = Exchanges(comm, self.local, use_graph, self.device)
        except BaseException:
            self.local.finalize()  # a bad device= leaves no context behind
            if self._previous_device >= 0:
                self._backend.set_current_device(self._previous_device)
            raise
        self._arriving = 0  # data received here and not landed yet
        self._data: list[dist_data] = []
        self._finalized = False
        self._calls = 0  # collective calls so far (data, tasks)

    def _choose_device(self, device: Any) -> int:
        """Make ``device`` (default: the node-local rank modulo the device count)
        current for this rank's tasks; returns it."""
        backend = self._backend
        count = backend.device_count
        if device is None:
            if count <= 1:
                return backend.current_device()
            try:
                from mpi4py import MPI

                node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
                local_rank = node.Get_rank()
                node.Free()
            except (ImportError, AttributeError):  # not an mpi4py communicator
                local_rank = self.rank
            device = local_rank % count
        elif (
            isinstance(device, bool)
            or not isinstance(device, int)
            or not 0 <= device < count
        ):
            raise ValueError(
                f"device must be a device of the {backend.name} backend "
                f"(0..{count - 1}), got {device!r}"
            )
        self._previous_device = backend.current_device()  # restored at finalize
        backend.set_current_device(device)
        return device

    # -- data ------------------------------------------------------------------------
    def _check_owner(self, owner: Any) -> int:
        if isinstance(owner, bool) or not isinstance(owner, int):
            raise TypeError(f"owner must be a rank (an int), got {type(owner).__name__}")
        if not 0 <= owner < self.size:
            raise ValueError(
                f"owner {owner} is not a rank of this communicator (0..{self.size - 1})"
            )
        return owner

    def logical_data(
        self, array: npt.ArrayLike, *, owner: Rank = 0, name: str | None = None
    ) -> dist_data:
        """``array`` as logical data owned by rank ``owner``: its value there is the
        initial value, and ``finalize()`` writes the final value into it there (the
        other ranks' arrays are never read or written, only their shape and dtype).
        ``array`` is anything a local context registers (a NumPy array, a buffer, a
        CUDA Array Interface or DLPack object such as a CuPy array or a PyTorch
        tensor); anything else goes through ``numpy.asarray``."""
        owner = self._check_owner(owner)
        array, shape, dtype = _described(array, self.rank == owner)
        index = len(self._data)
        label = name or f"d{index}"
        self._collective_call("data", index, shape, dtype.str, owner)
        if self.rank == owner:
            local = self.local.logical_data(array, name=label)
        else:
            local = self._private(shape, dtype, label)
        data = dist_data(local, owner, index, shape, dtype, label, {owner})
        data.context = self
        self._data.append(data)
        return data

    def _private(self, shape: tuple[int, ...], dtype: np.dtype, label: str) -> Any:
        """Local data of this rank that only ever holds copies (written before any
        read: received, or written by a task): without a host buffer, so not
        page-locked nor kept in host memory, except for 0-d and empty data, which
        local ``logical_data_empty`` refuses (a buffer of at most one element)."""
        if shape and all(shape):
            return self.local.logical_data_empty(shape, dtype, name=label)
        return self.local.logical_data(np.zeros(shape, dtype), name=label)

    def token(self, *, owner: Rank = 0, name: str | None = None) -> dist_data:
        """Data without bytes that only orders tasks, also across ranks: a task
        reading it on another rank waits for the last one writing it (a one-byte
        message carries the order)."""
        data = self.logical_data_empty((1,), np.uint8, owner=owner, name=name)
        data.is_token = True
        return data

    def logical_data_empty(
        self,
        shape: tuple[int, ...],
        dtype: Any = np.float64,
        *,
        owner: Rank = 0,
        name: str | None = None,
    ) -> dist_data:
        """Data without a value yet (written first), owned by ``owner``."""
        owner = self._check_owner(owner)
        index = len(self._data)
        label = name or f"d{index}"
        dims: Any = shape
        if not isinstance(dims, (tuple, list)):
            dims = (dims,)
        if any(
            isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0
            for n in dims
        ):
            raise ValueError(
                f"logical_data_empty: shape must be non-negative integers, got {shape!r}"
            )
        checked_shape = tuple(int(n) for n in dims)
        checked_dtype = np.dtype(dtype)
        self._collective_call("data", index, checked_shape, checked_dtype.str, owner)
        local = self._private(checked_shape, checked_dtype, label)
        data = dist_data(
            local,
            owner,
            index,
            checked_shape,
            checked_dtype,
            label,
            {owner},
            has_initial=False,
        )
        data.context = self
        self._data.append(data)
        return data

    def bundle(self, view: Any = None, /, **fields: Any) -> _Bundle[Any]:
        """Group this context's data as one dependency (``context.bundle``); the
        fields may have different owners (each is exchanged as a dependency of its
        own)."""
        self._check_live("bundle()")
        label = "distributed_context.bundle()"

        def check(data: Any, name: str) -> None:
            if not isinstance(data, dist_data) or data.context is not self:
                raise TypeError(
                    f"{label}: field {name!r} must be data of this "
                    f"distributed context, got {type(data).__name__}"
                )

        def alive(owner: Any, what: str) -> None:
            if self._finalized:
                raise ContextFinalizedError(
                    f"{owner!r}.{what}: the bundle's context is finalized"
                )

        return make_bundle(view, fields, check, alive, label, _field_dep)

    # -- work ------------------------------------------------------------------------
    def task(
        self,
        *deps: Dependency,
        rank: Rank | None = None,
        place: Any = None,
        symbol: str | None = None,
    ) -> dist_task:
        """A task executing on ``rank`` (default: the owner of its first written
        data), on execution place ``place`` there; ``symbol`` names its local task
        (traces, DOT graphs)."""
        if self._finalized:
            self._check_live("task()")
        if deps and isinstance(deps[0], exec_place):  # ctx.task(place, *deps)
            place, deps = one_place(place, deps[0], "task"), deps[1:]
        flat, layout = _expanded_if_bundled(deps, "distributed task")
        made = dist_task(self, flat, rank, place, symbol)
        made._layout = layout
        return made

    def cuda_kernel(
        self,
        *deps: Dependency,
        rank: Rank | None = None,
        place: Any = None,
        symbol: str | None = None,
    ) -> dist_kernel:
        """A kernel-launch task (``local.cuda_kernel``) executing like :meth:`task`:
        ``k.launch(kernel, grid, block, (k.get_arg(0), ...))`` launches on the
        executing rank and does nothing elsewhere."""
        self._check_live("cuda_kernel()")
        if deps and isinstance(deps[0], exec_place):
            place, deps = one_place(place, deps[0], "cuda_kernel"), deps[1:]
        flat, layout = _expanded_if_bundled(deps, "distributed cuda_kernel")
        kernel = dist_kernel(self, flat, rank, place, symbol)
        kernel._layout = layout
        return kernel

    def host_launch(
        self, *deps: Dependency, fn: Callable[..., Any], rank: Rank | None = None
    ) -> None:
        """``fn(*arrays)`` on the host of the executing rank, after its data."""
        self._check_live("host_launch()")
        if not callable(fn):
            raise TypeError(f"host_launch: fn must be callable, got {type(fn).__name__}")
        deps, layout = _expanded_if_bundled(deps, "distributed host_launch")
        t = dist_task(self, deps, rank, None)
        local_deps = t._prepare()
        if local_deps is not None and layout is not None:
            self._bundle_host_launch(local_deps, deps, layout, fn)
        elif local_deps is not None:
            arrays = [
                local
                for local, (data, _, _) in zip(local_deps, deps)
                if not data.is_token
            ]
            tokens = [
                local for local, (data, _, _) in zip(local_deps, deps) if data.is_token
            ]
            count = len(arrays)  # the tokens' bytes are not the callback's
            self.local.host_launch(*arrays, *tokens, fn=_FirstArguments(fn, count))
        executed(deps, t.rank)

    def _bundle_host_launch(
        self,
        local_deps: list[Any],
        deps: tuple[Any, ...],
        layout: list[Any],
        fn: Callable[..., Any],
    ) -> None:
        """``host_launch`` of a task with bundles on the executing rank: ``fn`` gets
        one argument per task argument (a bundle's named tuple; ``None`` for its
        tokens), as locally."""
        arrays = [
            local for local, (data, _, _) in zip(local_deps, deps) if not data.is_token
        ]
        tokens = [local for local, (data, _, _) in zip(local_deps, deps) if data.is_token]
        has_memory = [not data.is_token for data, _, _ in deps]
        self.local.host_launch(
            *arrays, *tokens, fn=Regrouping(fn, layout, has_memory, extra=False)
        )

    # -- exchanges -------------------------------------------------------------------
    def _prepare(self, data: dist_data, mode: int, rank: int) -> None:
        """Before work on ``rank`` accessing ``data`` with ``mode`` (collective
        bookkeeping): combine the data's pending reductions unless it reduces into
        it with the same operation, bring it the data if it reads it, and give it a
        partial, holding the identity, if it reduces into it."""
        reduction = data.reduction
        if mode & REDUCE:
            if reduction is not None and reduction.mode != mode:
                self._combine(data, rank)  # another operation: settle first
                reduction = None
            if reduction is None:
                reduction = data.reduction = Reduction(mode)
            if rank not in reduction.ranks:
                reduction.ranks.add(rank)
                if rank == self.rank:
                    self._open_partial(data, reduction.op)
            return
        if reduction is not None:
            self._combine(data, rank)
        if mode & READ and rank not in data.holders:
            self._bring(data, rank)

    def _open_partial(self, data: dist_data, op: ReduceOp) -> None:
        """Fill this rank's partial of ``data`` with ``op``'s identity (a local task;
        the partial is made on first use and kept, as private data: 0-d and empty
        data too)."""
        if data.partial is None:
            data.partial = self._private(data.shape, data.dtype, f"{data.name}.partial")
        with self.local.task(data.partial.write()) as t:
            t.run(_Fill(op.identity(data.dtype)))

    def _combine(self, data: dist_data, rank: int) -> None:
        """Combine the pending reductions into ``data`` on ``rank`` (collective): its
        current value, brought to ``rank`` (the identity where the data was never
        written, as locally), then every partial in rank order, each sent by its
        rank; ``rank`` then holds the result alone."""
        reduction = data.reduction
        assert reduction is not None
        data.reduction = None
        fresh = data.never_written()  # no value to bring: start from identity
        if not fresh and rank not in data.holders:
            self._bring(data, rank)
        ranks = sorted(reduction.ranks)
        tag = self._tag(data, partial=True)
        exchanges = self._exchanges
        if self.rank != rank:
            if self.rank in reduction.ranks:
                exchanges.send(data.partial, data.nbytes, rank, tag)
        else:
            sources = [source for source in ranks if source != rank]
            parts = [
                exchanges.receive(data.shape, data.dtype, data.nbytes, source, tag)
                for source in sources
            ]
            self._land([(data, READ, None)])
            # Each partial lands in local data of its own, which the combining task
            # reads where it runs (a task body must not copy host arrays itself:
            # graph mode captures it).
            deps = [data.local.write() if fresh else data.local.rw()]
            order = []
            if rank in reduction.ranks:
                deps.append(data.partial.read())
                order.append(rank)
            for source, incoming in zip(sources, parts):
                arrived = self._private(
                    data.shape, data.dtype, f"{data.name}.partial{source}"
                )
                exchanges.land(arrived, incoming)
                deps.append(arrived.read())
                order.append(source)
            identity = reduction.op.identity(data.dtype) if fresh else None
            with self.local.task(*deps) as t:
                t.run(_Combine(reduction.op.ufunc, identity, order, ranks))
        data.holders = {rank}
        data.version += 1

    def _bring(self, data: dist_data, rank: int) -> None:
        """Make ``rank`` hold ``data``'s current version (collective bookkeeping): the
        lowest holder sends it, ``rank`` posts its receive (landed in the local data
        when first needed there, :meth:`_land`)."""
        if rank in data.holders:
            return
        source = min(data.holders)
        if self.rank == source:
            self._land([(data, READ, None)])
            self._exchanges.send(data.local, data.nbytes, rank, self._tag(data))
        elif self.rank == rank:
            data.incoming = self._exchanges.receive(
                data.shape, data.dtype, data.nbytes, source, self._tag(data)
            )
            self._arriving += 1
        data.holders.add(rank)

    def _land(self, deps: Any) -> None:
        """Complete the receives of the data of ``deps`` and write what arrived into
        the local data, before local work uses it."""
        arriving = [data for data, _, _ in deps if data.incoming is not None]
        if not arriving:
            return
        if len(arriving) > 1:
            arriving = list({id(data): data for data in arriving}.values())
        exchanges = self._exchanges
        exchanges.staging.progress()  # buffers of earlier landings
        for data in arriving:
            incoming = data.incoming
            data.incoming = None
            self._arriving -= 1
            exchanges.land(data.local, incoming)

    def _tag(self, data: dist_data, partial: bool = False) -> int:
        """The tag of a message carrying ``data``'s current version (or a partial
        result of its reduction): from the data and its version, within the
        communicator's tag limit."""
        return (
            (data.index << 16) | (data.version & 0x7FFF) << 1 | partial
        ) % self._exchanges.tag_limit

    def wait(self, data: dist_data) -> np.ndarray:
        """The current value of ``data``, on every rank (collective)."""
        self._check_live("wait()")
        if data.is_token:
            raise TypeError(f"wait() on token {data.name}: a token holds no data")
        self._agree(("wait", data.index, self._calls))
        if data.reduction is not None:
            self._combine(data, min(data.holders))
        source = min(data.holders)
        if self.rank == source:
            self._land([(data, READ, None)])
            value = np.array(self.local.wait(data.local), order="C")  # keeps 0-d
        else:
            value = np.empty(data.shape, dtype=data.dtype)
        self._exchanges.post_all()  # no rank waits on us inside Bcast
        self.comm.Bcast(value, root=source)
        return value

    def fence(self) -> int:
        """Land what this rank received, complete its sends, then fence the local
        context (every rank): the local context's fence stream, which completes
        once this rank's work submitted so far has (as ``context.fence()``, it does
        not block: synchronise the stream to wait for the device)."""
        self._check_live("fence()")
        self._agree(("fence", self._calls))
        self._land([(data, READ, None) for data in self._data])
        self._exchanges.flush()
        return self.local.fence()

    def finalize(self) -> None:
        """Bring every data back to its owner, then finalize the local contexts: each
        owner's array gets its data's final value (collective)."""
        if self._finalized:
            return
        self._agree(("finalize", self._calls))
        for data in self._data:
            if data.reduction is not None:
                self._combine(data, data.owner)
            self._bring(data, data.owner)
        self._land([(data, READ, None) for data in self._data])
        self._exchanges.flush()
        self._finalized = True
        self.local.finalize()
        self._exchanges.close()
        if self._previous_device >= 0:
            self._backend.set_current_device(self._previous_device)
        self.comm.Barrier()

    # -- the same program on every rank (stflow._dist.collective) ---------------------------
    def _collective_call(self, *signature: Any) -> None:
        """Count a collective call; with ``STFLOW_DISTRIBUTED_CHECK=1`` the ranks
        compare it first."""
        if self._check_each:
            self._agree((*signature, self._calls))
        self._calls += 1

    def _agree(self, signature: tuple) -> None:
        """Raise :class:`DivergentProgramError` unless every rank makes this call
        (collective: staged sends are posted first, as before any collective)."""
        self._exchanges.post_all()
        data = self._data
        agree(
            self.comm,
            signature,
            lambda index: data[index].name if index < len(data) else f"d{index}",
            self._check_each,
        )

    def _check_live(self, what: str) -> None:
        if self._finalized:
            raise ScopeError(f"distributed_context.{what} after finalize()")

    def __enter__(self) -> distributed_context:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self.finalize()
                return
            except BaseException as failure:  # the others wait in finalize's exchanges
                exc_type, exc, tb = type(failure), failure, failure.__traceback__
        # The other ranks would wait in their next exchange forever: abort them.
        err = sys.__stderr__ or sys.stderr  # not a capture that dies with us
        print(
            f"stflow: rank {self.rank} of {self.size} failed; aborting the communicator:",
            file=err,
        )
        traceback.print_exception(exc_type, exc, tb, file=err)
        err.flush()
        self.comm.Abort(1)

    def __repr__(self) -> str:
        return (
            f"distributed_context(rank={self.rank}, size={self.size}, "
            f"data={len(self._data)})"
        )


def _expanded_if_bundled(
    deps: tuple[Any, ...], label: str
) -> tuple[tuple[Any, ...], list[Any] | None]:
    """``deps`` and no layout, or, when a bundle is among them, :func:`_expanded`."""
    for d in deps:
        if isinstance(d, bundle_dep):
            return _expanded(deps, label)
    return deps, None


def _expanded(deps: tuple[Any, ...], label: str) -> tuple[tuple[Any, ...], list[Any]]:
    """The dependencies with bundles expanded, and the layout of the arguments."""
    flat, layout, others = expand(deps, lambda d: d, label, dist_dep)
    if others:
        raise TypeError(
            f"a dependency of a distributed task is ld.read()/write()/rw()/"
            f"reduce() of this context's data or a bundle's dependency, got "
            f"{type(others[0]).__name__}"
        )
    assert layout is not None
    return tuple(flat), layout


def _field_dep(data: Any, mode: int, dplace: Any) -> Any:
    """A bundle field's dependency on distributed data ``data``."""
    if mode & REDUCE:
        return data.reduce(reduce_op(mode).name, dplace)
    if mode == READ:
        return data.read(dplace)
    if mode == WRITE:
        return data.write(dplace)
    return data.rw(dplace)


# Task bodies of the reductions' combining steps, as objects rather than closures: the
# body runs later, on another thread where the backend runs task bodies there, and the
# compiled build's closure environments have not survived that (see _handles.callbacks._HostCallback).


class _FirstArguments:
    """A host callback ``fn`` on its first ``count`` arguments (the tokens' bytes
    that follow are not the callback's)."""

    __slots__ = ("fn", "count")

    def __init__(self, fn: Callable[..., Any], count: int) -> None:
        self.fn = fn
        self.count = count

    def __call__(self, *values: Any) -> None:
        self.fn(*values[: self.count])


class _Fill:
    """Body filling a partial with its operator's identity."""

    __slots__ = ("identity",)

    def __init__(self, identity: Any) -> None:
        self.identity = identity

    def __call__(self, xp: Any, view: Any) -> None:
        view.fill(self.identity)


class _Combine:
    """Body combining the partials into the value, in rank order (the same result on
    every rank and in every run): ``partials`` come in ``order``; ``identity`` first
    fills a value that was never written."""

    __slots__ = ("ufunc", "identity", "order", "ranks")

    def __init__(
        self, ufunc: Any, identity: Any, order: list[int], ranks: list[int]
    ) -> None:
        self.ufunc = ufunc
        self.identity = identity
        self.order = order
        self.ranks = ranks

    def __call__(self, xp: Any, value: Any, *partials: Any) -> None:
        if self.identity is not None:
            value.fill(self.identity)
        by_rank = dict(zip(self.order, partials))
        for source in self.ranks:
            self.ufunc(value, by_rank[source], out=value)
