"""Distributed tests: everything under ``tests/mpi`` is marked ``mpi`` (deselected by
default) and needs ``mpi4py``. Run them on several ranks, every rank the same tests:

    mpiexec -n 2 python -m pytest -q -m mpi tests/mpi

(as root add ``--oversubscribe`` and set ``OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``; ``.ci/run`` does). Run without ``mpiexec`` they
use a communicator of one rank.

The differential tests and the tests of the layer's exchanges run on the backend
``STFLOW_DISTRIBUTED_BACKEND`` names (``emulated`` by default; ``cuda`` on a GPU
machine: ``benchmarks/gpu_session.sh distributed``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def _rank_from_launcher() -> str | None:
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK"):
        if name in os.environ:
            return os.environ[name]
    return None


# Every rank runs its own pytest, and pytest keeps its temporary directories under one
# root per user, pruning the old ones when a session ends: ranks sharing that root
# race (one rank scans the directories another is deleting, and the session fails at
# exit). Each rank gets its own root, read by pytest when a test first asks for
# tmp_path.
_RANK = _rank_from_launcher()
if _RANK is not None and "PYTEST_DEBUG_TEMPROOT" not in os.environ:
    _root = Path(tempfile.gettempdir()) / f"stflow-mpi-rank{_RANK}"
    _root.mkdir(exist_ok=True)
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(_root)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.mpi)


@pytest.fixture
def comm():
    mpi = pytest.importorskip("mpi4py.MPI")
    return mpi.COMM_WORLD


@pytest.fixture
def backend():
    """The local contexts' backend of the tests that take it."""
    return os.environ.get("STFLOW_DISTRIBUTED_BACKEND", "emulated")
