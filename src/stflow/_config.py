"""Configuration read from the environment, in one place.

Environment variables are read once, on first use, and are only defaults: every knob
also has an explicit argument (``context(backend=...)``). Tests may call
:func:`reload` after changing ``os.environ``.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

__all__ = ["Config", "config", "pure_python_requested", "reload"]

_BACKENDS = ("auto", "cuda", "emulated", "null")

# Variables of the reference's native core that stflow does not read.
_IGNORED_REFERENCE_VARIABLES = (
    "CUDASTF_ALLOCATOR",
    "CUDASTF_CACHE_SIZE",
    "CUDASTF_GRAPH_CACHE_SIZE",
    "CUDASTF_SCHEDULE",
    "CUDASTF_TASK_STATISTICS",
    "CUDASTF_DISPLAY_STATS",
    "CUDASTF_NCCL",
)


@dataclass(frozen=True)
class Config:
    """Defaults taken from the environment."""

    backend: str
    """``STFLOW_BACKEND``: ``"auto"``, ``"cuda"``, ``"emulated"`` or ``"null"``."""
    emulated_devices_text: str | None
    """``STFLOW_EMULATED_DEVICES`` as written; validated by :attr:`emulated_devices`."""
    emulation_seed: int
    """``STFLOW_EMULATION_SEED``, or a seed drawn once per process."""
    emulation_seed_from_environment: bool
    dot_file: str | None
    """``STFLOW_DOT_FILE`` (``CUDASTF_DOT_FILE`` when unset)."""
    trace_file: str | None
    """``STFLOW_TRACE_FILE``."""
    progress: str = ""
    """``STFLOW_PROGRESS``: ``1`` attaches a :class:`~stflow.ProgressBar` to every
    context (``tqdm``, ``rich`` or ``text`` picks its style; empty or ``0``: none)."""
    nvtx: str = "auto"
    """``STFLOW_NVTX``: ``"auto"`` (ranges on CUDA when ``nvtx`` imports), ``"1"``
    (required), ``"0"`` (off)."""
    dot_max_nodes_text: str | None = None
    """``STFLOW_DOT_MAX_NODES`` as written; validated by :attr:`dot_max_nodes`."""

    @property
    def dot_max_nodes(self) -> int:
        """The largest task graph a ``DotRecorder`` draws in full (default 500);
        larger ones are summarised; ``0``: no limit.

        Raises
        ------
        ValueError
            When ``STFLOW_DOT_MAX_NODES`` is not an integer >= 0.
        """
        text = self.dot_max_nodes_text
        if text is None or text.strip() == "":
            return 500
        stripped = text.strip()
        if not stripped.isdigit():
            raise ValueError(
                f"STFLOW_DOT_MAX_NODES={text!r} is not an integer >= 0; set it to "
                "the largest number of nodes a DOT graph draws in full (0: no limit)"
            )
        return int(stripped)

    @property
    def emulated_devices(self) -> int:
        """Number of virtual devices of the emulated backend (default 2).

        Raises
        ------
        ValueError
            When ``STFLOW_EMULATED_DEVICES`` is not a positive integer.
        """
        text = self.emulated_devices_text
        if text is None or text.strip() == "":
            return 2
        stripped = text.strip()
        count = int(stripped) if stripped.isdigit() else 0   # no signs, no "1_0"
        if count <= 0:
            raise ValueError(
                f"STFLOW_EMULATED_DEVICES={text!r} is not a positive integer; "
                "set it to the number of virtual devices, e.g. 2"
            )
        return count


_config: Config | None = None
_warned_reference_variables = False


def _read() -> Config:
    backend = os.environ.get("STFLOW_BACKEND", "auto").strip().lower() or "auto"
    if backend not in _BACKENDS:
        raise ValueError(
            f"STFLOW_BACKEND={backend!r} is not one of {', '.join(_BACKENDS)}"
        )
    seed_text = os.environ.get("STFLOW_EMULATION_SEED")
    if seed_text is not None and seed_text.strip():
        try:
            seed = int(seed_text)
        except ValueError:
            raise ValueError(
                f"STFLOW_EMULATION_SEED={seed_text!r} is not an integer"
            ) from None
        from_env = True
    else:
        seed = random.SystemRandom().randrange(1 << 31)
        from_env = False
    dot = os.environ.get("STFLOW_DOT_FILE") or os.environ.get("CUDASTF_DOT_FILE") or None
    return Config(
        backend=backend,
        emulated_devices_text=os.environ.get("STFLOW_EMULATED_DEVICES"),
        emulation_seed=seed,
        emulation_seed_from_environment=from_env,
        dot_file=dot,
        trace_file=os.environ.get("STFLOW_TRACE_FILE") or None,
        nvtx=os.environ.get("STFLOW_NVTX", "auto").strip().lower() or "auto",
        progress=os.environ.get("STFLOW_PROGRESS", ""),
        dot_max_nodes_text=os.environ.get("STFLOW_DOT_MAX_NODES"),
    )


def pure_python_requested() -> bool:
    """``STFLOW_PURE_PYTHON`` (read when ``stflow`` is imported): run the Python
    sources of the modules a compiled build compiled (``_compile.py``)."""
    return os.environ.get("STFLOW_PURE_PYTHON", "").strip() not in ("", "0")


def config() -> Config:
    """Return the process configuration, reading the environment on first use."""
    global _config
    if _config is None:
        _config = _read()
    return _config


def reload() -> Config:
    """Read the environment again (for tests)."""
    global _config
    _config = _read()
    return _config


def warn_ignored_reference_variables() -> None:
    """Warn once if variables of the reference's native core are set."""
    global _warned_reference_variables
    if _warned_reference_variables:
        return
    _warned_reference_variables = True
    present = [name for name in _IGNORED_REFERENCE_VARIABLES if name in os.environ]
    if present:
        from ._errors import warn_user
        warn_user("stflow does not read these variables of the reference runtime: "
                  + ", ".join(present), UserWarning)
