"""Shared fixtures: the ``backend`` fixture runs a test on every backend.

``emulated`` always runs; ``cuda`` is marked ``gpu`` and skipped without a usable GPU.
The emulated scheduler's seed is printed with every failure.
"""

from __future__ import annotations

import os

# The default backend (place factories that resolve the current device, DeviceArray) is
# the emulated one unless the caller chose, so "auto" does not emit its notice in tests.
os.environ.setdefault("STFLOW_BACKEND", "emulated")

import numpy  # noqa: E402
import pytest  # noqa: E402

# Test-only shim: numba-cuda 0.30 still calls numpy.row_stack, which NumPy 2.5 removed
# (the GPU image has both). Product code never patches NumPy.
if not hasattr(numpy, "row_stack"):
    numpy.row_stack = numpy.vstack

from helpers.backends import BACKENDS, cuda_unavailable_reason, emulation_seed  # noqa: E402


def pytest_report_header(config):
    return f"stflow emulated scheduler seed: {emulation_seed()}"


@pytest.fixture(params=BACKENDS)
def backend(request):
    """The name of a backend to pass to ``stf.context(backend=...)``."""
    name = request.param
    if name == "cuda":
        reason = cuda_unavailable_reason()
        if reason:
            pytest.skip(reason)
    return name


def pytest_runtest_setup(item):
    """A ``device_memory`` test measures a GPU's free memory or times its work, which
    other processes sharing the GPU (pytest-xdist workers) change: on CUDA it runs only
    without ``-n`` (``benchmarks/gpu_session.sh tests`` runs them so afterwards)."""
    if item.get_closest_marker("device_memory") is None:
        return
    callspec = getattr(item, "callspec", None)
    on_cuda = (
        callspec.params.get("backend") == "cuda"
        if callspec
        else item.get_closest_marker("gpu") is not None
    )
    if on_cuda and int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.skip(
            "measures the GPU's free memory or times its work, which other xdist "
            "workers change: run the device_memory tests without -n"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(
            (
                "stflow",
                f"emulated scheduler seed: {emulation_seed()} "
                "(rerun with STFLOW_EMULATION_SEED)",
            )
        )
