"""Loading the scripts of ``examples/`` as modules (they are not a package)."""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def example_path(name: str) -> pathlib.Path:
    """The script ``examples/<name>.py``."""
    return EXAMPLES / f"{name}.py"


def load_example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a fresh module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", example_path(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def example_names() -> list[str]:
    """The names of every script in ``examples/``, sorted."""
    return sorted(path.stem for path in EXAMPLES.glob("*.py"))
