"""Include and library paths kept for build scripts written for the reference.

stflow ships no C++ headers and no shared library: :func:`get_include_paths` reports
the CCCL and CUDA toolkit headers that are installed (if any), and the other helpers
explain where the native STF pieces come from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["IncludePaths", "get_include_paths", "get_library_dir", "get_library_path",
           "get_stf_include_dir"]

_NO_NATIVE = ("stflow is a pure-Python runtime and has no native STF headers or "
              "library; install the cuda-stf distribution for the C++ CUDASTF pieces")


@dataclass
class IncludePaths:
    """Header directories: CUDA toolkit and CCCL (``stf`` is always ``None``)."""

    cuda: str | None = None
    libcudacxx: str | None = None
    cub: str | None = None
    thrust: str | None = None
    stf: str | None = None

    def as_tuple(self) -> tuple[str | None, ...]:
        return (self.stf, self.thrust, self.cub, self.libcudacxx, self.cuda)


def _cuda_include() -> str | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                 "/usr/local/cuda"):
        if root and os.path.isdir(os.path.join(root, "include")):
            return os.path.join(root, "include")
    return None


def _cccl_include() -> str | None:
    try:
        import cuda.cccl as cccl
    except ImportError:
        return None
    getter = getattr(cccl, "get_include_paths", None)
    if getter is None:
        return None
    paths = getter()
    return getattr(paths, "libcudacxx", None)


def get_include_paths() -> IncludePaths:
    """Header directories of the installed CUDA toolkit and CCCL, where present."""
    cccl = _cccl_include()
    return IncludePaths(cuda=_cuda_include(), libcudacxx=cccl, cub=cccl, thrust=cccl)


def get_stf_include_dir() -> str:
    raise RuntimeError(_NO_NATIVE)


def get_library_dir() -> str:
    raise RuntimeError(_NO_NATIVE)


def get_library_path() -> str:
    raise RuntimeError(_NO_NATIVE)
