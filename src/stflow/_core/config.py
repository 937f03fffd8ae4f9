"""Configuration read from the environment, in one place.

:data:`SETTINGS` is the one table of every environment variable stflow reads: its
name, type, default, when it is read and what it means, with the parser that turns
its text into a value. The other modules call the accessors below, never
``os.environ``; ``docs/configuration.md`` shows the table (:func:`render_table`
renders it, :func:`write_docs` refreshes the page, a unit test checks it is current).

Settings are only defaults: every knob also has an explicit argument
(``context(backend=...)``). When each is read:

- *at import*: once, when ``stflow`` is imported (``STFLOW_PURE_PYTHON``);
- *first use*: once, into :class:`Config`, when a context or backend first asks
  (:func:`config`); tests call :func:`reload` after changing ``os.environ``;
- *each use*: again at every use (a context's creation, an MPI exchange), so a test's
  ``monkeypatch.setenv`` takes effect at once.

Variables of other programs (``OMPI_*``, ``NUMBA_*``, ``CUDA_HOME``...) are read by
the modules that use them; :data:`OTHER_VARIABLES` lists those.
"""

from __future__ import annotations

import operator
import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

__all__ = [
    "Config",
    "LARGEST_SIZE",
    "OTHER_VARIABLES",
    "SETTINGS",
    "Setting",
    "config",
    "device_memory_budget",
    "distributed_check",
    "mpi_cuda_aware",
    "mpi_piece",
    "mpi_send_ahead",
    "mpi_send_buffers",
    "mpi_send_limit",
    "parse_size",
    "pin_limit",
    "pure_python_requested",
    "reload",
    "render_table",
    "set_environment",
    "setting_text",
    "write_docs",
]

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

PIN_LIMIT_DEFAULT: int | None = None
"""``STFLOW_PIN_LIMIT`` unset: every user host array is page-locked (a size: larger
arrays are not, their copies are staged by host threads)."""
MPI_PIECE_DEFAULT = 4 << 20
"""``STFLOW_MPI_PIECE`` unset: the largest message a value is sent in (bytes)."""
MPI_SEND_LIMIT_DEFAULT = 512 << 20
"""``STFLOW_MPI_SEND_LIMIT`` unset: bytes of sent values kept staged."""
MPI_SEND_BUFFERS_DEFAULT = 1
"""``STFLOW_MPI_SEND_BUFFERS`` unset (``_staging.BUFFERS_PER_SIZE`` says why one)."""
DOT_MAX_NODES_DEFAULT = 500
GRAPH_CACHE_ENTRIES_DEFAULT = 64
"""``STFLOW_GRAPH_CACHE_ENTRIES`` unset: executables of distinct topologies kept."""
EMULATED_DEVICES_DEFAULT = 2


# -- parsers: the text of a variable (None: unset) to its value ------------------------
def _backend(text: str | None) -> str:
    backend = (text if text is not None else "auto").strip().lower() or "auto"
    if backend not in _BACKENDS:
        raise ValueError(
            f"STFLOW_BACKEND={backend!r} is not one of {', '.join(_BACKENDS)}"
        )
    return backend


def _emulated_devices(text: str | None) -> int:
    if text is None or text.strip() == "":
        return EMULATED_DEVICES_DEFAULT
    stripped = text.strip()
    count = int(stripped) if stripped.isdigit() else 0  # no signs, no "1_0"
    if count <= 0:
        raise ValueError(
            f"STFLOW_EMULATED_DEVICES={text!r} is not a positive integer; "
            "set it to the number of virtual devices, e.g. 2"
        )
    return count


def _seed(text: str | None) -> int | None:
    """The seed, or None for one drawn per process."""
    if text is None or not text.strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"STFLOW_EMULATION_SEED={text!r} is not an integer") from None


def _dot_max_nodes(text: str | None) -> int:
    if text is None or text.strip() == "":
        return DOT_MAX_NODES_DEFAULT
    stripped = text.strip()
    if not stripped.isdigit():
        raise ValueError(
            f"STFLOW_DOT_MAX_NODES={text!r} is not an integer >= 0; set it to "
            "the largest number of nodes a DOT graph draws in full (0: no limit)"
        )
    return int(stripped)


def _graph_cache_entries(text: str | None) -> int:
    if text is None or text.strip() == "":
        return GRAPH_CACHE_ENTRIES_DEFAULT
    stripped = text.strip()
    if not stripped.isdigit():
        raise ValueError(
            f"STFLOW_GRAPH_CACHE_ENTRIES={text!r} is not an integer >= 0; set it to "
            "the number of executable graphs of distinct topologies a graph-mode "
            "context keeps for reuse (0: keep none)"
        )
    return int(stripped)


def _path(text: str | None) -> str | None:
    return text or None


def _lowered(default: str) -> Callable[[str | None], str]:
    def parse(text: str | None) -> str:
        return (text if text is not None else default).strip().lower() or default

    return parse


def _choice(
    name: str, choices: tuple[str, ...], default: str
) -> Callable[[str | None], str]:
    """One of ``choices`` (case-insensitive); empty or unset: ``default``."""

    def parse(text: str | None) -> str:
        value = (text or "").strip().lower() or default
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


def _as_written(text: str | None) -> str:
    """Validated where it is used (``_progress.progress_from_environment``)."""
    return text if text is not None else ""


def _flag(text: str | None) -> bool:
    return (text or "").strip() not in ("", "0")


# -- sizes: of a setting, and of the memory_budget argument (``_engine.memory``) ------------
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]*)\s*$")


LARGEST_SIZE = (1 << 63) - 1
"""The largest size a budget may be: beyond it no device can address a byte."""


def parse_size(value: Any, what: str) -> int:
    """A number of bytes from an integer (``int``, ``numpy.int64``, anything
    ``operator.index`` takes) or a text such as ``"512MiB"``.

    Raises
    ------
    TypeError
        ``value`` is neither an integer nor a str.
    ValueError
        The text is not a size, or the size is negative or more than
        :data:`LARGEST_SIZE` bytes.
    """
    if isinstance(value, str):
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"{what}={value!r} is not a size: write bytes, or a number "
                "with a unit (K, M, G, T, KiB, MiB, GiB, TiB)"
            )
        exact = Decimal(match.group(1)) * _UNITS[unit]  # exact: no float rounding
        if exact > LARGEST_SIZE:
            raise ValueError(
                f"{what}={_shown(value)} is more bytes than any device "
                f"has: a budget is at most {LARGEST_SIZE} bytes (2**63 - "
                f"1); give a smaller size, or none for the device's memory"
            )
        size = int(exact)
    elif isinstance(value, (bool, np.bool_)) or not hasattr(type(value), "__index__"):
        raise TypeError(
            f"{what} must be a number of bytes (an integer, or a str such "
            f"as '512MiB'), got {type(value).__name__}"
        )
    else:
        size = operator.index(value)
    if size < 0:
        raise ValueError(f"{what} must be >= 0 bytes, got {size}")
    if size > LARGEST_SIZE:
        raise ValueError(
            f"{what}={_shown(size)} is more bytes than any device has: a "
            f"budget is at most {LARGEST_SIZE} bytes (2**63 - 1); give a "
            "smaller size, or none for the device's memory"
        )
    return size


def _shown(value: Any) -> str:
    """``value`` for a message, cut short when it is very long."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} chars)"


def _size(name: str) -> Callable[[str | None], int | None]:
    """A size (:func:`parse_size`: bytes, or ``512MiB``); empty or unset: None."""

    def parse(text: str | None) -> int | None:
        text = (text or "").strip()
        if not text:
            return None
        return parse_size(text, name)

    return parse


def _positive(
    name: str, default: int, unit: str = "bytes"
) -> Callable[[str | None], int]:
    """A positive integer (of ``unit``); empty or unset: ``default``."""

    def parse(text: str | None) -> int:
        if not text:
            return default
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise ValueError(f"{name} must be a positive number of {unit}, got {text!r}")
        return value

    return parse


def _switch(
    name: str, on: str, off: str = "", unset: str | None = "0"
) -> Callable[[str | None], bool | None]:
    """``1`` or ``0``; unset: what ``unset`` says (None: neither, the caller decides;
    then an empty text counts as unset too)."""

    def parse(text: str | None) -> bool | None:
        if text is None or (unset is None and not text):
            text = unset
        if text is None:
            return None
        if text not in ("0", "1"):
            detail = f" ({off})" if off else ""
            raise ValueError(f"{name} must be 1 ({on}) or 0{detail}, got {text!r}")
        return text == "1"

    return parse


# -- the table ------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    """One environment variable stflow reads."""

    name: str
    type: str
    """What it takes, in words."""
    default: str
    """What applies when it is unset, in words."""
    read: str
    """When it is read: ``"at import"``, ``"first use"`` or ``"each use"``."""
    meaning: str
    """One line."""
    parse: Callable[[str | None], Any]
    """Its text (None: unset) to its value; raises ValueError naming the fix."""

    def value(self) -> Any:
        """The value the environment gives now."""
        return self.parse(os.environ.get(self.name))


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "STFLOW_BACKEND",
        "`auto`, `cuda`, `emulated` or `null`",
        "`auto`",
        "first use",
        "The default backend of every context (`auto`: CUDA when "
        "usable, else the emulated backend, with a notice).",
        _backend,
    ),
    Setting(
        "STFLOW_EMULATED_DEVICES",
        "positive integer",
        "`2`",
        "first use",
        "The number of virtual devices of the emulated and null backends.",
        _emulated_devices,
    ),
    Setting(
        "STFLOW_EMULATION_SEED",
        "integer",
        "drawn once per process",
        "first use",
        "The seed of the emulated backend's randomised scheduler (replays a run).",
        _seed,
    ),
    Setting(
        "STFLOW_DEVICE_MEMORY_BUDGET",
        "size (`1073741824`, `512MiB`, `2GB`)",
        "what each device has",
        "each use",
        "The memory budget of every device of a context made without `memory_budget=`.",
        _size("STFLOW_DEVICE_MEMORY_BUDGET"),
    ),
    Setting(
        "STFLOW_DOT_FILE",
        "path",
        "none",
        "first use",
        "Every context writes its task graph there (Graphviz DOT) when it ends.",
        _path,
    ),
    Setting(
        "CUDASTF_DOT_FILE",
        "path",
        "none",
        "first use",
        "The reference's name of `STFLOW_DOT_FILE`, honoured when that is unset.",
        _path,
    ),
    Setting(
        "STFLOW_DOT_MAX_NODES",
        "integer >= 0",
        "`500`",
        "first use",
        "Larger DOT graphs are drawn as a summary, one node per symbol (`0`: no limit).",
        _dot_max_nodes,
    ),
    Setting(
        "STFLOW_GRAPH_CACHE_ENTRIES",
        "integer >= 0",
        "`64`",
        "each use",
        "Executable graphs of distinct topologies kept for reuse, the least recently "
        "used destroyed first (`0`: none kept).",
        _graph_cache_entries,
    ),
    Setting(
        "STFLOW_TRACE_FILE",
        "path",
        "none",
        "first use",
        "Every context writes its timeline there (Chrome trace JSON) when it ends.",
        _path,
    ),
    Setting(
        "STFLOW_NVTX",
        "`auto`, `1` or `0`",
        "`auto`",
        "first use",
        "NVTX ranges on CUDA: `auto` when `nvtx` imports, `1` required, `0` off.",
        _lowered("auto"),
    ),
    Setting(
        "STFLOW_PROGRESS",
        "`0`, `1`, `auto`, `tqdm`, `rich` or `text`",
        "`0`",
        "first use",
        "Attach a progress bar to every context (`1`: the default "
        "style); checked when a context is created.",
        _as_written,
    ),
    Setting(
        "STFLOW_PURE_PYTHON",
        "`1` or `0`",
        "`0`",
        "at import",
        "Run the Python sources of the compiled modules (`_compile.py`).",
        _flag,
    ),
    Setting(
        "STFLOW_DISTRIBUTED_CHECK",
        "`1` or `0`",
        "`0`",
        "each use",
        "Compare every collective call across the ranks, not only the "
        "synchronisation points (read by each distributed context).",
        _switch(
            "STFLOW_DISTRIBUTED_CHECK", "compare every collective call across the ranks"
        ),
    ),
    Setting(
        "STFLOW_PIN_LIMIT",
        "size (`1073741824`, `1GiB`)",
        "unset: no limit",
        "each use",
        "User host arrays larger than this are not page-locked (CUDA): their copies "
        "to and from devices go through pinned staging buffers that host threads "
        "fill and drain, so the first transfers start at once instead of after the "
        "whole array is locked (a loop body that copies such an array page-locks "
        "it: a conditional graph node cannot hold host work).",
        _size("STFLOW_PIN_LIMIT"),
    ),
    Setting(
        "STFLOW_MPI_PIECE",
        "positive integer (bytes)",
        "`4194304` (4 MiB)",
        "each use",
        "The largest message a value is sent in; larger values travel in pieces.",
        _positive("STFLOW_MPI_PIECE", MPI_PIECE_DEFAULT),
    ),
    Setting(
        "STFLOW_MPI_SEND_LIMIT",
        "positive integer (bytes)",
        "`536870912` (512 MiB)",
        "each use",
        "Bytes of sent values a rank keeps staged until their messages are received.",
        _positive("STFLOW_MPI_SEND_LIMIT", MPI_SEND_LIMIT_DEFAULT),
    ),
    Setting(
        "STFLOW_MPI_SEND_BUFFERS",
        "positive integer",
        "`1`",
        "each use",
        "Messages of one size a sender keeps in flight before it waits for the oldest.",
        _positive(
            "STFLOW_MPI_SEND_BUFFERS",
            MPI_SEND_BUFFERS_DEFAULT,
            "buffers per message size",
        ),
    ),
    Setting(
        "STFLOW_MPI_CUDA_AWARE",
        "`1` or `0`",
        "MPI is asked (GPU memory only)",
        "each use",
        "`1`: device buffers go straight to MPI; `0`: stage through host memory.",
        _switch(
            "STFLOW_MPI_CUDA_AWARE",
            "MPI moves device memory",
            "stage through host memory",
            unset=None,
        ),
    ),
    Setting(
        "STFLOW_MPI_SEND_AHEAD",
        "`1` or `0`",
        "`0`",
        "each use",
        "`1`: post a send once its copy completed, the rank going on meanwhile; "
        "`0`: wait for the copy where it is sent.",
        _switch(
            "STFLOW_MPI_SEND_AHEAD",
            "post sends once their copies completed",
            "wait for them where they are sent",
        ),
    ),
)
"""Every environment variable stflow reads (``CUDASTF_*`` ones of the reference that
it does not read only raise a warning: ``_IGNORED_REFERENCE_VARIABLES``)."""

_BY_NAME: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}

OTHER_VARIABLES: tuple[tuple[str, str], ...] = (
    ("CUDA_HOME, CUDA_PATH", "`stflow.paths`: where the CUDA toolkit is"),
    (
        "OPENBLAS_NUM_THREADS, MKL_NUM_THREADS, OMP_NUM_THREADS",
        "`stflow.demo`: reported with the BLAS library NumPy calls",
    ),
    (
        "OMPI_*, CUDA_VISIBLE_DEVICES, NUMBA_*",
        "read by MPI, CUDA and Numba themselves, not by stflow",
    ),
)
"""Variables of other programs that stflow modules read or mention (not ours)."""


def _setting(name: str) -> Setting:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(
            f"{name!r} is not a setting of stflow; add it to "
            "_config.SETTINGS (one of: " + ", ".join(_BY_NAME) + ")"
        ) from None


# -- accessors --------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """The settings read on first use (see :data:`SETTINGS`)."""

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
        return int(_setting("STFLOW_DOT_MAX_NODES").parse(self.dot_max_nodes_text))

    @property
    def emulated_devices(self) -> int:
        """Number of virtual devices of the emulated backend (default 2).

        Raises
        ------
        ValueError
            When ``STFLOW_EMULATED_DEVICES`` is not a positive integer.
        """
        return int(_setting("STFLOW_EMULATED_DEVICES").parse(self.emulated_devices_text))


_config: Config | None = None
_warned_reference_variables = False


def _read() -> Config:
    backend = _setting("STFLOW_BACKEND").value()
    seed = _setting("STFLOW_EMULATION_SEED").value()
    from_env = seed is not None
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    dot = _setting("STFLOW_DOT_FILE").value() or _setting("CUDASTF_DOT_FILE").value()
    return Config(
        backend=backend,
        emulated_devices_text=setting_text("STFLOW_EMULATED_DEVICES"),
        emulation_seed=seed,
        emulation_seed_from_environment=from_env,
        dot_file=dot,
        trace_file=_setting("STFLOW_TRACE_FILE").value(),
        nvtx=_setting("STFLOW_NVTX").value(),
        progress=_setting("STFLOW_PROGRESS").value(),
        dot_max_nodes_text=setting_text("STFLOW_DOT_MAX_NODES"),
    )


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


def setting_text(name: str) -> str | None:
    """Setting ``name`` as written in the environment (None: unset)."""
    return os.environ.get(_setting(name).name)


def set_environment(values: Mapping[str, str]) -> Config:
    """Write settings into the environment (child processes inherit them) and read
    the configuration again."""
    for name in values:
        _setting(name)
    os.environ.update(values)
    return reload()


def pure_python_requested() -> bool:
    """``STFLOW_PURE_PYTHON`` (read when ``stflow`` is imported): run the Python
    sources of the modules a compiled build compiled (``_compile.py``)."""
    return bool(_setting("STFLOW_PURE_PYTHON").value())


def device_memory_budget() -> int | None:
    """``STFLOW_DEVICE_MEMORY_BUDGET`` in bytes, or None when unset (read at every
    context's creation)."""
    value: int | None = _setting("STFLOW_DEVICE_MEMORY_BUDGET").value()
    return value


def distributed_check() -> bool:
    """``STFLOW_DISTRIBUTED_CHECK``: compare every collective call across the ranks."""
    return bool(_setting("STFLOW_DISTRIBUTED_CHECK").value())


def graph_cache_entries() -> int:
    """``STFLOW_GRAPH_CACHE_ENTRIES``: executable graphs a graph-mode context keeps."""
    return int(_setting("STFLOW_GRAPH_CACHE_ENTRIES").value())


def pin_limit() -> int | None:
    """``STFLOW_PIN_LIMIT``: the largest user host array page-locked (bytes; ``None``:
    no limit); larger ones are staged."""
    value: int | None = _setting("STFLOW_PIN_LIMIT").value()
    return PIN_LIMIT_DEFAULT if value is None else value


def mpi_piece() -> int:
    """``STFLOW_MPI_PIECE``: the largest message a value is sent in (bytes)."""
    return int(_setting("STFLOW_MPI_PIECE").value())


def mpi_send_limit() -> int:
    """``STFLOW_MPI_SEND_LIMIT``: bytes of sent values kept staged."""
    return int(_setting("STFLOW_MPI_SEND_LIMIT").value())


def mpi_send_buffers() -> int:
    """``STFLOW_MPI_SEND_BUFFERS``: messages of one size in flight per sender."""
    return int(_setting("STFLOW_MPI_SEND_BUFFERS").value())


def mpi_cuda_aware() -> bool | None:
    """``STFLOW_MPI_CUDA_AWARE``: True or False when set, None when unset."""
    value: bool | None = _setting("STFLOW_MPI_CUDA_AWARE").value()
    return value


def mpi_send_ahead() -> bool:
    """``STFLOW_MPI_SEND_AHEAD``: post sends once their copies completed."""
    return bool(_setting("STFLOW_MPI_SEND_AHEAD").value())


def warn_ignored_reference_variables() -> None:
    """Warn once if variables of the reference's native core are set."""
    global _warned_reference_variables
    if _warned_reference_variables:
        return
    _warned_reference_variables = True
    present = [name for name in _IGNORED_REFERENCE_VARIABLES if name in os.environ]
    if present:
        from .errors import warn_user

        warn_user(
            "stflow does not read these variables of the reference runtime: "
            + ", ".join(present),
            UserWarning,
        )


# -- the table in the docs ----------------------------------------------------------------
BEGIN_MARK = (
    "<!-- BEGIN settings table, generated from stflow._core.config.SETTINGS: "
    "python -c 'import stflow._core.config as c; "
    'c.write_docs("docs/configuration.md")\' -->'
)
END_MARK = "<!-- END settings table -->"


def render_table() -> str:
    """The settings as Markdown (the generated part of ``docs/configuration.md``)."""
    lines = [
        "| Variable | Takes | Unset | Read | Meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{s.name}` | {s.type} | {s.default} | {s.read} | {s.meaning} |"
        for s in SETTINGS
    ]
    lines += [
        "",
        "Not read (a `UserWarning` lists those that are set): "
        + ", ".join(f"`{name}`" for name in _IGNORED_REFERENCE_VARIABLES)
        + ".",
        "",
        "Not ours (variables of other programs):",
        "",
    ]
    lines += [f"- {names}: {where}" for names, where in OTHER_VARIABLES]
    return "\n".join(lines) + "\n"


def rendered_section(page: str) -> str | None:
    """The generated part of ``page`` (the text between the marks), or None."""
    start, end = page.find(BEGIN_MARK), page.find(END_MARK)
    if start < 0 or end < start:
        return None
    return page[start + len(BEGIN_MARK) : end].strip("\n") + "\n"


def write_docs(path: str) -> None:
    """Write :func:`render_table` between the marks of the page at ``path``."""
    with open(path, encoding="utf-8") as file:
        page = file.read()
    if rendered_section(page) is None:
        raise ValueError(
            f"{path} has no {BEGIN_MARK!r} ... {END_MARK!r} section; add "
            "the two marks where the table goes"
        )
    start, end = page.index(BEGIN_MARK) + len(BEGIN_MARK), page.index(END_MARK)
    with open(path, "w", encoding="utf-8") as file:
        file.write(page[:start] + "\n" + render_table() + page[end:])
