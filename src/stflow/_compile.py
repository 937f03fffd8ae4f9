"""The compiled build of the hot modules (mypyc): which modules, and the way back.

``setup.py`` compiles :data:`COMPILED_MODULES` with mypyc where it can (see
``docs/architecture.md``, "The compiled build"): the same sources, as C extensions.
Compiled classes cannot be subclassed by Python classes unless marked
``@mypyc_attr(allow_interpreted_subclasses=True)``; outside the compiler the marker
does nothing.

With ``STFLOW_PURE_PYTHON=1`` in the environment when ``stflow`` is imported,
:func:`use_sources` makes Python import the ``.py`` sources of those modules even
where compiled ones are installed (to debug, profile, or test both builds). It does so
too when a source is newer than its compiled module (:func:`stale`: edited in an
editable install since it was compiled), so an edit is never silently ignored.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

__all__ = ["COMPILED_MODULES", "compiled", "mypyc_attr", "use_sources"]

COMPILED_MODULES = (
    "backends._stream_types",
    "_core.access",
    "_core.deps",
    "_core.coherence",
    "_core.streams",
    "_core.plan",
    "_engine.runtime",
    "_engine.copies",
    "_handles.task",
    "_handles.callbacks",
    "_instruments.seam",
    "_engine.registry",
    "_engine.mode",
    "_graph.mode",
    "_graph.scope",
    "_graph.scopes",
    "_graph.recorded",
    "_graph.recording",
    "_dist.context",
    "_dist.handles",
    "_dist.exchanges",
)
"""The modules of ``stflow`` that the compiled build compiles (the hot path)."""

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    try:
        from mypy_extensions import mypyc_attr
    except ImportError:  # mypy_extensions only matters when compiling

        def mypyc_attr(*attrs: Any, **kwattrs: Any) -> Callable[[Any], Any]:
            return lambda cls: cls


def source(directory: Path, name: str) -> Path:
    """The source file of compiled module ``name`` (``"_core.plan"``) under the
    package ``directory``."""
    return directory.joinpath(*name.split(".")).with_suffix(".py")


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` source of a compiled module before the extension."""

    def __init__(self, package: str, directory: Path) -> None:
        self.names = {
            f"{package}.{name}": source(directory, name) for name in COMPILED_MODULES
        }

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.names.get(fullname)
        if source is None or not source.exists():
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def use_sources() -> None:
    """Import the Python sources of the compiled modules from now on."""
    if not any(isinstance(finder, _Sources) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Sources(__package__ or "stflow", Path(__file__).parent))


def stale(directory: Path | None = None) -> bool:
    """True when a compiled module is older than its source (by more than 2 s, so a
    source and an extension installed together never count).

    A module's build time is the newer of its extension and of the library mypyc
    puts the code of all of them in (``stflow__mypyc.*.so`` beside the package): a
    rebuild rewrites the library but leaves an unchanged module's extension alone.
    ``directory``: the package's (default: this one's)."""
    directory = directory or Path(__file__).parent
    library = max(
        (
            path.stat().st_mtime
            for path in directory.parent.glob(f"{directory.name}__mypyc.*.so")
        ),
        default=0.0,
    )
    for name in COMPILED_MODULES:
        python = source(directory, name)
        for built in python.parent.glob(f"{python.stem}.*.so"):
            try:
                if python.stat().st_mtime > max(built.stat().st_mtime, library) + 2.0:
                    return True
            except OSError:
                continue
    return False


def compiled() -> bool:
    """True when the hot modules in use are the compiled ones."""
    spec = importlib.util.find_spec(f"{__package__ or 'stflow'}.{COMPILED_MODULES[0]}")
    return spec is not None and not (spec.origin or "").endswith(".py")
