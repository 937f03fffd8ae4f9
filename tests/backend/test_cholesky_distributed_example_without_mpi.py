"""examples/cholesky_distributed.py on a machine without mpi4py: one line naming the
extra to install, exit status 2 (as ``python -m stflow.demo --distributed``), not a
traceback. mpi4py is made missing in a subprocess of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.examples import example_path

# The interpreter's prologue: mpi4py missing, as where it was never installed (a
# finder that says so, ahead of the others) or as an import blocked in sys.modules.
_MISSING = {
    "not installed": (
        "import sys\n"
        "class _NoMPI:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mpi4py' or name.startswith('mpi4py.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoMPI())\n"
    ),
    "blocked": "import sys\nsys.modules['mpi4py'] = None\n",
}


@pytest.mark.parametrize("how", sorted(_MISSING))
def test_without_mpi4py_the_script_names_the_extra_and_exits_with_2(how):
    script = str(example_path("cholesky_distributed"))
    program = (
        _MISSING[how] + "import runpy\n"
        f"sys.argv = [{script!r}, '--n', '64', '--nb', '32']\n"
        f"runpy.run_path({script!r}, run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        "error: examples/cholesky_distributed.py needs mpi4py and an MPI (pip install "
        "'stflow[mpi]'), then: mpiexec -n 4 python examples/cholesky_distributed.py\n"
    )
