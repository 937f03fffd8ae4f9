"""BiCGSTAB for a non-symmetric system, its scalars in device memory, in a ``while_loop``.

    python examples/bicgstab.py [--n 512] [--tol 1e-10] [--max-iterations 1000]
                                [--stream] [--check-every 5]
                                [--backend auto|cuda|emulated]

BiCGSTAB (van der Vorst, 1992) solves ``A x = b`` for a general square ``A``, where CG
needs ``A`` symmetric positive definite. From ``x = 0``, ``r = r̂ = b``,
``p = v = 0``, ``ρ' = α = ω = 1``, each iteration is::

    ρ = r̂ · r;  β = (ρ / ρ') (α / ω);  p = r + β (p − ω v)
    v = A p;   α = ρ / (r̂ · v);  s = r − α v
    t = A s;   ω = (t · s) / (t · t)
    x += α p + ω s;  r = s − ω t;  ρ' = ρ

Every vector and every scalar (``ρ``, ``ρ'``, ``α``, ``ω``, ``‖r‖²``, the iteration
count) is logical data in device memory, and each line is a task whose body is
``t.run(fn)``: ``fn(xp, *arrays)`` with NumPy on the emulated backend and CuPy on CUDA,
so the same bodies serve both backends and both forms below. ``A`` and ``r̂`` are only
read: in the ``while_loop`` form ``set_read_only()`` imports them into the loop once.

- **while_loop form** (default): a ``stackable_context`` records the iteration once in
  a ``while_loop``; ``continue_while((rr > tol²‖b‖²) & (it < max_iterations))`` lets
  the device decide when to stop (a conditional CUDA graph node on CUDA). The host
  never waits inside the loop.
- **stream form** (``--stream``): a plain ``context`` in stream mode; the host submits
  ``--check-every`` iterations, reads ``‖r‖²`` with ``ctx.wait`` and decides.

The scalar divisions return 0 on a zero denominator, so the iterations the stream form
may run after convergence (and a breakdown) leave ``x`` as it is instead of filling it
with NaN. The answer is checked against ``numpy.linalg.solve``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import stflow as stf
from stflow import linalg


def _ratio(xp: Any, num: Any, den: Any) -> Any:
    """``num / den``, 0 where ``den`` is 0 (device-side; no host read)."""
    nonzero = den != 0
    return xp.where(nonzero, num / xp.where(nonzero, den, 1.0), 0.0)


# Task bodies: fn(xp, *arrays), enqueued in the task's stream order by t.run.
# Products go through stflow.linalg (NumPy; cuBLAS on CUDA, which graph mode can record
# where CuPy's own dot and @ refuse), the results staying in device memory.
def _dot(xp: Any, a: Any, b: Any, out: Any) -> None:
    linalg.dot(a, b, out)


def _matvec(xp: Any, A: Any, v: Any, out: Any) -> None:
    linalg.gemv(A, v, out)


def _dot_of(xp: Any, a: Any, b: Any) -> Any:
    """``a · b`` as a one-element array of ``xp``."""
    out = xp.empty(1, dtype=a.dtype)
    linalg.dot(a, b, out)
    return out


def _direction(
    xp: Any, p: Any, r: Any, v: Any, rho: Any, rho_prev: Any, alpha: Any, omega: Any
) -> None:
    beta = _ratio(xp, rho, rho_prev) * _ratio(xp, alpha, omega)
    p[...] = r + beta * (p - omega * v)


def _alpha(xp: Any, rhat: Any, v: Any, rho: Any, alpha: Any) -> None:
    alpha[...] = _ratio(xp, rho, _dot_of(xp, rhat, v))


def _half_step(xp: Any, s: Any, r: Any, v: Any, alpha: Any) -> None:
    s[...] = r - alpha * v


def _omega(xp: Any, t: Any, s: Any, omega: Any) -> None:
    omega[...] = _ratio(xp, _dot_of(xp, t, s), _dot_of(xp, t, t))


def _update_x(xp: Any, x: Any, p: Any, s: Any, alpha: Any, omega: Any) -> None:
    x += alpha * p + omega * s


def _update_r(xp: Any, r: Any, rr: Any, s: Any, t: Any, omega: Any) -> None:
    r[...] = s - omega * t
    linalg.dot(r, r, rr)


def _next(xp: Any, rho_prev: Any, it: Any, rho: Any) -> None:
    rho_prev[...] = rho
    it += 1


class _State:
    """The logical data of the solver, in one context (plain or stackable)."""

    def __init__(
        self,
        ctx: Any,
        A: np.ndarray,
        b: np.ndarray,
        x: np.ndarray,
        it: np.ndarray,
        rr: np.ndarray,
    ) -> None:
        n = b.size
        vector = np.float64
        self.A = ctx.logical_data(A, name="A")
        self.x = ctx.logical_data(x, name="x")  # written back at the end
        self.it = ctx.logical_data(it, name="it")  # iterations run
        self.r = ctx.logical_data(b.astype(vector), name="r")  # x = 0: r = b
        self.rhat = ctx.logical_data(b.astype(vector), name="rhat")
        self.p = ctx.logical_data(np.zeros(n), name="p")
        self.v = ctx.logical_data(np.zeros(n), name="v")
        self.s = ctx.logical_data_empty((n,), vector, name="s")
        self.t = ctx.logical_data_empty((n,), vector, name="t")
        self.rho = ctx.logical_data_empty((1,), vector, name="rho")
        self.rho_prev = ctx.logical_data(np.ones(1), name="rho_prev")
        self.alpha = ctx.logical_data(np.ones(1), name="alpha")
        self.omega = ctx.logical_data(np.ones(1), name="omega")
        self.rr = ctx.logical_data(rr, name="rr")  # ‖r‖², = b · b


def _iteration(ctx: Any, d: _State) -> None:
    """Submit one BiCGSTAB iteration (10 tasks)."""
    with ctx.task(d.rhat.read(), d.r.read(), d.rho.write(), symbol="rho") as t:
        t.run(_dot)
    with ctx.task(
        d.p.rw(),
        d.r.read(),
        d.v.read(),
        d.rho.read(),
        d.rho_prev.read(),
        d.alpha.read(),
        d.omega.read(),
        symbol="p",
    ) as t:
        t.run(_direction)
    with ctx.task(d.A.read(), d.p.read(), d.v.write(), symbol="v = A p") as t:
        t.run(_matvec)
    with ctx.task(
        d.rhat.read(), d.v.read(), d.rho.read(), d.alpha.write(), symbol="alpha"
    ) as t:
        t.run(_alpha)
    with ctx.task(d.s.write(), d.r.read(), d.v.read(), d.alpha.read(), symbol="s") as t:
        t.run(_half_step)
    with ctx.task(d.A.read(), d.s.read(), d.t.write(), symbol="t = A s") as t:
        t.run(_matvec)
    with ctx.task(d.t.read(), d.s.read(), d.omega.write(), symbol="omega") as t:
        t.run(_omega)
    with ctx.task(
        d.x.rw(), d.p.read(), d.s.read(), d.alpha.read(), d.omega.read(), symbol="x"
    ) as t:
        t.run(_update_x)
    with ctx.task(
        d.r.write(), d.rr.write(), d.s.read(), d.t.read(), d.omega.read(), symbol="r"
    ) as t:
        t.run(_update_r)
    with ctx.task(d.rho_prev.write(), d.it.rw(), d.rho.read(), symbol="next") as t:
        t.run(_next)


def solve(
    A_host: np.ndarray,
    b_host: np.ndarray,
    tol: float = 1e-10,
    max_iterations: int = 1000,
    backend: str | None = None,
    stream: bool = False,
    check_every: int = 5,
) -> tuple[np.ndarray, int, float]:
    """``x`` with ``A x = b``, the iterations run and the last residual ``‖r‖ / ‖b‖``.

    Stops once ``‖r‖ ≤ tol · ‖b‖`` or after ``max_iterations``: decided by the device in
    a ``while_loop``, or with ``stream=True`` by the host reading ``‖r‖²`` after every
    ``check_every`` iterations (it then runs a multiple of ``check_every``
    iterations, or ``max_iterations``).
    """
    n = b_host.size
    if A_host.shape != (n, n):
        raise ValueError(f"A must be {n}x{n} to match b, got shape {A_host.shape}")
    if max_iterations < 1 or check_every < 1:
        raise ValueError(
            f"max_iterations and check_every must be at least 1, got "
            f"{max_iterations} and {check_every}"
        )
    b_squared = float(b_host @ b_host) or 1.0
    x_host = np.zeros(n)
    it_host = np.zeros(1, dtype=np.int64)
    rr_host = np.array([float(b_host @ b_host)])  # these three are written back
    if stream:
        with stf.context(backend=backend) as ctx:
            d = _State(ctx, A_host, b_host, x_host, it_host, rr_host)
            done = 0
            while done < max_iterations:
                for _ in range(min(check_every, max_iterations - done)):
                    _iteration(ctx, d)
                    done += 1
                if ctx.wait(d.rr)[0] <= tol * tol * b_squared:  # the host blocks here
                    break
    else:
        with stf.stackable_context(backend=backend) as sctx:
            d = _State(sctx, A_host, b_host, x_host, it_host, rr_host)
            d.A.set_read_only()  # copied to the device once
            d.rhat.set_read_only()
            with sctx.while_loop() as loop:
                _iteration(sctx, d)
                loop.continue_while(
                    (d.rr > tol * tol * b_squared) & (d.it < max_iterations)
                )
    return x_host, int(it_host[0]), float(np.sqrt(rr_host[0] / b_squared))


def nonsymmetric_system(n: int, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """A dense non-symmetric ``A`` (1-D convection–diffusion plus random coupling) and
    a random ``b``.

    ``A = T + C`` where ``T`` is the upwind discretisation of ``−u'' + 40 u'`` on ``n``
    points of [0, 1] scaled by ``h²`` (a non-symmetric tridiagonal matrix) and ``C`` a
    small random dense matrix: a system CG does not apply to, which BiCGSTAB solves in a few
    dozen to a few hundred iterations.
    """
    rng = np.random.default_rng(seed)
    h = 1.0 / (n + 1)
    peclet = 40.0 * h
    A = np.zeros((n, n))
    i = np.arange(n)
    A[i, i] = 2.0 + peclet + 0.05
    A[i[1:], i[:-1]] = -1.0 - peclet
    A[i[:-1], i[1:]] = -1.0
    A += rng.uniform(-1.0, 1.0, (n, n)) * (0.3 / n)
    return A, rng.standard_normal(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512, help="matrix size")
    parser.add_argument(
        "--tol", type=float, default=1e-10, help="stop when |r| <= tol |b|"
    )
    parser.add_argument("--max-iterations", type=int, default=1000)
    parser.add_argument(
        "--stream",
        action="store_true",
        help="stream mode: the host reads |r| every --check-every iterations",
    )
    parser.add_argument("--check-every", type=int, default=5)
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    A, b = nonsymmetric_system(args.n)
    start = time.perf_counter()
    x, iterations, residual = solve(
        A, b, args.tol, args.max_iterations, backend, args.stream, args.check_every
    )
    elapsed = time.perf_counter() - start
    error = float(np.linalg.norm(x - np.linalg.solve(A, b)) / np.linalg.norm(x))
    true_residual = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    ok = bool(residual <= args.tol and true_residual <= 10 * args.tol and error < 1e-6)
    form = (
        f"stream mode, |r| read every {args.check_every}" if args.stream else "while_loop"
    )
    print(
        f"{'PASS' if ok else 'FAIL'}: BiCGSTAB n={args.n}, {iterations} iterations "
        f"({form}), |b - A x|/|b| = {true_residual:.2e}, relative error vs "
        f"numpy.linalg.solve {error:.2e}, {elapsed:.2f} s"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
