"""The CUDA driver for the CUDA backend: loading it, and turning its errors into ours.

``cuda.bindings.driver`` is imported by :func:`load` only, the first time a CUDA
backend is asked for; ``import stflow`` never reaches this module. Every driver
function returns a tuple whose first element is a ``CUresult`` (falsy on success);
:func:`check` unpacks it, :func:`error` builds the exception for a failure.
"""

from __future__ import annotations

from typing import Any

from .._core.errors import BackendUnavailableError, CudaError, OutOfMemoryError

__all__ = [
    "CudaOutOfMemoryError",
    "EXTRAS",
    "check",
    "driver",
    "error",
    "load",
    "releases_gil",
]

EXTRAS = "install stflow[cu12] (CUDA 12 driver) or stflow[cu13] (CUDA 13 driver)"

driver: Any = None
"""``cuda.bindings.driver`` once :func:`load` succeeded."""


class CudaOutOfMemoryError(CudaError, OutOfMemoryError):
    """``CUDA_ERROR_OUT_OF_MEMORY``: both a :class:`CudaError` and an
    :class:`OutOfMemoryError` (a ``MemoryError``); the runtime evicts and retries."""


def error(err: Any, step: str) -> CudaError:
    """The exception for the driver result ``err`` of ``step`` (a phrase naming it).

    The message names the step, the driver's error name and its description;
    ``CUDA_ERROR_OUT_OF_MEMORY`` gives a :class:`CudaOutOfMemoryError` whose message
    says how to free memory.
    """
    name = getattr(err, "name", None) or f"CUresult {int(err)}"
    description = ""
    try:
        status, text = driver.cuGetErrorString(err)
        if not status and text:
            description = text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # noqa: BLE001 - the message is best effort
        pass
    message = f"{step} failed: {name}"
    if description:
        message += f" ({description})"
    if name == "CUDA_ERROR_OUT_OF_MEMORY":
        message += (
            "; free device memory (finalize contexts, "
            "get_backend('cuda').trim_pools()) or use smaller data"
        )
        return CudaOutOfMemoryError(message, name=name, code=int(err))
    return CudaError(message, name=name, code=int(err))


def check(result: tuple, step: str) -> Any:
    """Unpack a ``cuda.bindings`` result tuple, raising :class:`CudaError` on failure.

    Returns ``None`` for calls without outputs, the output of a call with one, and a
    tuple for more.
    """
    err = result[0]
    if err:
        raise error(err, step) from None
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def releases_gil() -> bool:
    """Whether blocking driver calls release the GIL (cuda-bindings 13 and later).

    Older bindings may hold it; a host callback, which needs the GIL, would then
    never run while the host blocks on work ordered after it.
    """
    try:
        from cuda.bindings import __version__ as version

        return int(str(version).split(".")[0]) >= 13
    except Exception:  # noqa: BLE001 - unknown version: be careful
        return False


def load() -> Any:
    """Import the bindings, initialise the driver and check for a device.

    Returns
    -------
    module
        ``cuda.bindings.driver``, also kept as :data:`driver`.

    Raises
    ------
    BackendUnavailableError
        The bindings are not installed, the driver library cannot be loaded,
        ``cuInit`` fails or no device is visible; the message says which and names
        the ``stflow[cu12]`` / ``stflow[cu13]`` extras.
    """
    global driver
    try:
        from cuda.bindings import driver as module
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the CUDA backend needs the cuda-bindings package, which cannot be imported "
            f"({exc}); {EXTRAS}, or use backend='emulated'"
        ) from exc
    try:
        (err,) = module.cuInit(0)
    except Exception as exc:  # noqa: BLE001 - e.g. the driver library is missing
        raise BackendUnavailableError(
            f"cuInit could not load the NVIDIA driver ({exc}); on a machine with an "
            f"NVIDIA GPU and driver, {EXTRAS}; otherwise use backend='emulated'"
        ) from exc
    if err:
        raise BackendUnavailableError(
            f"cuInit failed with {getattr(err, 'name', err)}: no usable NVIDIA GPU or "
            f"driver; check the driver and CUDA_VISIBLE_DEVICES, {EXTRAS} matching the "
            "driver, or use backend='emulated'"
        )
    err, count = module.cuDeviceGetCount()
    if err or not count:
        raise BackendUnavailableError(
            f"no CUDA device is visible ({getattr(err, 'name', None) or 'count 0'}); "
            f"check CUDA_VISIBLE_DEVICES, {EXTRAS}, or use backend='emulated'"
        )
    driver = module
    return module
