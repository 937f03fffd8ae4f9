"""Include and library paths, kept for build scripts written for the reference.

The reference's ``cuda.stf._experimental.paths`` locates the headers and the shared
library of the native CUDASTF C API so that C/CUDA projects can build against it.
stflow is pure Python and ships neither, so:

- :func:`get_include_paths` returns an :class:`IncludePaths` whose ``stf`` field is
  ``None``; the CCCL fields (``libcudacxx``, ``cub``, ``thrust``) point at an installed
  ``cuda-cccl``, ``cuda`` at the CUDA toolkit headers, each ``None`` when absent. The
  fields are :class:`pathlib.Path` objects, as in the reference.
- :func:`get_stf_include_dir`, :func:`get_library_dir` and :func:`get_library_path`
  raise ``RuntimeError`` (the reference raises it too when it finds nothing) saying
  that the ``cuda-stf`` distribution provides the native pieces. This is a deliberate
  difference: there is nothing of stflow's own to point at.
- :func:`iter_site_roots` is the reference's helper that lists the roots under which
  installed packages live.

Importing this module is cheap: it imports no CUDA module (``cuda.cccl`` and
``cuda.pathfinder`` are imported only by :func:`get_include_paths`).
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

__all__ = [
    "IncludePaths",
    "get_include_paths",
    "get_library_dir",
    "get_library_path",
    "get_stf_include_dir",
    "iter_site_roots",
]

_NO_NATIVE = (
    "stflow is a pure-Python runtime and has no native STF headers or "
    "library; install the cuda-stf distribution (pip install "
    "'cuda-stf[cu13]') for the C/C++ CUDASTF API"
)


def iter_site_roots() -> Iterator[Path]:
    """Yield, once each, the directories under which an installed package may live.

    Yields the entries of ``sys.path``, then the interpreter's site directories (which
    pip's build isolation removes from ``sys.path``) and the user site directory,
    resolved to absolute paths, skipping repeats.

    Yields
    ------
    pathlib.Path
        A resolved directory path (it need not exist).
    """
    site_dirs: list[str] = []
    try:
        site_dirs.extend(site.getsitepackages())
    except AttributeError:  # some virtualenv versions lack it
        pass
    try:
        site_dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    seen: set[Path] = set()
    for entry in [*sys.path, *site_dirs]:
        root = Path(entry).resolve()
        if root not in seen:
            seen.add(root)
            yield root


@dataclass
class IncludePaths:
    """Header directories: the CUDA toolkit's and CCCL's (``stf`` is always ``None``).

    Attributes
    ----------
    cuda, libcudacxx, cub, thrust, stf : pathlib.Path or None
        ``None`` where the headers are not installed.
    """

    cuda: Path | None = None
    libcudacxx: Path | None = None
    cub: Path | None = None
    thrust: Path | None = None
    stf: Path | None = None

    def as_tuple(self) -> tuple[Path | None, ...]:
        """The paths from the highest level to the lowest: ``(stf, thrust, cub,
        libcudacxx, cuda)``."""
        return (self.stf, self.thrust, self.cub, self.libcudacxx, self.cuda)


def _as_path(value: object) -> Path | None:
    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    return None


def _cuda_include() -> Path | None:
    """The CUDA toolkit headers: ``cuda.pathfinder`` (as the reference), else
    ``$CUDA_HOME``, ``$CUDA_PATH`` or ``/usr/local/cuda``."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except Exception:  # noqa: BLE001 - optional, and may fail in any way
        pass
    else:
        try:
            found = _as_path(find_nvidia_header_directory("cudart"))
        except Exception:  # noqa: BLE001
            found = None
        if found is not None:
            return found
    for root in (
        os.environ.get("CUDA_HOME"),
        os.environ.get("CUDA_PATH"),
        "/usr/local/cuda",
    ):
        if root and os.path.isdir(os.path.join(root, "include")):
            return Path(root) / "include"
    return None


def _cccl_include() -> Path | None:
    """The include root of an installed ``cuda-cccl`` (libcudacxx, CUB and Thrust)."""
    getters = []
    try:
        from cuda.cccl.headers.include_paths import get_include_paths as headers_getter

        getters.append(headers_getter)
    except Exception:  # noqa: BLE001
        pass
    try:
        import cuda.cccl as cccl

        getters.append(cccl.get_include_paths)
    except Exception:  # noqa: BLE001
        pass
    for getter in getters:
        try:
            found = _as_path(getattr(getter(), "libcudacxx", None))
        except Exception:  # noqa: BLE001
            continue
        if found is not None:
            return found
    return None


def get_include_paths() -> IncludePaths:
    """Header directories of the installed CUDA toolkit and CCCL, where present.

    Returns
    -------
    IncludePaths
        ``stf`` is ``None`` (stflow has no native headers); ``libcudacxx``, ``cub``
        and ``thrust`` are the ``cuda-cccl`` include root; ``cuda`` the toolkit's
        headers.
    """
    cccl = _cccl_include()
    return IncludePaths(cuda=_cuda_include(), libcudacxx=cccl, cub=cccl, thrust=cccl)


def get_stf_include_dir() -> NoReturn:
    """Always raises: stflow has no native STF headers.

    Raises
    ------
    RuntimeError
        "Unable to locate the CUDASTF include directory", with the remedy.
    """
    raise RuntimeError(f"Unable to locate the CUDASTF include directory: {_NO_NATIVE}")


def get_library_dir() -> NoReturn:
    """Always raises: stflow has no native STF library.

    Raises
    ------
    RuntimeError
        "Unable to locate the CUDASTF library", with the remedy.
    """
    raise RuntimeError(f"Unable to locate the CUDASTF library: {_NO_NATIVE}")


def get_library_path() -> NoReturn:
    """Always raises: stflow has no native STF library.

    Raises
    ------
    RuntimeError
        "Unable to locate the CUDASTF library", with the remedy.
    """
    raise RuntimeError(f"Unable to locate the CUDASTF library: {_NO_NATIVE}")
