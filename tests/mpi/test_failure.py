"""A failure on one rank ends every rank with the error, never a hang.

The program runs in an ``mpiexec`` of its own, two ranks: rank 1 fails while rank 0
goes on to a task that needs data from rank 1 (it would wait for it forever), or an
asynchronous failure on rank 1 is raised by its ``finalize()`` while rank 0 waits in
its own. The ``distributed_context`` left by the exception aborts the communicator,
so ``mpiexec`` ends, non-zero, with the error in its output. Launched by rank 0 of the
test's own ranks (with an environment cleared of the launcher's variables); the others
skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    import stflow as stf

    comm = MPI.COMM_WORLD
    with stf.distributed_context(comm, backend="emulated") as ctx:
        x = ctx.logical_data(np.zeros(4), owner=0)
        y = ctx.logical_data(np.zeros(4), owner=1)
        if "{how}" == "finalize":     # fails asynchronously: raised by finalize() only
            ctx.host_launch(y.rw(), fn=lambda a: a.__setitem__(0, 1 / 0))
        else:
            with ctx.task(y.rw()) as t:                 # executes on rank 1
                if "{how}" == "raise" and comm.Get_rank() == 1:
                    raise RuntimeError("the task failed on rank 1")
                t.run(lambda xp, a: a.__setitem__(Ellipsis, 1 / {divisor}))
            with ctx.task(x.rw(), y.read()) as t:       # rank 0 needs y from rank 1
                t.run(lambda xp, a, b: a.__iadd__(b))
            ctx.wait(x)
    print("rank", comm.Get_rank(), "finished")
""")


def _launcher() -> str | None:
    here = os.path.dirname(sys.executable)
    local = os.path.join(here, "mpiexec")
    return local if os.path.exists(local) else shutil.which("mpiexec")


@pytest.mark.parametrize("how", ["raise", "body", "finalize"])
def test_a_failure_on_one_rank_ends_every_rank(comm, tmp_path, how):
    if comm.Get_rank() != 0:
        pytest.skip("launched by rank 0")
    mpiexec = _launcher()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    script = tmp_path / "fails.py"
    script.write_text(PROGRAM.format(how=how, divisor=0 if how == "body" else 1))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OMPI_", "PMIX_", "PRTE_", "OPAL_"))
    }
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        STFLOW_PURE_PYTHON=os.environ.get("STFLOW_PURE_PYTHON", "0"),
    )
    process = subprocess.run(
        [mpiexec, "--oversubscribe", "-n", "2", sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
    )
    output = process.stdout + process.stderr
    assert process.returncode != 0, output
    assert "finished" not in output, output
    assert "aborting the communicator" in output, output
    want = "the task failed on rank 1" if how == "raise" else "ZeroDivisionError"
    if how == "finalize":  # rank 1's finalize() raised, rank 0 waited
        assert "in finalize" in output, output
    assert want in output, output
