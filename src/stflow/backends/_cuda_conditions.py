"""The device code of loops in CUDA graphs (``_cuda_graphs.py``): the kernels that
start and step a loop, and the kernel setting a loop's condition from its terms.

``set_condition`` launches a one-thread kernel reading element 0 of each term and
calling ``cudaGraphSetConditional``. The kernels are generated per signature (dtypes,
comparisons, negations, combiner), compiled with NVRTC to a cubin for the device's
architecture and cached. NVRTC knows ``cudaGraphConditionalHandle`` and
``cudaGraphSetConditional`` as built-ins: the function is declared
``__cudart_builtin__`` and needs no header and no device linking. Thresholds are
compared exactly: in double precision against float elements, and against integer
elements as 64-bit integers after rounding the threshold towards the side that keeps
the comparison's truth (``x > 2.5`` is ``x > 2``).

Nothing here calls the driver: :func:`condition_kernel` checks a condition and gives
the kernel's source and arguments, which the graph support compiles and launches.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._graphs import ConditionTerm

__all__ = [
    "LOOP_KERNELS",
    "MAX_TERMS",
    "condition_kernel",
    "condition_source",
    "integer_threshold",
]

MAX_TERMS = 8
"""Terms one condition may combine."""
COMPARISONS = (">", "<", ">=", "<=")
ELEMENT_TYPES = {
    "float32": "float",
    "float64": "double",
    "int32": "int",
    "int64": "long long",
}
_INT64 = (-(2**63), 2**63 - 1)

SET_CONDITIONAL = (
    'extern "C" __device__ __cudart_builtin__ void '
    "cudaGraphSetConditional(cudaGraphConditionalHandle handle, "
    "unsigned int value);\n"
)
LOOP_KERNELS = (
    SET_CONDITIONAL
    + r"""
extern "C" __global__ void stflow_loop_start(cudaGraphConditionalHandle handle,
                                             unsigned int* counter, unsigned int count,
                                             unsigned int value)
{
    if (counter) *counter = count;
    cudaGraphSetConditional(handle, value);
}

extern "C" __global__ void stflow_repeat_step(cudaGraphConditionalHandle handle,
                                              unsigned int* counter)
{
    const unsigned int left = *counter - 1u;
    *counter = left;
    cudaGraphSetConditional(handle, left != 0u ? 1u : 0u);
}
"""
)


def condition_kernel(
    handle: int, terms: Sequence[ConditionTerm], combiner: str
) -> tuple[str, list[Any]]:
    """The source of the kernel setting conditional ``handle`` from ``terms``
    combined by ``combiner`` (``"all"`` or ``"any"``), and its arguments.

    Raises
    ------
    ValueError
        No term or more than :data:`MAX_TERMS`, an unknown combiner, comparison or
        dtype, or a NaN threshold against an integer element.
    """
    if combiner not in ("all", "any"):
        raise ValueError(
            f"a condition combines its terms with 'all' or 'any', not {combiner!r}"
        )
    if not 1 <= len(terms) <= MAX_TERMS:
        raise ValueError(f"a condition has 1 to {MAX_TERMS} terms, not {len(terms)}")
    signature = []
    args: list[Any] = [ctypes.c_uint64(handle)]
    for ptr, dtype, op, threshold, negate in terms:
        name = np.dtype(dtype).name
        if name not in ELEMENT_TYPES:
            raise ValueError(
                f"a condition term reads float32, float64, int32 or "
                f"int64 elements, not {name}"
            )
        if op not in COMPARISONS:
            raise ValueError(
                f"a condition term compares with one of "
                f"{', '.join(COMPARISONS)}, not {op!r}"
            )
        signature.append((name, op, bool(negate)))
        args.append(ctypes.c_uint64(ptr))
        if name.startswith("float"):
            args.append(ctypes.c_double(float(threshold)))
        else:
            args.append(ctypes.c_int64(integer_threshold(op, float(threshold))))
    return condition_source(tuple(signature), combiner), args


def integer_threshold(op: str, threshold: float) -> int:
    """The 64-bit integer ``t`` with ``x op t == x op threshold`` for integers ``x``."""
    if math.isnan(threshold):
        raise ValueError(
            "a condition term on integer elements needs a threshold that "
            "is a number, not NaN"
        )
    if math.isinf(threshold):
        return _INT64[1] if threshold > 0 else _INT64[0]
    rounded = math.floor(threshold) if op in (">", "<=") else math.ceil(threshold)
    return min(max(rounded, _INT64[0]), _INT64[1])


def condition_source(signature: tuple[tuple[str, str, bool], ...], combiner: str) -> str:
    """CUDA C++ of the kernel evaluating a condition of this signature."""
    params = ["cudaGraphConditionalHandle handle"]
    tests = []
    for i, (dtype, op, negate) in enumerate(signature):
        element = ELEMENT_TYPES[dtype]
        threshold = "double" if dtype.startswith("float") else "long long"
        params.append(f"const {element}* p{i}")
        params.append(f"{threshold} t{i}")
        test = f"(({threshold})p{i}[0] {op} t{i})"
        tests.append(f"!{test}" if negate else test)
    join = " && " if combiner == "all" else " || "
    return (
        SET_CONDITIONAL
        + 'extern "C" __global__ void stflow_condition('
        + ", ".join(params)
        + ")\n"
        + "{\n    const bool value = "
        + join.join(tests)
        + ";\n"
        + "    cudaGraphSetConditional(handle, value ? 1u : 0u);\n}\n"
    )
