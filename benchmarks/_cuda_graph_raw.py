"""Raw CUDA baselines of benchmark B3 (replay), built with cuda.bindings alone.

- :func:`chain_replay`: a graph of ``nodes`` empty-kernel nodes in a chain, built
  node by node with ``cuGraphAddKernelNode``, instantiated once and launched
  ``launches`` times with ``cuGraphLaunch``: microseconds per launch and per node.
- :func:`while_loop_replay`: a graph holding one conditional WHILE node whose body is
  an empty kernel followed by the condition kernel (decrement a device counter, then
  ``cudaGraphSetConditional(handle, counter != 0)``); a memset node before the loop
  node resets the counter to ``iterations`` at every launch. Microseconds per
  iteration.

Both report the median over ``repeats`` timed rounds, after a warm-up, of the time
from the first launch to the completion of the last (``cuStreamSynchronize``), and
separately the host time spent submitting.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from typing import Any

from _cuda import check, compile_empty_kernel, driver

STEP_SOURCE = r"""
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

extern "C" __global__ void step(cudaGraphConditionalHandle handle, unsigned int* counter)
{
    const unsigned int left = *counter - 1u;
    *counter = left;
    cudaGraphSetConditional(handle, left != 0u ? 1u : 0u);
}
"""


def _compile(source: str, name: str, device: int) -> Any:
    """``name`` from ``source``, compiled with NVRTC and loaded in the current context."""
    from cuda.bindings import nvrtc

    cu = driver()
    dev = check(cu.cuDeviceGet(device))
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
    program = check(nvrtc.nvrtcCreateProgram(source.encode(), b"step.cu", 0, [], []))
    options = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    check(nvrtc.nvrtcCompileProgram(program, len(options), options))
    cubin = b" " * check(nvrtc.nvrtcGetCUBINSize(program))
    check(nvrtc.nvrtcGetCUBIN(program, cubin))
    check(nvrtc.nvrtcDestroyProgram(program))
    module = check(cu.cuModuleLoadData(cubin))
    return check(cu.cuModuleGetFunction(module, name.encode()))


def _kernel_params(function: Any, args: Any = 0) -> Any:
    cu = driver()
    params = cu.CUDA_KERNEL_NODE_PARAMS()
    params.func = function
    params.gridDimX = params.gridDimY = params.gridDimZ = 1
    params.blockDimX = params.blockDimY = params.blockDimZ = 1
    params.kernelParams = args
    return params


def _time_launches(
    executable: Any, stream: Any, launches: int, repeats: int
) -> tuple[float, float]:
    """Median seconds of ``launches`` launches to completion, and of submitting them."""
    cu = driver()
    for _ in range(3):
        check(cu.cuGraphLaunch(executable, stream))
    check(cu.cuStreamSynchronize(stream))
    totals, submits = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(launches):
            check(cu.cuGraphLaunch(executable, stream))
        submitted = time.perf_counter()
        check(cu.cuStreamSynchronize(stream))
        done = time.perf_counter()
        totals.append(done - start)
        submits.append(submitted - start)
    return statistics.median(totals), statistics.median(submits)


def chain_replay(
    nodes: int = 1000, launches: int = 100, repeats: int = 5, device: int = 0
) -> dict[str, float]:
    """Replay a raw graph of ``nodes`` chained empty kernels ``launches`` times."""
    cu = driver()
    function = compile_empty_kernel(device)  # also makes the context current
    stream = check(cu.cuStreamCreate(int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)))
    graph = check(cu.cuGraphCreate(0))
    params = _kernel_params(function)
    previous: list[Any] = []
    for _ in range(nodes):
        node = check(cu.cuGraphAddKernelNode(graph, previous, len(previous), params))
        previous = [node]
    executable = check(cu.cuGraphInstantiate(graph, 0))
    total, submit = _time_launches(executable, stream, launches, repeats)
    check(cu.cuGraphExecDestroy(executable))
    check(cu.cuGraphDestroy(graph))
    check(cu.cuStreamDestroy(stream))
    per_launch = total / launches * 1e6
    return {
        "nodes": nodes,
        "launches": launches,
        "us_per_launch": per_launch,
        "us_per_node": per_launch / nodes,
        "submit_us_per_launch": submit / launches * 1e6,
    }


def while_loop_replay(
    iterations: int = 1000, launches: int = 10, repeats: int = 5, device: int = 0
) -> dict[str, float]:
    """Replay a raw conditional while loop of ``iterations`` (empty kernel + step)."""
    cu = driver()
    empty = compile_empty_kernel(device)
    step = _compile(STEP_SOURCE, "step", device)
    context = check(cu.cuCtxGetCurrent())
    stream = check(cu.cuStreamCreate(int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)))
    counter = check(cu.cuMemAlloc(4))
    graph = check(cu.cuGraphCreate(0))
    handle = check(
        cu.cuGraphConditionalHandleCreate(
            graph, context, 1, cu.CU_GRAPH_COND_ASSIGN_DEFAULT
        )
    )
    memset = cu.CUDA_MEMSET_NODE_PARAMS()
    memset.dst = counter
    memset.pitch = 4
    memset.value = iterations
    memset.elementSize = 4
    memset.width = memset.height = 1
    reset = check(cu.cuGraphAddMemsetNode(graph, None, 0, memset, context))
    params = cu.CUgraphNodeParams()
    params.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = cu.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
    params.conditional.size = 1
    params.conditional.ctx = context
    check(cu.cuGraphAddNode(graph, [reset], None, 1, params))
    body = params.conditional.phGraph_out[0]
    first = check(cu.cuGraphAddKernelNode(body, None, 0, _kernel_params(empty)))
    args = [ctypes.c_uint64(int(handle)), ctypes.c_uint64(int(counter))]
    array = (ctypes.c_void_p * 2)(*[ctypes.addressof(a) for a in args])
    check(
        cu.cuGraphAddKernelNode(
            body, [first], 1, _kernel_params(step, ctypes.addressof(array))
        )
    )
    executable = check(cu.cuGraphInstantiate(graph, 0))
    total, submit = _time_launches(executable, stream, launches, repeats)
    left = ctypes.c_uint32(1)
    check(cu.cuMemcpyDtoH(ctypes.addressof(left), counter, 4))
    if left.value != 0:
        raise RuntimeError(
            f"the raw while loop stopped with {left.value} iterations left"
        )
    check(cu.cuGraphExecDestroy(executable))
    check(cu.cuGraphDestroy(graph))
    check(cu.cuMemFree(counter))
    check(cu.cuStreamDestroy(stream))
    return {
        "iterations": iterations,
        "launches": launches,
        "us_per_iteration": total / (launches * iterations) * 1e6,
        "us_per_launch": total / launches * 1e6,
        "submit_us_per_launch": submit / launches * 1e6,
    }


if __name__ == "__main__":
    chain = chain_replay()
    print(
        f"raw graph replay, {chain['nodes']} chained empty kernels: "
        f"{chain['us_per_launch']:.1f} us per launch, "
        f"{chain['us_per_node']:.3f} us per node "
        f"(submit {chain['submit_us_per_launch']:.1f} us)"
    )
    loop = while_loop_replay()
    print(
        f"raw conditional while loop, {loop['iterations']} iterations of an empty "
        f"kernel + the condition kernel: {loop['us_per_iteration']:.3f} us per "
        f"iteration ({loop['us_per_launch']:.1f} us per launch)"
    )
