"""Tools to test programs written with stflow, and stflow itself.

The differential test lives here so that the same random programs run on every
backend: :func:`generate_program` draws a program from a seed, :func:`run_oracle` runs
it sequentially with NumPy, :func:`run_program` runs it through stflow and
:func:`check_program` compares the two. :func:`check_scoped_program` does the same
for scopes, :func:`check_threaded_program` for programs submitted by several host
threads at once (under a watchdog, :func:`run_threads`), and
:func:`check_distributed_program` over the ranks of an MPI communicator.

Its modules, each importing only those above it in this list (and the package):

- ``_ops``                 the operations of a program: data, tasks, bundles, waits
- ``_grids``               grid tasks, composite and replicated data
- ``_parents``             user arrays that are strided views of parent arrays
- ``_programs``            ``Program``, the task body and the sequential oracle
- ``_generation``          ``generate_program``: a program drawn from a seed
- ``_bodies``              body strategies: a task's body on each backend
- ``_budgets``             the memory budgets a program runs within
- ``_running``             ``run_program`` / ``check_program``: through stflow,
                           against the oracle
- ``_scoped``              programs with graph scopes, loops and launchable graphs
- ``_watchdog``            ``run_threads``: callables on threads of their own, under
                           a watchdog that reports a hang with every thread's stack
- ``_threaded``            ``ThreadedProgram``, submitted by several host threads,
                           and its oracle
- ``_threaded_generation`` ``generate_threaded_program``: one drawn from a seed
- ``_threaded_running``    ``check_threaded_program``: through stflow, against
                           the oracle
- ``_distributed``         programs over the ranks of an MPI communicator
"""

from ..interop.cupy import as_cupy as cupy_array
from ..interop.cupy import cupy_stream
from ._bodies import cupy_body, emulated_body
from ._distributed import check_distributed_program, run_distributed_program
from ._generation import generate_program, initial_arrays
from ._ops import DataSpec, Op, TaskOp
from ._programs import Outcome, Program, run_oracle, task_body
from ._running import check_program, run_program
from ._scoped import Scoped, check_scoped_program, generate_scoped_program
from ._threaded import ThreadedProgram
from ._threaded_generation import generate_threaded_program
from ._threaded_running import check_threaded_program
from ._watchdog import Hang, all_stacks, run_threads

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
