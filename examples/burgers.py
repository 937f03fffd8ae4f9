"""1-D viscous Burgers equation with implicit time steps, every loop on the device.

    python examples/burgers.py [--n 128] [--outer 5] [--substeps 10] [--nu 0.02]
                               [--backend auto|cuda|emulated]

The equation ``u_t + u u_x = nu u_xx`` on ``[0, 1]`` with ``u = 0`` at both ends and
``u(x, 0) = sin(pi x)`` is discretised with central differences on ``n`` points and
backward Euler in time. Each time step solves the nonlinear system

    F_i(U) = (U_i - P_i) / dt + U_i (U_{i+1} - U_{i-1}) / 2h
             - nu (U_{i-1} - 2 U_i + U_{i+1}) / h^2 = 0        (P: the previous step)

by Newton's method: ``J(U) d = -F(U)``, ``U += d``, where the Jacobian ``J`` is
tridiagonal (stored as three bands) and the linear system is solved by BiCGSTAB
(non-symmetric). The scopes nest as in the reference's Burger example::

    stackable_context
      repeat(outer)                       one snapshot of U per outer iteration
        graph_scope
          repeat(substeps)                one time step per iteration
            while_loop  (Newton)          until |F(U)|^2 <= tol^2 or the cap
              tasks: F, J, ...
              while_loop  (BiCGSTAB)      until |r|^2/|b|^2 <= tol^2 or the cap
                tasks: dot products, tridiagonal products, updates
          task: snapshot U into row k of a device array (k: a device counter)

Python runs each scope body once, to record it; the device repeats it. Every scalar
that steers a loop (the residual norms, the iteration counters, the snapshot index)
is one-element logical data written by a task, and ``continue_while`` tests it on the
device, so the host never waits inside the time loop. A body is ``t.run(fn,
...)``: ``fn(xp, *arrays)`` with NumPy arrays on the emulated backend and CuPy arrays
on CUDA, element-wise array math only (no host reads of results). The data made
inside the Newton body (the residual, the Newton update) are ``no_export``
temporaries of that body.

The answer is checked against a NumPy run of the same scheme (the same F and J,
Newton to the same tolerance, the linear systems solved by ``numpy.linalg.solve``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import stflow as stf

NEWTON_TOL = 1e-10
LINEAR_TOL = 1e-10


def _dot(a: Any, b: Any) -> Any:
    """``a . b`` as a 0-d array of the arrays' module (a reduction kernel on CuPy)."""
    return (a * b).sum()


def _tridiagonal_product(J: Any, x: Any, y: Any) -> None:
    """``y = J x`` with ``J`` as bands ``J[0]`` (lower), ``J[1]`` (diagonal),
    ``J[2]`` (upper)."""
    y[...] = J[1] * x
    y[1:] += J[0, 1:] * x[:-1]
    y[:-1] += J[2, :-1] * x[1:]


def _residual(F: Any, U: Any, P: Any, h: float, dt: float, nu: float) -> None:
    """``F = F(U)`` (boundary rows: ``F = U``, for ``u = 0``)."""
    u, left, right = U[1:-1], U[:-2], U[2:]
    F[...] = U
    F[1:-1] = (
        (u - P[1:-1]) / dt
        + u * (right - left) / (2.0 * h)
        - nu * (left - 2.0 * u + right) / (h * h)
    )


def _jacobian(J: Any, U: Any, h: float, dt: float, nu: float) -> None:
    """The bands of ``dF/dU``."""
    u, left, right = U[1:-1], U[:-2], U[2:]
    J[...] = 0.0
    J[1, 0] = 1.0
    J[1, -1] = 1.0
    J[0, 1:-1] = -u / (2.0 * h) - nu / (h * h)
    J[1, 1:-1] = 1.0 / dt + (right - left) / (2.0 * h) + 2.0 * nu / (h * h)
    J[2, 1:-1] = u / (2.0 * h) - nu / (h * h)


# -- BiCGSTAB, in a device-side while_loop ------------------------------------------------
# The scalars live in one small array ``sc``: rho, rho_prev, alpha, omega, |b|^2.
RHO, RHO_PREV, ALPHA, OMEGA, BB = range(5)


def _bicgstab_start(
    xp: Any, x: Any, r: Any, rhat: Any, p: Any, v: Any, sc: Any, it: Any, F: Any
) -> None:
    """``x = 0``, ``r = rhat = b = -F``, ``p = v = 0``, the scalars to 1, ``it = 0``."""
    x[...] = 0.0
    r[...] = -F
    rhat[...] = r
    p[...] = 0.0
    v[...] = 0.0
    sc[...] = 1.0
    sc[BB] = _dot(r, r)
    it[...] = 0


def _bicgstab_direction(xp: Any, sc: Any, p: Any, r: Any, rhat: Any, v: Any) -> None:
    """``rho = rhat . r``; ``p = r + beta (p - omega v)``."""
    sc[RHO] = _dot(rhat, r)
    beta = (sc[RHO] / sc[RHO_PREV]) * (sc[ALPHA] / sc[OMEGA])
    p[...] = r + beta * (p - sc[OMEGA] * v)


def _bicgstab_half_step(xp: Any, sc: Any, s: Any, r: Any, rhat: Any, v: Any) -> None:
    """``alpha = rho / (rhat . v)``; ``s = r - alpha v``."""
    sc[ALPHA] = sc[RHO] / _dot(rhat, v)
    s[...] = r - sc[ALPHA] * v


def _bicgstab_omega(xp: Any, sc: Any, t: Any, s: Any) -> None:
    """``omega = (t . s) / (t . t)``; ``rho_prev = rho``."""
    sc[OMEGA] = _dot(t, s) / _dot(t, t)
    sc[RHO_PREV] = sc[RHO]


def _bicgstab_update_x(xp: Any, x: Any, p: Any, s: Any, sc: Any) -> None:
    x += sc[ALPHA] * p + sc[OMEGA] * s


def _bicgstab_update_r(
    xp: Any, r: Any, ratio: Any, it: Any, s: Any, t: Any, sc: Any
) -> None:
    """``r = s - omega t``; ``ratio = |r|^2 / |b|^2``; one more iteration."""
    r[...] = s - sc[OMEGA] * t
    ratio[...] = _dot(r, r) / sc[BB]
    it += 1


def bicgstab(
    sctx: Any, J: Any, x: Any, F: Any, work: dict[str, Any], max_iterations: int
) -> None:
    """Record ``J x = -F`` solved by BiCGSTAB in a ``while_loop`` of the current scope."""
    r, rhat, p, v, s, t = (work[k] for k in ("r", "rhat", "p", "v", "s", "t"))
    sc, ratio, it = work["sc"], work["ratio"], work["it"]
    with sctx.task(
        x.write(),
        r.write(),
        rhat.write(),
        p.write(),
        v.write(),
        sc.write(),
        it.write(),
        F.read(),
    ) as task:
        task.run(_bicgstab_start)
    with sctx.while_loop() as loop:
        with sctx.task(sc.rw(), p.rw(), r.read(), rhat.read(), v.read()) as task:
            task.run(_bicgstab_direction)
        with sctx.task(J.read(), p.read(), v.write()) as task:
            task.run(lambda xp, J_, p_, v_: _tridiagonal_product(J_, p_, v_))
        with sctx.task(sc.rw(), s.write(), r.read(), rhat.read(), v.read()) as task:
            task.run(_bicgstab_half_step)
        with sctx.task(J.read(), s.read(), t.write()) as task:
            task.run(lambda xp, J_, s_, t_: _tridiagonal_product(J_, s_, t_))
        with sctx.task(sc.rw(), t.read(), s.read()) as task:
            task.run(_bicgstab_omega)
        # These two only read what the others wrote: they may run concurrently.
        with sctx.task(x.rw(), p.read(), s.read(), sc.read()) as task:
            task.run(_bicgstab_update_x)
        with sctx.task(
            r.write(), ratio.write(), it.rw(), s.read(), t.read(), sc.read()
        ) as task:
            task.run(_bicgstab_update_r)
        loop.continue_while((ratio > LINEAR_TOL**2) & (it < max_iterations))


# -- Newton, in a device-side while_loop --------------------------------------------------


def newton_step(
    sctx: Any,
    U: Any,
    P: Any,
    J: Any,
    work: dict[str, Any],
    h: float,
    dt: float,
    nu: float,
    max_newton: int,
    max_linear: int,
) -> None:
    """Record one implicit time step: ``P = U``, then Newton until converged."""
    norm2, it, counts = work["newton_norm2"], work["newton_it"], work["counts"]
    with sctx.task(P.write(), it.write(), U.read()) as task:
        task.run(lambda xp, P_, it_, U_: (P_.__setitem__(Ellipsis, U_), it_.fill(0)))
    with sctx.while_loop() as loop:
        F = sctx.logical_data_empty(U.shape, np.float64, name="F", no_export=True)
        d = sctx.logical_data_empty(U.shape, np.float64, name="d", no_export=True)
        with sctx.task(F.write(), U.read(), P.read()) as task:
            task.run(lambda xp, F_, U_, P_: _residual(F_, U_, P_, h, dt, nu))
        with sctx.task(J.write(), U.read()) as task:
            task.run(lambda xp, J_, U_: _jacobian(J_, U_, h, dt, nu))
        bicgstab(sctx, J, d, F, work, max_linear)
        with sctx.task(U.rw(), d.read(), counts.rw(), work["it"].read()) as task:
            task.run(
                lambda xp, U_, d_, c, lin: (
                    U_.__iadd__(d_),
                    c.__setitem__(1, c[1] + lin[0]),
                )
            )
        # Test the residual of the updated U (not the one the step started from).
        with sctx.task(F.write(), U.read(), P.read()) as task:
            task.run(lambda xp, F_, U_, P_: _residual(F_, U_, P_, h, dt, nu))
        with sctx.task(norm2.write(), it.rw(), counts.rw(), F.read()) as task:
            task.run(
                lambda xp, n2, it_, c, F_: (
                    n2.__setitem__(Ellipsis, _dot(F_, F_)),
                    it_.__iadd__(1),
                    c.__setitem__(0, c[0] + 1),
                )
            )
        loop.continue_while((norm2 > NEWTON_TOL**2) & (it < max_newton))


def _snapshot(xp: Any, snaps: Any, k: Any, U: Any) -> None:
    """Row ``k[0]`` of ``snaps`` = ``U`` (a mask, not an index: ``k`` is on the device)."""
    rows = (xp.arange(snaps.shape[0]) == k[0])[:, None]
    snaps[...] = xp.where(rows, U[None, :], snaps)
    k += 1


def initial_condition(n: int) -> np.ndarray:
    x = np.linspace(0.0, 1.0, n)
    u = np.sin(np.pi * x)
    u[0] = u[-1] = 0.0
    return u


def default_dt(n: int, nu: float) -> float:
    h = 1.0 / (n - 1)
    return max(0.5 * h * h / nu, 1e-3)


def run(
    n: int = 64,
    outer: int = 4,
    substeps: int = 5,
    nu: float = 0.05,
    dt: float | None = None,
    backend: str | None = None,
    max_newton: int = 20,
    max_linear: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``outer * substeps`` implicit steps from ``sin(pi x)``; returns the final ``U``,
    the ``(outer, n)`` snapshots (after each ``substeps`` steps) and the Newton and
    BiCGSTAB iteration totals."""
    h = 1.0 / (n - 1)
    dt = default_dt(n, nu) if dt is None else dt
    max_linear = 2 * n if max_linear is None else max_linear
    U_host = initial_condition(n)
    snaps_host = np.zeros((outer, n))
    counts_host = np.zeros(2, dtype=np.int64)
    with stf.stackable_context(backend=backend) as sctx:
        U = sctx.logical_data(U_host, name="U")
        snaps = sctx.logical_data(snaps_host, name="snapshots")
        counts = sctx.logical_data(counts_host, name="iterations")
        snap_k = sctx.logical_data_zeros((1,), np.int64, name="snapshot_index")
        P = sctx.logical_data_empty((n,), np.float64, name="U_prev")
        J = sctx.logical_data_empty((3, n), np.float64, name="J")
        work = {
            name: sctx.logical_data_empty((n,), np.float64, name=name)
            for name in ("r", "rhat", "p", "v", "s", "t")
        }
        work["sc"] = sctx.logical_data_empty((5,), np.float64, name="scalars")
        work["ratio"] = sctx.logical_data_empty((1,), np.float64, name="ratio")
        work["it"] = sctx.logical_data_empty((1,), np.int64, name="linear_it")
        work["newton_norm2"] = sctx.logical_data_empty((1,), np.float64, name="norm2")
        work["newton_it"] = sctx.logical_data_empty((1,), np.int64, name="newton_it")
        work["counts"] = counts
        with sctx.repeat(outer):
            with sctx.graph_scope():
                with sctx.repeat(substeps):
                    newton_step(sctx, U, P, J, work, h, dt, nu, max_newton, max_linear)
                with sctx.task(snaps.rw(), snap_k.rw(), U.read()) as task:
                    task.run(_snapshot)
    return U_host, snaps_host, counts_host


# -- the same scheme in NumPy ---------------------------------------------------------------


def reference(
    n: int = 64,
    outer: int = 4,
    substeps: int = 5,
    nu: float = 0.05,
    dt: float | None = None,
    max_newton: int = 20,
) -> tuple[np.ndarray, np.ndarray]:
    """The same time steps with dense ``numpy.linalg.solve`` Newton updates."""
    h = 1.0 / (n - 1)
    dt = default_dt(n, nu) if dt is None else dt
    U = initial_condition(n)
    snaps = np.zeros((outer, n))
    F = np.empty(n)
    J = np.empty((3, n))
    for k in range(outer):
        for _ in range(substeps):
            P = U.copy()
            for _ in range(max_newton):
                _residual(F, U, P, h, dt, nu)
                _jacobian(J, U, h, dt, nu)
                dense = np.diag(J[1]) + np.diag(J[0, 1:], -1) + np.diag(J[2, :-1], 1)
                U = U + np.linalg.solve(dense, -F)
                _residual(F, U, P, h, dt, nu)
                if F @ F <= NEWTON_TOL**2:
                    break
        snaps[k] = U
    return U, snaps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=128, help="grid points")
    parser.add_argument(
        "--outer", type=int, default=5, help="outer iterations (one snapshot each)"
    )
    parser.add_argument(
        "--substeps", type=int, default=10, help="time steps per outer iteration"
    )
    parser.add_argument("--nu", type=float, default=0.02, help="viscosity")
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    start = time.perf_counter()
    U, snaps, counts = run(args.n, args.outer, args.substeps, args.nu, backend=backend)
    elapsed = time.perf_counter() - start
    U_ref, snaps_ref = reference(args.n, args.outer, args.substeps, args.nu)
    error = float(np.max(np.abs(snaps - snaps_ref)))
    steps = args.outer * args.substeps
    ok = (
        error < 1e-8
        and bool(np.all(np.isfinite(U)))
        and float(np.max(np.abs(U))) < 1.0
        and abs(U[0]) + abs(U[-1]) < 1e-12
    )
    for k in range(args.outer):
        print(f"  step {(k + 1) * args.substeps:4d}: max U = {snaps[k].max():.6f}")
    print(
        f"{'PASS' if ok else 'FAIL'}: Burgers n={args.n}, {steps} implicit steps "
        f"({counts[0]} Newton iterations, {counts[1]} BiCGSTAB iterations) in "
        f"{elapsed:.2f} s; max error vs NumPy {error:.2e}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
