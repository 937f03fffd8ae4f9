"""CUDA-only tests: everything under ``tests/gpu`` is marked ``gpu`` and skipped
when the CUDA backend cannot run here (no cuda-bindings, driver or device).

Fixtures
--------
``cuda``
    The process-wide CUDA backend.
``stream``
    A fresh stream of device 0, destroyed after the test.
``cuda_by_default``
    Makes ``"cuda"`` the default backend (place factories, ``data_place.allocate``)
    for one test; the suite's default is the emulated backend.
``cupy`` / ``torch``
    The modules, or a skip when they are not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.backends import cuda_unavailable_reason, make_default

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(autouse=True)
def _needs_cuda():
    reason = cuda_unavailable_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def cuda():
    from stflow.backends import get_backend

    return get_backend("cuda")


@pytest.fixture
def stream(cuda):
    s = cuda.create_stream(0)
    yield s
    cuda.synchronize(cuda.record(s))
    cuda.destroy_stream(s)


@pytest.fixture
def cuda_by_default(monkeypatch, cuda):
    make_default(monkeypatch, "cuda")
    return cuda


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch
