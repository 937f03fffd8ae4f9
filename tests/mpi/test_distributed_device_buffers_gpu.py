"""The device-buffer path on CUDA (values handed to MPI as CUDA buffers), against the
sequential oracle, with a stand-in for a CUDA-aware MPI where the machine's MPI is not
one (``helpers.mpi_cuda``). Run on a GPU machine under mpiexec (the GPU session's
``distributed`` step); skipped without CuPy or a GPU."""

from __future__ import annotations

import os

import pytest
from helpers.backends import cuda_unavailable_reason

import stflow as stf
from stflow.testing import check_distributed_program

SEEDS = int(os.environ.get("STFLOW_DISTRIBUTED_SEEDS", "300"))

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("reductions", [False, True])
def test_device_buffers_on_cuda_match_the_oracle(comm, monkeypatch, reductions):
    pytest.importorskip("cupy")
    reason = cuda_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from helpers.mpi_cuda import CudaAwareStandIn

    from stflow._dist.staging import DirectStaging, mpi_cuda_aware

    monkeypatch.setenv("STFLOW_MPI_CUDA_AWARE", "1")
    cuda_comm = comm if mpi_cuda_aware() else CudaAwareStandIn(comm)
    with stf.distributed_context(cuda_comm, backend="cuda") as ctx:
        assert isinstance(ctx._exchanges.staging, DirectStaging)
    failures = []
    for seed in range(0, max(SEEDS // 3, 10)):
        try:
            check_distributed_program(
                seed,
                cuda_comm,
                "cuda",
                reductions=reductions,
                edge_reductions=reductions and seed % 2 == 1,
            )
        except AssertionError as exc:
            failures.append(f"seed {seed}: {exc}")
    assert not failures, "\n\n".join(failures[:2])
