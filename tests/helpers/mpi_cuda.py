"""A stand-in for a CUDA-aware MPI, for tests on a GPU machine whose MPI is not one.

``CudaAwareStandIn(comm)`` is ``comm`` except that ``Isend``/``Irecv`` of a CUDA buffer
(an object with ``__cuda_array_interface__``: a CuPy array, stflow's message
buffers) go through host
copies, completed as a CUDA-aware MPI completes them: a send's bytes are taken when it
is posted, a receive's bytes are in device memory when its ``Wait`` (or a successful
``Test``) returns. Everything else is the communicator's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class CudaAwareStandIn:
    def __init__(self, comm: Any) -> None:
        self.comm = comm

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Any:
        if hasattr(buf, "__cuda_array_interface__"):
            import cupy

            buf = cupy.asnumpy(cupy.asarray(buf))  # the request keeps it alive
        return self.comm.Isend(buf, dest=dest, tag=tag)

    def Irecv(self, buf: Any, source: int, tag: int = 0) -> Any:
        if not hasattr(buf, "__cuda_array_interface__"):
            return self.comm.Irecv(buf, source=source, tag=tag)
        import cupy

        device = cupy.asarray(buf)  # a view of the same memory
        host = np.empty(device.nbytes, np.uint8)
        return _IntoDevice(self.comm.Irecv(host, source=source, tag=tag), host, device)


class _IntoDevice:
    """A receive into host memory whose completion copies it into ``device``."""

    def __init__(self, request: Any, host: np.ndarray, device: Any) -> None:
        self.request, self.host, self.device = request, host, device
        self.done = False

    def _arrived(self) -> None:
        import cupy

        self.device.reshape(-1).view(np.uint8).set(self.host)
        cupy.cuda.get_current_stream().synchronize()
        self.done = True

    def Wait(self) -> None:
        if not self.done:
            self.request.Wait()
            self._arrived()

    def Test(self) -> bool:
        if not self.done and self.request.Test():
            self._arrived()
        return self.done
