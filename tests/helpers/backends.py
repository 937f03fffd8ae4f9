"""Which backends the suite runs on."""

from __future__ import annotations

import functools

import pytest

BACKENDS = ["emulated", pytest.param("cuda", marks=pytest.mark.gpu)]


@functools.cache
def cuda_unavailable_reason() -> str | None:
    """``None`` when the CUDA backend can run here, else why not."""
    from stflow.backends import get_backend
    from stflow.errors import BackendUnavailableError

    try:
        get_backend("cuda")
    except BackendUnavailableError as exc:
        return f"CUDA backend unavailable: {exc}"
    return None


def emulation_seed() -> int:
    from stflow._core.config import config

    return config().emulation_seed


def make_default(monkeypatch, name: str) -> None:
    """Make backend ``name`` the default one (``STFLOW_BACKEND``) for one test: the
    backend of ``DeviceArray`` and ``data_place.allocate``, which have no context."""
    import dataclasses

    import stflow._core.config as configuration

    monkeypatch.setattr(
        configuration,
        "_config",
        dataclasses.replace(configuration.config(), backend=name),
    )


def device_bytes_in_use(name: str) -> int:
    """Device memory the process holds on the backend's devices: the emulated
    backend's live device buffers; on CUDA, total minus free after the memory pools
    gave back what they keep."""
    from stflow.backends import get_backend

    backend = get_backend(name)
    if name == "emulated":
        memory = backend._memory
        return sum(
            end - start for start, (end, device) in memory._ranges.items() if device >= 0
        )
    backend.trim_pools()
    from cuda.bindings import driver

    used = 0
    for device in range(backend.device_count):
        backend._push(device)
        try:
            _, free, total = driver.cuMemGetInfo()
        finally:
            backend._pop(device)
        used += int(total) - int(free)
    return used


def one_context_round(name: str, elements: int) -> None:
    """One context that moves data to device 0, reduces and evicts (its budget holds
    two of its vectors of ``elements`` float64), then finalizes."""
    import numpy as np

    import stflow as stf

    from .bodies import add_to

    with stf.context(backend=name, memory_budget=16 * elements) as ctx:
        x = ctx.logical_data(np.zeros(elements))
        with ctx.task(stf.exec_place.device(0), x.rw()) as t:
            add_to(t, 0, None, 1.0)
        y = ctx.logical_data_full((elements,), 2.0, where=stf.data_place.device(0))
        with ctx.task(stf.exec_place.device(0), y.reduce()) as t:  # evicts x
            add_to(t, 0, None, 1.0)
        ctx.wait(y)
