"""Kernels of the CUDA backend compiled at run time with NVRTC.

:class:`KernelCache` compiles a CUDA C++ source once per architecture, loads it as a
library, and gives the kernel function of each device's context (loaded eagerly, so
that a first launch during a graph capture loads nothing). Users: the loop kernels of
CUDA graphs (``_cuda_graphs.py``) and the combination of reduction results
(:func:`combine_source`, ``CudaBackend.combine``).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from .._core.errors import CudaError
from . import _cuda_driver as _cu

__all__ = ["KernelCache", "combine_source", "compile_source", "kernel_params"]

_C_TYPES = {
    "bool": "bool",
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short",
    "uint16": "unsigned short",
    "int32": "int",
    "uint32": "unsigned int",
    "int64": "long long",
    "uint64": "unsigned long long",
    "float32": "float",
    "float64": "double",
}

_EXPRESSIONS = {
    "sum": "a + b",
    "prod": "a * b",
    "min": "(a != a || b != b) ? (T)(a + b) : (b < a ? b : a)",  # NaN wins
    "max": "(a != a || b != b) ? (T)(a + b) : (b > a ? b : a)",
    "logical_and": "(a != (T)0) && (b != (T)0)",
    "logical_or": "(a != (T)0) || (b != (T)0)",
    "bitwise_and": "a & b",
    "bitwise_or": "a | b",
    "bitwise_xor": "a ^ b",
}


def combine_source(op: str, dtype: str) -> str:
    """CUDA C++ of ``stflow_combine(dst, src, n)``: ``dst[i] = op(dst[i], src[i])``.

    Raises
    ------
    ValueError
        An operation or dtype that reductions do not support.
    """
    try:
        element = _C_TYPES[dtype]
        expression = _EXPRESSIONS[op]
    except KeyError:
        raise ValueError(
            f"no combine kernel for reduce({op!r}) on {dtype} data"
        ) from None
    return (
        f"typedef {element} T;\n"
        'extern "C" __global__ void stflow_combine(T* dst, const T* src, '
        "unsigned long long n)\n{\n"
        "    const unsigned long long stride = (unsigned long long)blockDim.x * "
        "gridDim.x;\n"
        "    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x "
        "+ threadIdx.x; i < n; i += stride) {\n"
        "        const T a = dst[i];\n        const T b = src[i];\n"
        f"        dst[i] = (T)({expression});\n"
        "    }\n}\n"
    )


class KernelCache:
    """Compiled kernels of one CUDA backend, per source, architecture and device."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._lock = threading.Lock()
        self._libraries: dict[tuple[str, tuple[int, int]], Any] = {}
        self._functions: dict[tuple[str, str, int], Any] = {}

    def function(self, source: str, name: str, device: int) -> Any:
        """The kernel ``name`` of ``source`` loaded in ``device``'s context (cached)."""
        key = (source, name, device)
        function = self._functions.get(key)
        if function is not None:
            return function
        with self._lock:
            function = self._functions.get(key)
            if function is not None:
                return function
            backend = self._backend
            _name, major, minor, _total = backend._properties[device]
            arch = (major, minor)
            library = self._libraries.get((source, arch))
            d = _cu.driver
            if library is None:
                cubin = compile_source(source, arch)
                library = _cu.check(
                    d.cuLibraryLoadData(cubin, None, None, 0, None, None, 0),
                    f"loading the {name} kernel",
                )
                self._libraries[(source, arch)] = library
            kernel = _cu.check(
                d.cuLibraryGetKernel(library, name.encode()), f"finding the {name} kernel"
            )
            backend._push(device)
            try:  # load it into the context now, not lazily during a capture
                function = _cu.check(
                    d.cuKernelGetFunction(kernel),
                    f"loading the {name} kernel on device {device}",
                )
            finally:
                backend._pop(device)
            self._functions[key] = function
            return function


def kernel_params(args: list[Any]) -> Any:
    """The ``void*`` array of a launch: the addresses of ``args`` (ctypes values),
    which the caller keeps alive until the driver has read them."""
    return (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])


def compile_source(source: str, arch: tuple[int, int]) -> bytes:
    """Compile ``source`` with NVRTC to a cubin for ``sm_<arch>``."""
    try:
        from cuda.bindings import nvrtc

        nvrtc.nvrtcVersion()  # loads libnvrtc
    except Exception as exc:  # noqa: BLE001 - not installed, or no libnvrtc
        raise CudaError(
            f"stflow compiles its CUDA kernels (loop conditions, reduction "
            f"combines) with NVRTC, which cannot be loaded ({exc}); install "
            "the NVRTC of your CUDA version (pip install nvidia-cuda-nvrtc)"
        ) from exc

    def check(result: tuple, step: str) -> Any:
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CudaError(
                f"{step} failed: {result[0].name}",
                name=result[0].name,
                code=int(result[0]),
            )
        return result[1] if len(result) > 1 else None

    program = check(
        nvrtc.nvrtcCreateProgram(source.encode(), b"stflow_kernels.cu", 0, [], []),
        "creating an NVRTC program",
    )
    try:
        options = [f"--gpu-architecture=sm_{arch[0]}{arch[1]}".encode()]
        result = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = check(nvrtc.nvrtcGetProgramLogSize(program), "reading the NVRTC log")
            log = b" " * size
            check(nvrtc.nvrtcGetProgramLog(program, log), "reading the NVRTC log")
            raise CudaError(
                f"compiling a kernel for sm_{arch[0]}{arch[1]} "
                f"failed: {result[0].name}\n"
                f"{log.decode(errors='replace')}",
                name=result[0].name,
                code=int(result[0]),
            )
        size = check(nvrtc.nvrtcGetCUBINSize(program), "reading the cubin size")
        cubin = b" " * size
        check(nvrtc.nvrtcGetCUBIN(program, cubin), "reading the cubin")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(program)
