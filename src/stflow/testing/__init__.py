"""Tools to test programs written with stflow, and stflow itself.

The differential test lives here so that the same random programs run on every
backend: :func:`generate_program` draws a program from a seed, :func:`run_oracle` runs
it sequentially with NumPy, :func:`run_program` runs it through stflow and
:func:`check_program` compares the two. :func:`check_scoped_program` does the same
for scopes, :func:`check_threaded_program` for programs submitted by several host
threads at once (under a watchdog, :func:`run_threads`), and
:func:`check_distributed_program` over the ranks of an MPI communicator.
"""

from ..interop.cupy import as_cupy as cupy_array
from ..interop.cupy import cupy_stream
from ._distributed import check_distributed_program, run_distributed_program
from ._programs import (
    DataSpec,
    Op,
    Outcome,
    Program,
    TaskOp,
    check_program,
    cupy_body,
    emulated_body,
    generate_program,
    initial_arrays,
    run_oracle,
    run_program,
    task_body,
)
from ._scoped import Scoped, check_scoped_program, generate_scoped_program
from ._threaded import (
    Hang,
    ThreadedProgram,
    all_stacks,
    check_threaded_program,
    generate_threaded_program,
    run_threads,
)

__all__ = [
    "DataSpec",
    "Hang",
    "Op",
    "Outcome",
    "Program",
    "Scoped",
    "TaskOp",
    "ThreadedProgram",
    "all_stacks",
    "check_distributed_program",
    "check_program",
    "check_scoped_program",
    "check_threaded_program",
    "generate_scoped_program",
    "generate_threaded_program",
    "run_threads",
    "cupy_array",
    "cupy_body",
    "cupy_stream",
    "emulated_body",
    "generate_program",
    "initial_arrays",
    "run_distributed_program",
    "run_oracle",
    "run_program",
    "task_body",
]
