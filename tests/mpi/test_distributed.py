"""stf.distributed_context: the same task flow on every rank, data moved to where
tasks execute, results written back on the owners (run with mpiexec, see conftest)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import stflow as stf
import stflow.emulated  # stf.emulated.launch (a submodule: imported, not lazy)
from stflow.errors import RemoteTaskError
from stflow.testing import check_distributed_program

SEEDS = int(os.environ.get("STFLOW_DISTRIBUTED_SEEDS", "300"))


def test_a_chain_visits_every_rank_and_the_owner_gets_the_result(comm, backend):
    size, rank = comm.Get_size(), comm.Get_rank()
    X = np.zeros(8)
    with stf.distributed_context(comm, backend=backend) as ctx:
        x = ctx.logical_data(X, owner=0, name="x")
        for step in range(2 * size):
            with ctx.task(x.rw(), rank=step % size) as t:
                assert t.runs_here == (rank == step % size)
                t.run(lambda xp, a, step=step: a.__iadd__(step + 1.0))
        seen = ctx.wait(x)  # the value, on every rank
    total = sum(range(1, 2 * size + 1))
    np.testing.assert_array_equal(seen, np.full(8, total))
    expected = np.full(8, total) if rank == 0 else np.zeros(8)  # owner only
    np.testing.assert_array_equal(X, expected)


def test_fence_gives_a_stream_that_completes_after_the_ranks_work(comm, backend):
    """``fence()`` completes the exchanges and returns this rank's fence stream (it
    does not block, as in one process): work queued on it runs after every task
    this rank executed."""
    import threading
    import time

    ran = []
    with stf.distributed_context(comm, backend=backend) as ctx:
        owned = [ctx.logical_data(np.zeros(4), owner=r) for r in range(comm.Get_size())]
        for data in owned:
            with ctx.task(data.rw()) as t:
                t.run(lambda xp, a: (time.sleep(0.05), a.__iadd__(1.0), ran.append(1)))
        handle = ctx.fence()
        assert isinstance(handle, int) and handle
        if backend == "emulated":
            done = threading.Event()
            stf.emulated.launch(handle, lambda: done.set())
            assert done.wait(10)
        else:
            from cuda.bindings import driver

            (err,) = driver.cuStreamSynchronize(handle)
            assert not err, err
        assert ran == [1]  # the one task this rank executed


def test_tasks_run_where_their_written_data_lives(comm, backend):
    size, rank = comm.Get_size(), comm.Get_rank()
    arrays = [np.full(4, float(r)) for r in range(size)]
    expected = [a.copy() for a in arrays]
    for r in range(size):  # the same program, sequentially
        expected[r] += 10 * expected[(r - 1) % size]
    with stf.distributed_context(comm, backend=backend) as ctx:
        data = [ctx.logical_data(a, owner=r) for r, a in enumerate(arrays)]
        for r in range(size):
            with ctx.task(data[r].rw(), data[(r - 1) % size].read()) as t:
                assert t.runs_here == (rank == r)  # the owner of data[r]
                t.run(lambda xp, mine, other: mine.__iadd__(10 * other))
    for r in range(size):
        want = expected[r] if r == rank else np.full(4, float(r))
        np.testing.assert_array_equal(arrays[r], want)


def test_touching_views_where_the_task_does_not_run_fails_loudly(comm):
    size, rank = comm.Get_size(), comm.Get_rank()
    if size < 2:
        pytest.skip("needs two ranks")
    with stf.distributed_context(comm, backend="emulated") as ctx:
        x = ctx.logical_data(np.zeros(2), owner=1)
        with ctx.task(x.rw()) as t:
            if rank != 1:
                with pytest.raises(RemoteTaskError, match="runs_here"):
                    t.views()
                with pytest.raises(RemoteTaskError, match="executes on rank 1"):
                    t.get_arg_cai(0)
                t.run(lambda xp, a: pytest.fail("runs only on rank 1"))
            else:
                t.run(lambda xp, a: a.__iadd__(1.0))
        assert ctx.wait(x)[0] == 1.0


def test_bad_owners_and_dependencies_are_refused(comm):
    with stf.distributed_context(comm, backend="emulated") as ctx:
        with pytest.raises(ValueError, match="not a rank"):
            ctx.logical_data(np.zeros(2), owner=comm.Get_size())
        with pytest.raises(TypeError, match="rank"):
            ctx.logical_data(np.zeros(2), owner="0")
        x = ctx.logical_data(np.zeros(2))
        with pytest.raises(TypeError, match="read"):
            ctx.task(x)
        with pytest.raises(ValueError, match="not a rank"):
            ctx.task(x.rw(), rank=-1)
        with pytest.raises(ValueError, match="non-negative integers"):
            ctx.logical_data_empty((4, -1))
        with pytest.raises(TypeError):
            ctx.logical_data_empty((4,), dtype="no such type")
        zero_d = ctx.logical_data_empty((), np.int32)  # accepted, like empty
        assert zero_d.shape == () and zero_d.dtype == np.int32
        assert ctx.logical_data_empty((3, 0)).shape == (3, 0)


class _HalfACommunicator:
    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1


@pytest.mark.parametrize(
    "comm_given, got",
    [
        (None, "got None;"),
        (0, "got int 0;"),
        ("COMM_WORLD", "got str 'COMM_WORLD';"),
        ("the module", "got the module mpi4py.MPI;"),
        (
            _HalfACommunicator(),
            "got an object of type _HalfACommunicator without Isend, "
            "Irecv, Bcast, allgather, Barrier, Abort;",
        ),
    ],
)
def test_what_is_not_a_communicator_is_refused_naming_what_arrived(comm, comm_given, got):
    from mpi4py import MPI

    if comm_given == "the module":
        comm_given = MPI
    with pytest.raises(TypeError) as refused:
        stf.distributed_context(comm_given, backend="emulated")
    message = str(refused.value)
    assert message.startswith(
        "distributed_context: comm must be an MPI communicator "
        "(an mpi4py.MPI.Intracomm such as MPI.COMM_WORLD"
    )
    assert got in message
    assert message.endswith(
        "distributed_context(MPI.COMM_WORLD) (pip install 'stflow[mpi]')"
    )


class _Delegating:
    """Another library's communicator: mpi4py's methods, by delegation."""

    def __init__(self, comm):
        self.comm = comm

    def __getattr__(self, name):
        return getattr(self.comm, name)


def test_an_object_with_a_communicators_methods_will_do(comm):
    size = comm.Get_size()
    with stf.distributed_context(_Delegating(comm), backend="emulated") as ctx:
        acc = ctx.logical_data_empty((), owner=size - 1)
        for r in range(size):
            with ctx.task(acc.reduce("sum"), rank=r) as t:
                t.run(lambda xp, view, r=r: view.__setitem__(Ellipsis, r + 1))
        assert ctx.wait(acc) == size * (size + 1) / 2


def test_the_null_and_inter_communicators_are_refused(comm):
    from mpi4py import MPI

    with pytest.raises(ValueError, match="comm is MPI.COMM_NULL, which has no ranks"):
        stf.distributed_context(MPI.COMM_NULL, backend="emulated")
    size, rank = comm.Get_size(), comm.Get_rank()
    if size < 2:
        return  # an intercommunicator needs two groups
    half = comm.Split(rank % 2, rank)
    inter = half.Create_intercomm(0, comm, 1 - rank % 2, tag=7)
    try:
        with pytest.raises(TypeError, match="got an intercommunicator.*comm.Merge()"):
            stf.distributed_context(inter, backend="emulated")
    finally:
        inter.Free()
        half.Free()


@pytest.mark.parametrize("first", range(0, SEEDS, 50))
def test_random_programs_match_the_oracle_on_every_rank(comm, backend, first):
    """Random owners and executing ranks; every rank checks its wait results and the
    user arrays it owns against the sequential oracle."""
    failures = []
    for seed in range(first, min(first + 50, SEEDS)):
        try:
            check_distributed_program(seed, comm, backend)
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, "\n\n".join(failures[:2])


@pytest.mark.parametrize("first", range(0, SEEDS // 3, 50))
def test_random_programs_in_graph_mode_match_the_oracle(comm, backend, first):
    """The same with every rank's local context in graph mode (the exchanges land and
    leave through graph epochs), with and without reductions across ranks."""
    failures = []
    for seed in range(first, min(first + 50, SEEDS // 3)):
        for reductions in (False, True):
            try:
                check_distributed_program(
                    seed, comm, backend, reductions=reductions, use_graph=True
                )
            except AssertionError as exc:
                failures.append(f"seed {seed} (reductions={reductions}): {exc}")
    assert not failures, "\n\n".join(failures[:2])


def test_tokens_order_across_ranks_and_bring_no_arrays(comm):
    size, rank = comm.Get_size(), comm.Get_rank()
    last = size - 1
    X = np.zeros(3)
    seen = []
    with stf.distributed_context(comm, backend="emulated") as ctx:
        x = ctx.logical_data(X, owner=0)
        token = ctx.token(owner=last)
        with ctx.task(token.rw(), x.rw(), rank=last) as t:  # a token and a data
            t.run(lambda xp, a: a.__iadd__(1.0))  # one array: the data
            if t.runs_here:
                assert len(t.views()) == 1
        with ctx.task(token.read(), rank=0) as t:  # tokens only
            t.run(lambda xp: None)
        ctx.host_launch(token.read(), x.read(), rank=0, fn=lambda a: seen.append(a[0]))
        with ctx.task(x.rw(stf.data_place.host()), rank=last) as t:  # a data place
            t.run(lambda xp, a: a.__imul__(5.0))
    if rank == 0:
        assert seen == [1.0]
        np.testing.assert_array_equal(X, np.full(3, 5.0))


def test_each_rank_runs_on_its_device_and_gives_the_previous_one_back(comm):
    """Default: the node-local rank modulo the (two emulated) devices; ``device=``
    picks one; the previous current device returns at finalize; bad ordinals are
    refused."""
    from stflow.backends import get_backend

    backend = get_backend("emulated")
    before = backend.current_device()
    seen = []
    with stf.distributed_context(comm, backend="emulated") as ctx:
        assert ctx.device == comm.Get_rank() % backend.device_count
        x = ctx.logical_data(np.zeros(2), owner=comm.Get_rank())
        with ctx.task(x.rw(), rank=comm.Get_rank()) as t:
            seen.append(backend.current_device())
            t.run(lambda xp, a: a.__iadd__(1.0))
    assert seen == [comm.Get_rank() % backend.device_count]
    assert backend.current_device() == before
    with stf.distributed_context(comm, backend="emulated", device=1) as ctx:
        assert ctx.device == 1 and backend.current_device() == 1
    assert backend.current_device() == before
    with pytest.raises(ValueError, match="device must be a device"):
        stf.distributed_context(comm, backend="emulated", device=7)


def test_task_symbols_name_the_local_tasks(comm):
    from stflow.instrument import DotRecorder

    recorder = DotRecorder()
    with stf.distributed_context(comm, backend="emulated") as ctx:
        ctx.local.attach(recorder)
        x = ctx.logical_data(np.zeros(2))  # owned by rank 0
        with ctx.task(x.rw(), symbol="named") as t:
            t.run(lambda xp, a: a.__iadd__(1.0))
    assert ("named" in recorder.to_dot()) == (comm.Get_rank() == 0)


def test_values_larger_than_a_piece_travel_as_several_messages(
    comm, backend, monkeypatch
):
    """Above STFLOW_MPI_PIECE bytes a value goes as pieces (here of 20 bytes, so
    float64 elements and the pieces' edges do not line up): values, partial sums of
    reductions, 0-d and empty data arrive whole, on every rank."""
    monkeypatch.setenv("STFLOW_MPI_PIECE", "20")
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "0")  # device buffers go whole
    size, rank = comm.Get_size(), comm.Get_rank()
    X = np.arange(37, dtype=np.float64)
    S = np.zeros(37)
    with stf.distributed_context(comm, backend=backend) as ctx:
        assert ctx._exchanges.piece == 20
        x = ctx.logical_data(X, owner=0)
        s = ctx.logical_data(S, owner=size - 1)
        z = ctx.logical_data(np.array(2.5), owner=0)
        e = ctx.logical_data(np.zeros(0), owner=0)
        for step in range(2 * size):
            r = step % size
            with ctx.task(x.rw(), z.read(), e.read(), rank=r) as t:
                t.run(lambda xp, a, b, c: a.__iadd__(b))
            with ctx.task(s.reduce("sum"), x.read(), rank=(r + 1) % size) as t:
                t.run(lambda xp, acc, a: acc.__iadd__(a))
        seen_x, seen_s = ctx.wait(x), ctx.wait(s)
    want_x = np.arange(37) + 2.5 * 2 * size
    want_s = sum(np.arange(37) + 2.5 * (k + 1) for k in range(2 * size))
    np.testing.assert_array_equal(seen_x, want_x)
    np.testing.assert_allclose(seen_s, want_s)
    if rank == 0:
        np.testing.assert_array_equal(X, want_x)
    if rank == size - 1:
        np.testing.assert_allclose(S, want_s)


@pytest.mark.parametrize(
    "piece, limit, use_graph, ahead, buffers",
    [
        ("8", "512", False, "0", "1"),
        ("3", "1", False, "0", "1"),
        ("5", "64", True, "0", "1"),
        ("8", "512", False, "1", "1"),
        ("4", "64", False, "1", "1"),
        ("1000", "100000", False, "1", "1"),
        ("1000", "100000", False, "0", "2"),
        ("6", "512", False, "1", "3"),
    ],
)
def test_random_programs_with_small_pieces_match_the_oracle(
    comm, backend, monkeypatch, piece, limit, use_graph, ahead, buffers
):
    """The differential test with every value cut into pieces of a few bytes, and
    senders waiting for their receivers above a few hundred bytes, or at every send;
    in stream and graph mode; sends posted where they are made, or ahead (once their
    copies completed, the rank going on meanwhile); one buffer per message size in
    flight, or several (double buffering); half the programs reduce into 0-d, empty
    and never-written data too (zero-byte partials)."""
    monkeypatch.setenv("STFLOW_MPI_PIECE", piece)
    monkeypatch.setenv("STFLOW_MPI_SEND_LIMIT", limit)
    monkeypatch.setenv("STFLOW_MPI_SEND_AHEAD", ahead)
    monkeypatch.setenv("STFLOW_MPI_SEND_BUFFERS", buffers)
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "0")  # device buffers go whole
    failures = []
    for seed in range(0, max(SEEDS // 6, 10)):
        try:
            check_distributed_program(
                seed,
                comm,
                backend,
                reductions=seed % 2 == 1,
                use_graph=use_graph,
                edge_reductions=seed % 4 >= 2,
            )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, "\n\n".join(failures[:2])


def test_message_buffers_are_pooled_and_freed_at_finalize(comm, backend, monkeypatch):
    """In stream mode the messages live in pinned host buffers of the backend (the
    emulated backend runs the same path): a value exchanged again and again reuses a
    few buffers, and finalize frees them all."""
    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "0")
    monkeypatch.delenv("STFLOW_MPI_SEND_LIMIT", raising=False)  # spares are kept
    from stflow._dist.staging import PinnedStaging

    size = comm.Get_size()
    with stf.distributed_context(comm, backend=backend) as ctx:
        staging = ctx._exchanges.staging
        assert isinstance(staging, PinnedStaging)
        x = ctx.logical_data(np.zeros(1000), owner=0)
        for step in range(30):  # every task moves x to the next rank
            with ctx.task(x.rw(), rank=step % size) as t:
                t.run(lambda xp, a: a.__iadd__(1))
        result = ctx.wait(x)
        assert staging.pool.made <= 4, staging.pool.made
    assert staging.pool.cached == 0 and not staging.pool.spare
    assert not staging.pool.pending
    np.testing.assert_array_equal(result, np.full(1000, 30.0))


def test_ranks_other_than_the_owner_keep_no_host_copy_of_the_data(comm, backend):
    """Only the owner registers the user's array; elsewhere the local data has no host
    buffer (it only ever holds received copies), so a rank does not allocate, nor
    page-lock on CUDA, the size of every data of the program."""
    size, rank = comm.Get_size(), comm.Get_rank()
    with stf.distributed_context(comm, backend=backend) as ctx:
        data = [ctx.logical_data(np.full(1000, float(r)), owner=r) for r in range(size)]
        empty = ctx.logical_data_empty((1000,), owner=0)
        for r, d in enumerate(data):
            has_buffer = d.local._state.reference is not None
            assert has_buffer == (r == rank)
        assert empty.local._state.reference is None
        with ctx.task(empty.write(), data[-1].read(), rank=0) as t:
            t.run(lambda xp, out, src: out.__setitem__(Ellipsis, src + 1))
        np.testing.assert_array_equal(ctx.wait(empty), np.full(1000, size))


@pytest.mark.parametrize("reductions", [False, True])
def test_device_buffers_handed_to_mpi_match_the_oracle(
    comm, backend, monkeypatch, reductions
):
    """STFLOW_MPI_CUDA_AWARE=1: values go to MPI as device buffers (on the emulated
    backend its device memory, which any MPI can read; on CUDA it needs a CUDA-aware
    MPI, so only the emulated backend runs it here); with reductions, half the
    programs reduce into 0-d, empty and never-written data too."""
    if backend != "emulated":
        pytest.skip("device buffers to a CUDA-aware MPI only")
    from stflow._dist.staging import DirectStaging

    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "1")
    with stf.distributed_context(comm, backend=backend) as ctx:
        assert isinstance(ctx._exchanges.staging, DirectStaging)
    failures = []
    for seed in range(0, max(SEEDS // 3, 10)):
        try:
            check_distributed_program(
                seed,
                comm,
                backend,
                reductions=reductions,
                edge_reductions=reductions and seed % 2 == 1,
            )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, "\n\n".join(failures[:2])


def test_work_only_one_rank_touches_can_go_to_its_local_context(comm, backend):
    """ctx.local takes rank-private work that the other ranks skip altogether; the
    distributed flow around it is unaffected."""
    size, rank = comm.Get_size(), comm.Get_rank()
    with stf.distributed_context(comm, backend=backend) as ctx:
        shared = ctx.logical_data(np.zeros(4), owner=0)
        scratch = ctx.local.logical_data(np.full(4, float(rank)))
        if rank == size - 1:  # only this rank does this work
            for _ in range(3):
                with ctx.local.task(scratch.rw()) as t:
                    t.run(lambda xp, a: a.__iadd__(1.0))
        with ctx.task(shared.rw(), rank=size - 1) as t:
            t.run(lambda xp, a: a.__iadd__(5.0))
        mine = ctx.local.wait(scratch)
        seen = ctx.wait(shared)
    np.testing.assert_array_equal(seen, np.full(4, 5.0))
    want = rank + 3.0 if rank == size - 1 else float(rank)
    np.testing.assert_array_equal(mine, np.full(4, want))


def test_data_from_tensors_and_array_interfaces(comm, backend):
    """logical_data takes what a local context registers (here PyTorch CPU tensors
    through DLPack); a rank that does not own the data reads only the shape and dtype
    of what it passes (here a CUDA Array Interface description of no memory)."""
    torch = pytest.importorskip("torch")
    if backend != "emulated":
        pytest.skip("CPU tensors")
    size, rank = comm.Get_size(), comm.Get_rank()
    owner = size - 1
    mine = torch.arange(6, dtype=torch.float64)
    given = mine if rank == owner else stf.stf_cai(0, (6,), np.float64)
    with stf.distributed_context(comm, backend=backend) as ctx:
        x = ctx.logical_data(given, owner=owner)
        assert (x.shape, x.dtype) == ((6,), np.dtype(np.float64))
        with ctx.task(x.rw(), rank=0) as t:  # travels to rank 0 and back
            t.run(lambda xp, a: a.__imul__(2))
        seen = ctx.wait(x)
    np.testing.assert_array_equal(seen, 2 * np.arange(6))
    if rank == owner:  # written back into the tensor
        np.testing.assert_array_equal(mine.numpy(), 2 * np.arange(6))
