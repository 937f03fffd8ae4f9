"""Shared fixtures: the ``backend`` fixture runs a test on every backend.

``emulated`` always runs; ``cuda`` is marked ``gpu`` and skipped without a usable GPU.
The emulated scheduler's seed is printed with every failure.
"""

from __future__ import annotations

import os

# Place factories validate device ordinals against the default backend; make that the
# emulated one unless the caller chose, so "auto" does not emit its notice in tests.
os.environ.setdefault("STFLOW_BACKEND", "emulated")

import pytest  # noqa: E402

from helpers.backends import (BACKENDS, cuda_unavailable_reason,  # noqa: E402
                              emulation_seed)


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("stflow", f"emulated scheduler seed: {emulation_seed()} "
                                          "(rerun with STFLOW_EMULATION_SEED)"))
