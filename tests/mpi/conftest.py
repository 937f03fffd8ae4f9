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
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


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
