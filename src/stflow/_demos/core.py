"""The demo's problem, kernels and command-line helpers, shared by the demo
(``python -m stflow.demo``) and its version over MPI ranks (``--distributed``,
``stflow._demos.distributed``).

The problem: a 2-D Poisson equation on an ``n × n`` grid (``poisson_rhs``,
``poisson_matvec``), solved by a conjugate gradient (``reference_cg``: the sequential
NumPy solve the demo checks against). The blocked CG's task bodies
(``fn(xp, *arrays)``, run with ``t.run``) and the layout of row strips over devices are
here too, with the ``--size`` / ``--backend`` handling both command lines use.
"""

from __future__ import annotations

import argparse
import importlib.util
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_SIZE",
    "SIZES",
    "TOLERANCE",
    "halo_reads",
    "layout",
    "poisson_matvec",
    "poisson_rhs",
    "reference_cg",
    "row_blocks",
]

SIZES = {"small": (32, 60), "medium": (128, 250), "large": (512, 1000)}
"""``--size`` presets: grid points per side and CG iterations."""

DEFAULT_SIZE = {"emulated": "medium", "cuda": "large"}
"""The ``--size`` preset of each backend: on CUDA, with graph mode (the default there),
a size where the GPU beats the NumPy reference clearly."""

TOLERANCE = 1e-9
"""Largest accepted ``max |x - x_ref| / max |x_ref|``."""

_TINY = 1e-300  # keeps alpha and beta finite once the residual is exactly zero


# -- the problem and its NumPy reference -------------------------------------------


def poisson_rhs(n: int) -> np.ndarray:
    """The right-hand side ``b = h² · f`` with ``f = 1`` on an ``n × n`` grid."""
    h = 1.0 / (n + 1)
    return np.full((n, n), h * h)


def poisson_matvec(u: np.ndarray) -> np.ndarray:
    """``A u`` for the 5-point Laplacian with zero Dirichlet boundary (NumPy)."""
    out = 4.0 * u
    out[1:, :] -= u[:-1, :]
    out[:-1, :] -= u[1:, :]
    out[:, 1:] -= u[:, :-1]
    out[:, :-1] -= u[:, 1:]
    return out


def reference_cg(b: np.ndarray, iterations: int) -> np.ndarray:
    """Plain sequential CG on the whole grid, starting from ``x = 0``."""
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rr = float(np.vdot(r, r))
    for _ in range(iterations):
        ap = poisson_matvec(p)
        alpha = rr / max(float(np.vdot(p, ap)), _TINY)
        x += alpha * p
        r -= alpha * ap
        rr_new = float(np.vdot(r, r))
        beta = rr_new / max(rr, _TINY)
        rr = rr_new
        p *= beta
        p += r
    return x


def layout(
    n: int, available: int, devices: int | None = None, blocks: int | None = None
) -> tuple[int, int]:
    """``(devices, blocks)`` actually used for an ``n``-row grid.

    ``devices`` defaults to all ``available`` ones, ``blocks`` to two per device; there
    are at most ``n`` blocks and no more devices than blocks.
    """
    devices = available if devices is None else min(devices, available)
    blocks = min(2 * devices if blocks is None else blocks, n)
    return min(devices, blocks), blocks


def row_blocks(n: int, blocks: int) -> list[tuple[int, int]]:
    """Split ``n`` rows into ``blocks`` contiguous ``(start, stop)`` strips."""
    bounds = np.linspace(0, n, blocks + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


# -- kernels: written once, run with NumPy (emulated) or CuPy (CUDA) -----------------


def _copy_edges(xp: Any, p: Any, top: Any, bottom: Any) -> None:
    top[...] = p[0]
    bottom[...] = p[-1]


def _matvec_kernel(has_above: bool, has_below: bool) -> Callable[..., None]:
    def kernel(xp: Any, p: Any, *rest: Any) -> None:
        halos = list(rest[: has_above + has_below])
        ap, pap = rest[has_above + has_below :]
        ap[...] = 4.0 * p
        ap[1:, :] -= p[:-1, :]
        ap[:-1, :] -= p[1:, :]
        ap[:, 1:] -= p[:, :-1]
        ap[:, :-1] -= p[:, 1:]
        if has_above:
            ap[0, :] -= halos.pop(0)
        if has_below:
            ap[-1, :] -= halos.pop(0)
        pap[0] = xp.dot(p.ravel(), ap.ravel())

    return kernel


def _sum_parts(parts: Sequence[Any]) -> Any:
    total = parts[0][0]
    for part in parts[1:]:
        total = total + part[0]
    return total


def _init_scalars(xp: Any, scalars: Any, *rr_parts: Any) -> None:
    rr = _sum_parts(rr_parts)
    scalars[0] = rr  # r·r
    scalars[1] = 0.0  # alpha
    scalars[2] = 0.0  # beta
    scalars[3] = rr  # r·r at the start, for the relative residual
    scalars[4] = 0.0  # iterations done (a graph replays frozen Python values)


def _alpha(xp: Any, scalars: Any, *pap_parts: Any) -> None:
    scalars[1] = scalars[0] / xp.maximum(_sum_parts(pap_parts), _TINY)


def _update(xp: Any, scalars: Any, p: Any, ap: Any, x: Any, r: Any, rr: Any) -> None:
    alpha = scalars[1]
    x += alpha * p
    r -= alpha * ap
    rr[0] = xp.dot(r.ravel(), r.ravel())


def _beta(xp: Any, scalars: Any, *rr_parts: Any) -> None:
    rr_new = _sum_parts(rr_parts)
    scalars[2] = rr_new / xp.maximum(scalars[0], _TINY)
    scalars[0] = rr_new
    scalars[4] += 1.0


def _direction(xp: Any, scalars: Any, r: Any, p: Any) -> None:
    p *= scalars[2]
    p += r


def _start(xp: Any, b: Any, r: Any, p: Any, rr: Any) -> None:
    r[...] = b
    p[...] = b
    rr[0] = xp.dot(b.ravel(), b.ravel())


# -- the solver --------------------------------------------------------------------


def halo_reads(k: int, top: Sequence[Any], bottom: Sequence[Any]) -> list[Any]:
    """The reads of block ``k``'s halo rows: the last row of the block above
    (``bottom[k - 1]``) and the first row of the block below (``top[k + 1]``)."""
    halos = []
    if k > 0:
        halos.append(bottom[k - 1].read())
    if k < len(top) - 1:
        halos.append(top[k + 1].read())
    return halos


def _report(scalars: np.ndarray, out: Callable[[str], Any]) -> None:
    relative = np.sqrt(scalars[0] / max(scalars[3], _TINY))
    out(f"  iteration {int(round(scalars[4])):4d}: |r|/|r0| = {relative:.3e}")


def _size(args: argparse.Namespace, backend: str | None = None) -> None:
    """``args.n`` and the default ``args.iterations`` from ``--size`` (whose default
    depends on the backend: left undecided until ``backend`` is known)."""
    args.n = None
    if args.size is None:
        if backend is None:
            return
        args.size = DEFAULT_SIZE.get(backend, "medium")
    if args.size in SIZES:
        args.n, default_iterations = SIZES[args.size]
    else:
        try:
            args.n = int(args.size)
        except ValueError:
            args.error(
                f"--size must be one of {', '.join(SIZES)} or an integer, "
                f"got {args.size!r}"
            )
        default_iterations = SIZES["medium"][1]
    if args.iterations is None:
        args.iterations = default_iterations


def _configure(args: argparse.Namespace) -> str:
    """Apply ``--backend`` and ``--devices`` through stflow's environment variables.

    stflow reads ``STFLOW_BACKEND`` and ``STFLOW_EMULATED_DEVICES`` once, when the first
    backend starts; place factories validate device ordinals against that default
    backend. So the options are written there, if no backend has started yet (always
    the case under ``python -m stflow.demo``). Returns a note when they could not be
    applied.
    """
    from stflow import _config, backends
    from stflow.backends import emulated

    wanted = {}
    if args.backend is not None:
        wanted["STFLOW_BACKEND"] = args.backend
    if args.devices is not None and args.backend != "cuda":
        wanted["STFLOW_EMULATED_DEVICES"] = str(args.devices)
    wanted = {
        key: value for key, value in wanted.items() if _config.setting_text(key) != value
    }
    if not wanted:
        return ""
    if emulated._backend is None and backends._auto is None:
        # Keep the scheduler seed already drawn (and maybe reported) for this process.
        wanted.setdefault("STFLOW_EMULATION_SEED", str(_config.config().emulation_seed))
        _config.set_environment(wanted)
        return ""
    running = emulated._backend
    if (
        "STFLOW_EMULATED_DEVICES" in wanted
        and running is not None
        and running.device_count < args.devices
    ):
        return (
            f"the emulated backend was already started with "
            f"{running.device_count} device(s)"
        )
    return ""


def _select_backend(args: argparse.Namespace, configure: bool) -> tuple[Any, str]:
    """The backend to run on, and a note on how it was chosen."""
    from stflow._core import config as _config
    from stflow.backends import default_backend, get_backend
    from stflow.errors import BackendNotice, BackendUnavailableError

    requested = args.backend or _config.config().backend
    note = ""
    if requested == "auto" and importlib.util.find_spec("cupy") is None:
        # The CUDA task bodies need CuPy: without it, only emulation can run them.
        args.backend = requested = "emulated"
        note = "auto-selected: CuPy (used by the CUDA task bodies) is not installed"
    elif requested == "cuda" and importlib.util.find_spec("cupy") is None:
        raise BackendUnavailableError(
            "the demo's CUDA task bodies use CuPy; install it (pip install "
            "cupy-cuda12x or cupy-cuda13x) or pass --backend emulated"
        )
    if configure:
        note = _configure(args) or note
    with warnings.catch_warnings():
        # Said in one line by main() instead of the one-time BackendNotice.
        warnings.simplefilter("ignore", BackendNotice)
        native = get_backend(requested)
        try:
            default_backend()  # place factories check device ordinals against it
        except ImportError:
            pass
    if requested == "auto" and native.name == "emulated":
        note = note or "auto-selected: no usable CUDA GPU"
    return native, note
