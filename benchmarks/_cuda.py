"""Raw CUDA helpers shared by the GPU benchmarks (driver API through cuda.bindings)."""

from __future__ import annotations

from typing import Any

EMPTY_KERNEL = b'extern "C" __global__ void empty() {}\n'


def check(result: Any) -> Any:
    """Unpack a cuda.bindings result tuple, raising on a non-success status."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise RuntimeError(f"CUDA call failed: {status!r}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def driver() -> Any:
    from cuda.bindings import driver as cu

    return cu


def compile_empty_kernel(device: int = 0) -> Any:
    """An empty ``__global__`` function, compiled with NVRTC for ``device``."""
    from cuda.bindings import nvrtc

    cu = driver()
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(device))
    context = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(context))
    major = check(
        cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
        )
    )
    minor = check(
        cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
        )
    )
    program = check(nvrtc.nvrtcCreateProgram(EMPTY_KERNEL, b"empty.cu", 0, [], []))
    options = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    check(nvrtc.nvrtcCompileProgram(program, len(options), options))
    size = check(nvrtc.nvrtcGetCUBINSize(program))
    cubin = b" " * size
    check(nvrtc.nvrtcGetCUBIN(program, cubin))
    module = check(cu.cuModuleLoadData(cubin))
    return check(cu.cuModuleGetFunction(module, b"empty"))
