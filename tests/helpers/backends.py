"""Which backends the suite runs on."""

from __future__ import annotations

import functools

import pytest

BACKENDS = ["emulated", pytest.param("cuda", marks=pytest.mark.gpu)]


@functools.lru_cache(maxsize=None)
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
    from stflow._config import config
    return config().emulation_seed


def make_default(monkeypatch, name: str) -> None:
    """Make backend ``name`` the default one (``STFLOW_BACKEND``) for one test: the
    backend of ``DeviceArray`` and ``data_place.allocate``, which have no context."""
    import dataclasses

    import stflow._config as configuration
    monkeypatch.setattr(configuration, "_config",
                        dataclasses.replace(configuration.config(), backend=name))
