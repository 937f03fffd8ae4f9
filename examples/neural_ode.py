"""A neural ODE ``dy/dt = f(y)`` (``f``: a small MLP) integrated on the device, by RK4 at
fixed steps and by Dormand-Prince 5(4) with adaptive steps.

    python examples/neural_ode.py [--batch 16] [--hidden 32] [--t-end 2.0]
                                  [--rk4-steps 100] [--rtol 1e-6] [--atol 1e-8]
                                  [--backend auto|cuda|emulated]

The vector field is the one of torchdiffeq's ``ode_demo.py``:
``f(y) = tanh(y^3 W1 + b1) W2 + b2`` on a batch of 2-D states (``y``: ``(batch, 2)``),
with fixed random weights held as read-only logical data (``set_read_only``: every
scope reads them, none snapshots them).

**RK4** (fixed step ``h``): ``graph_scope > repeat(steps)``: the body, recorded once,
is four stage tasks ``k_i = f(y + c_i h k_{i-1})`` and the update
``y += h/6 (k1 + 2 k2 + 2 k3 + k4)``; the device runs it ``steps`` times.

**DOPRI5** (adaptive): a ``while_loop`` whose body is one Dormand-Prince step: seven
stage tasks, then a control task that estimates the local error
``err = h sum_i e_i k_i``, scaled by ``atol + rtol max(|y|, |y_new|)`` (RMS norm),
accepts the step when the norm is at most 1, and sets the next step size
``h = min(h * clip(0.9 norm^(-1/5), 0.2, 10), t_end - t)``. The time ``t``, the step
size ``h``, the time left and the step counters are device data: accept/reject is an
``xp.where`` on the device, and ``continue_while((left > eps) & (steps < cap))`` ends
the loop without the host ever reading ``t`` or ``h``.

Bodies are ``t.run(fn, ...)``: ``fn(xp, *arrays)`` gets NumPy arrays on the emulated
backend and CuPy arrays on CUDA. Both integrations are checked against a NumPy run of
the same schemes (same step decisions) and against a fine fixed-step RK4 solution.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import stflow as stf
from stflow import linalg

# -- the vector field -------------------------------------------------------------------------


def make_weights(hidden: int = 32, dim: int = 2, seed: int = 0) -> list[np.ndarray]:
    """``W1 (dim, hidden)``, ``b1 (hidden,)``, ``W2 (hidden, dim)``, ``b2 (dim,)``."""
    rng = np.random.default_rng(seed)
    return [
        rng.normal(0.0, 0.5, (dim, hidden)),
        rng.normal(0.0, 0.1, hidden),
        rng.normal(0.0, 0.5, (hidden, dim)),
        rng.normal(0.0, 0.1, dim),
    ]


def make_states(batch: int = 16, dim: int = 2, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (batch, dim))


def field(xp: Any, y: Any, W1: Any, b1: Any, W2: Any, b2: Any) -> Any:
    """``f(y) = tanh(y^3 W1 + b1) W2 + b2`` (``xp``: NumPy or CuPy). The products go
    through ``stflow.linalg`` (cuBLAS on CUDA, which graph mode can record where
    CuPy's ``@`` refuses)."""
    hidden = xp.empty((y.shape[0], W1.shape[1]), dtype=y.dtype)
    linalg.gemm(y * y * y, W1, hidden)
    hidden = xp.tanh(hidden + b1)
    out = xp.empty(y.shape, dtype=y.dtype)
    linalg.gemm(hidden, W2, out)
    return out + b2


# -- RK4 ------------------------------------------------------------------------------------------


def _rk4_stage(c: float, h: float) -> Any:
    """The body of stage ``k = f(y + c h k_prev)``; the first stage (``c = 0``) has no
    ``k_prev`` argument: ``k = f(y)``."""

    def body(xp: Any, k: Any, y: Any, *rest: Any) -> None:
        point = y + (c * h) * rest[0] if c else y
        k[...] = field(xp, point, *rest[-4:])

    return body


def _rk4_update(h: float) -> Any:
    def body(xp: Any, y: Any, k1: Any, k2: Any, k3: Any, k4: Any) -> None:
        y += (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

    return body


def rk4(
    y0: np.ndarray,
    weights: list[np.ndarray],
    t_end: float,
    steps: int,
    backend: str | None = None,
) -> np.ndarray:
    """``y(t_end)`` by ``steps`` RK4 steps in a ``graph_scope > repeat(steps)``."""
    h = t_end / steps
    y_host = y0.copy()
    with stf.stackable_context(backend=backend) as sctx:
        y = sctx.logical_data(y_host, name="y")
        W = [
            sctx.logical_data(w.copy(), name=n)
            for w, n in zip(weights, ("W1", "b1", "W2", "b2"))
        ]
        for w in W:
            w.set_read_only()
        k = [
            sctx.logical_data_empty(y0.shape, np.float64, name=f"k{i + 1}")
            for i in range(4)
        ]
        with sctx.graph_scope():
            with sctx.repeat(steps):
                for i, c in enumerate((0.0, 0.5, 0.5, 1.0)):
                    previous = [k[i - 1].read()] if i else []
                    with sctx.task(
                        k[i].write(), y.read(), *previous, *(w.read() for w in W)
                    ) as t:
                        t.run(_rk4_stage(c, h))
                with sctx.task(y.rw(), *(ki.read() for ki in k)) as t:
                    t.run(_rk4_update(h))
    return y_host


def rk4_reference(
    y0: np.ndarray, weights: list[np.ndarray], t_end: float, steps: int
) -> np.ndarray:
    h = t_end / steps
    y = y0.copy()
    for _ in range(steps):
        k1 = field(np, y, *weights)
        k2 = field(np, y + (0.5 * h) * k1, *weights)
        k3 = field(np, y + (0.5 * h) * k2, *weights)
        k4 = field(np, y + (1.0 * h) * k3, *weights)
        y += (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return y


# -- DOPRI5 --------------------------------------------------------------------------------------

# The Dormand-Prince 5(4) tableau: A[i] are the weights of k_1..k_i in stage i + 1, B
# the 5th-order weights (= A[6], so the 7th stage is f(y_new)), E = B - B* (the 4th-order
# embedded solution's weights), the error estimate's weights.
A = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
]
E = [71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40]
T, H, LEFT = 0, 1, 2  # the step state: t, h, t_end - t
ACCEPTED, REJECTED = 0, 1  # the step counters


def _combination(weights: list[float], K: Any) -> Any:
    total = None
    for w, k in zip(weights, K):
        if w:
            total = w * k if total is None else total + w * k
    return total


def _dopri_stage(i: int) -> Any:
    """The body of stage ``i``: ``K[i] = f(y + h sum_j A[i][j] K[j])``."""

    def body(
        xp: Any, K: Any, y: Any, state: Any, W1: Any, b1: Any, W2: Any, b2: Any
    ) -> None:
        point = y if i == 0 else y + state[H] * _combination(A[i], K)
        K[i] = field(xp, point, W1, b1, W2, b2)

    return body


def _dopri_control(t_end: float, rtol: float, atol: float) -> Any:
    """The body that accepts or rejects the step and picks the next step size."""

    def body(
        xp: Any, y: Any, state: Any, left: Any, counts: Any, taken: Any, K: Any
    ) -> None:
        h = state[H] + 0.0  # a copy (on CuPy, state[H] is a view)
        y_new = y + h * _combination(A[6], K)
        err = h * _combination(E, K)
        scale = atol + rtol * xp.maximum(xp.abs(y), xp.abs(y_new))
        norm = xp.sqrt(xp.mean((err / scale) ** 2))
        accept = norm <= 1.0
        factor = xp.clip(0.9 * xp.maximum(norm, 1e-10) ** -0.2, 0.2, 10.0)
        y[...] = xp.where(accept, y_new, y)
        t_new = xp.where(accept, state[T] + h, state[T])
        state[T] = t_new
        state[H] = xp.minimum(h * factor, t_end - t_new)
        left[...] = t_end - t_new
        counts[ACCEPTED] += accept.astype(counts.dtype)
        counts[REJECTED] += (~accept).astype(counts.dtype)
        taken += 1

    return body


def dopri5(
    y0: np.ndarray,
    weights: list[np.ndarray],
    t_end: float,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    max_steps: int = 10_000,
    backend: str | None = None,
) -> tuple[np.ndarray, int, int]:
    """``y(t_end)`` by adaptive Dormand-Prince steps in a ``while_loop``; returns it with
    the accepted and rejected step counts."""
    y_host = y0.copy()
    counts_host = np.zeros(2, dtype=np.int64)
    with stf.stackable_context(backend=backend) as sctx:
        y = sctx.logical_data(y_host, name="y")
        counts = sctx.logical_data(counts_host, name="steps")
        W = [
            sctx.logical_data(w.copy(), name=n)
            for w, n in zip(weights, ("W1", "b1", "W2", "b2"))
        ]
        for w in W:
            w.set_read_only()
        state = sctx.logical_data(np.array([0.0, t_end / 100, t_end]), name="t_h")
        left = sctx.logical_data_full((1,), t_end, np.float64, name="left")
        taken = sctx.logical_data_zeros((1,), np.int64, name="taken")
        K = sctx.logical_data_empty((7, *y0.shape), np.float64, name="K")
        with sctx.while_loop() as loop:
            for i in range(7):
                with sctx.task(
                    K.rw(), y.read(), state.read(), *(w.read() for w in W)
                ) as t:
                    t.run(_dopri_stage(i))
            with sctx.task(
                y.rw(), state.rw(), left.write(), counts.rw(), taken.rw(), K.read()
            ) as t:
                t.run(_dopri_control(t_end, rtol, atol))
            loop.continue_while(
                (left > 1e-12 * max(1.0, abs(t_end))) & (taken < max_steps)
            )
    return y_host, int(counts_host[ACCEPTED]), int(counts_host[REJECTED])


def dopri5_reference(
    y0: np.ndarray,
    weights: list[np.ndarray],
    t_end: float,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    max_steps: int = 10_000,
) -> tuple[np.ndarray, int, int]:
    """The same integration as a host loop in NumPy."""
    y = y0.copy()
    state = np.array([0.0, t_end / 100, t_end])
    left = np.array([t_end])
    counts = np.zeros(2, dtype=np.int64)
    taken = np.zeros(1, dtype=np.int64)
    K = np.empty((7, *y0.shape))
    control = _dopri_control(t_end, rtol, atol)
    for _ in range(max_steps):
        for i in range(7):
            _dopri_stage(i)(np, K, y, state, *weights)
        control(np, y, state, left, counts, taken, K)
        if not left[0] > 1e-12 * max(1.0, abs(t_end)):
            break
    return y, int(counts[ACCEPTED]), int(counts[REJECTED])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16, help="states integrated at once")
    parser.add_argument("--hidden", type=int, default=32, help="hidden units of the MLP")
    parser.add_argument(
        "--t-end", type=float, default=2.0, help="integrate over [0, t_end]"
    )
    parser.add_argument("--rk4-steps", type=int, default=100, help="RK4 steps")
    parser.add_argument(
        "--rtol", type=float, default=1e-6, help="DOPRI5 relative tolerance"
    )
    parser.add_argument(
        "--atol", type=float, default=1e-8, help="DOPRI5 absolute tolerance"
    )
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    weights = make_weights(args.hidden)
    y0 = make_states(args.batch)
    truth = rk4_reference(y0, weights, args.t_end, 20 * args.rk4_steps)

    start = time.perf_counter()
    y_rk4 = rk4(y0, weights, args.t_end, args.rk4_steps, backend)
    rk4_time = time.perf_counter() - start
    start = time.perf_counter()
    y_dp, accepted, rejected = dopri5(
        y0, weights, args.t_end, args.rtol, args.atol, backend=backend
    )
    dp_time = time.perf_counter() - start

    rk4_vs_numpy = float(
        np.max(np.abs(y_rk4 - rk4_reference(y0, weights, args.t_end, args.rk4_steps)))
    )
    y_dp_ref, accepted_ref, rejected_ref = dopri5_reference(
        y0, weights, args.t_end, args.rtol, args.atol
    )
    dp_vs_numpy = float(np.max(np.abs(y_dp - y_dp_ref)))
    rk4_error = float(np.max(np.abs(y_rk4 - truth)))
    dp_error = float(np.max(np.abs(y_dp - truth)))
    scale = float(np.max(np.abs(truth)))
    tolerance = args.rtol * scale + args.atol
    # RK4: the same steps as NumPy's, and no farther from the fine solution than a
    # 4th-order method with this step can be. DOPRI5: the same as NumPy's up to
    # rounding (on CUDA a borderline accept/reject may differ: then within the
    # tolerance), and within the tolerance's reach of the fine solution.
    ok_rk4 = rk4_vs_numpy < 1e-10 and rk4_error < 1e-2 * max(1.0, scale)
    ok_dp = (
        dp_vs_numpy < max(1e-8, 10 * tolerance)
        and abs(accepted - accepted_ref) <= 2
        and dp_error < 100 * tolerance
    )
    print(
        f"RK4:    {args.rk4_steps} steps in {rk4_time:.2f} s; vs NumPy {rk4_vs_numpy:.1e}, "
        f"vs a fine solution {rk4_error:.1e}"
    )
    print(
        f"DOPRI5: {accepted} accepted + {rejected} rejected steps (NumPy: "
        f"{accepted_ref} + {rejected_ref}) in {dp_time:.2f} s; vs NumPy "
        f"{dp_vs_numpy:.1e}, vs a fine solution {dp_error:.1e}"
    )
    ok = ok_rk4 and ok_dp
    print(
        f"{'PASS' if ok else 'FAIL'}: neural ODE, batch {args.batch}, "
        f"hidden {args.hidden}, t in [0, {args.t_end}]"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
