"""Build stflow: the hot modules compiled with mypyc where that works.

The compiled build is the same Python sources (``stflow._compile.COMPILED_MODULES``,
the task hot path) turned into C extensions by mypyc: about twice as fast per task.
Everything else stays Python. Where the compilation cannot run (no C compiler, no
mypyc, an unusual interpreter), the package installs as pure Python and says so in
one line; behaviour is the same.

    pip install .                          # compiled where possible
    STFLOW_PURE_PYTHON=1 pip install .     # never compile

Compiling takes about a minute and says so in one line on stderr (``pip install -v``
shows it). Only the steps that build extensions compile: pip first runs setup.py
for the metadata (``egg_info``, ``dist_info``), which needs none, and mypyc's
analysis, the slow part, would otherwise run once per step.

Metadata lives in pyproject.toml; this file only adds the optional extensions.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent
PACKAGE = HERE / "src" / "stflow"


def compiled_modules() -> list[str]:
    """The source files to compile, read from stflow/_compile.py (not imported)."""
    namespace: dict = {}
    text = (PACKAGE / "_compile.py").read_text()
    start = text.index("COMPILED_MODULES = ")
    end = text.index(")", start) + 1
    exec(text[start:end], namespace)  # a literal tuple of names
    return [
        str(Path("src", "stflow", *name.split(".")).with_suffix(".py"))
        for name in namespace["COMPILED_MODULES"]
    ]


def notice(why: str) -> None:
    print(
        f"stflow: installing the pure-Python build ({why}); it behaves the same, "
        "with about twice the runtime cost per task",
        file=sys.stderr,
    )


class OptionalBuildExt(build_ext):
    """Compile the extensions if possible; otherwise keep the pure-Python modules."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, a failed compile...
            self._discard(f"no working C compiler: {type(exc).__name__}")
            return
        self._stamp()

    def _stamp(self) -> None:
        """Date every compiled module now: they are built from the sources as they are
        (an extension whose C did not change is not relinked and would keep its old
        date, and ``stflow._compile.stale`` would then prefer the sources)."""
        outputs = [Path(output) for output in self.get_outputs()]
        if self.inplace:
            outputs += [*PACKAGE.rglob("*.so"), *(HERE / "src").glob("stflow__mypyc*.so")]
        for output in outputs:
            if output.exists():
                os.utime(output)

    def _discard(self, why: str) -> None:
        """Leave no compiled module behind, partial or from an earlier build of the
        source tree (an editable install compiles in place)."""
        for output in self.get_outputs():
            Path(output).unlink(missing_ok=True)
        for pattern in ("*.so", "*.pyd"):
            for built in PACKAGE.rglob(pattern):
                built.unlink()
            for built in (HERE / "src").glob(f"stflow__mypyc*{pattern[1:]}"):
                built.unlink()
        self.extensions = []
        notice(why)


# The setup.py commands that build extension modules (pip's build_wheel and
# build_editable hooks run bdist_wheel and editable_wheel; benchmarks/gpu_session.sh
# runs build_ext --inplace).
BUILD_COMMANDS = frozenset(
    {
        "build",
        "build_ext",
        "bdist",
        "bdist_wheel",
        "bdist_egg",
        "editable_wheel",
        "install",
        "develop",
    }
)


def builds_extensions(argv: list[str]) -> bool:
    """Whether this run of setup.py builds the extensions (not only metadata)."""
    return any(arg in BUILD_COMMANDS for arg in argv[1:])


def extensions() -> list:
    if not builds_extensions(sys.argv):
        return []  # metadata only: egg_info, dist_info, sdist
    if os.environ.get("STFLOW_PURE_PYTHON", "").strip() not in ("", "0"):
        notice("STFLOW_PURE_PYTHON is set")
        return []
    if sys.implementation.name != "cpython":
        notice(f"mypyc compiles for CPython, this is {sys.implementation.name}")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        notice("mypyc is not installed")
        return []
    modules = compiled_modules()
    print(
        f"stflow: compiling {len(modules)} modules with mypyc (about a minute; "
        "STFLOW_PURE_PYTHON=1 installs the pure-Python build without compiling) ...",
        file=sys.stderr,
        flush=True,
    )
    try:
        return mypycify(
            ["--ignore-missing-imports", *modules],
            opt_level="3",
            debug_level="0",
            group_name="stflow",
        )
    except BaseException as exc:  # mypyc reports errors by exiting
        notice(f"mypyc failed: {exc}")
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
