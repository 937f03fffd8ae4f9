"""Toy homomorphic encryption: arithmetic on encrypted vectors, one task per operation.

    python examples/fhe.py [--n 1000] [--graph] [--backend auto|cuda|emulated]

A ``Ciphertext`` behaves like a number: ``(a + b) * (b - a)`` on ciphertexts builds the
circuit. Each operation is a task that reads its operands' logical data and writes a
new one, so stflow derives the circuit's dependencies from the accesses: ``a + b``
and ``b - a`` only read ``a`` and ``b`` and may run concurrently, the product waits
for both. No stream or event appears in the user's code; with ``--graph`` the same
program is recorded as a CUDA graph (``context(use_graph=True)``).

The scheme (a toy: it hides nothing from anyone who tries) masks every value
multiplicatively modulo the prime ``p = 2^31 - 1``: ``Enc(m) = m s mod p`` with the
secret ``s``. A ciphertext remembers its *degree* ``d`` (it holds ``m s^d``): sums and
differences need operands of equal degree and keep it, products add degrees, and
decryption multiplies by ``s^-d mod p``. The reference's scheme (``Enc(m) = m + k mod
256``, decryption subtracting the key once per operand) supports sums and
differences only; the multiplicative mask makes products work too. Residues stay
below ``2^31``, so a product of two fits in int64.

Bodies are ``t.run(fn, ...)``: ``fn(xp, *arrays)`` with NumPy arrays on the emulated
backend and CuPy arrays on CUDA. The decrypted results are compared with the same
arithmetic on the plaintexts in NumPy.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import stflow as stf

PRIME = 2**31 - 1


class Scheme:
    """A secret ``s`` and the context the ciphertexts' tasks go to."""

    def __init__(self, ctx: Any, secret: int) -> None:
        if not 0 < secret < PRIME:
            raise ValueError(f"the secret must be in (0, {PRIME}), got {secret}")
        self.ctx = ctx
        self.secret = secret

    def encrypt(self, values: np.ndarray, name: str | None = None) -> Ciphertext:
        """A ciphertext of ``values`` (integers in ``[0, p)``), encrypted by a task."""
        plain = np.asarray(values, dtype=np.int64)
        if plain.ndim != 1 or np.any(plain < 0) or np.any(plain >= PRIME):
            raise ValueError(f"plaintexts are 1-D integers in [0, {PRIME})")
        m = self.ctx.logical_data(plain.copy(), name=name)
        c = Ciphertext(self, m.empty_like(), 1, plain.size)
        s = self.secret
        with self.ctx.task(c.data.write(), m.read()) as t:
            t.run(lambda xp, c_, m_: c_.__setitem__(Ellipsis, m_ * s % PRIME))
        return c

    def decrypt(self, c: Ciphertext, out: np.ndarray) -> None:
        """Decrypt ``c`` into the host array ``out`` (valid once the context is
        finalized: ``out`` is logical data written back at the end)."""
        if c.scheme is not self:
            raise ValueError("the ciphertext belongs to another scheme")
        if out.shape != (c.size,) or out.dtype != np.int64:
            raise ValueError(f"out must be int64 of shape ({c.size},)")
        unmask = pow(self.secret, -c.degree, PRIME)
        result = self.ctx.logical_data(out, name="decrypted")
        with self.ctx.task(result.write(), c.data.read()) as t:
            t.run(lambda xp, r, c_: r.__setitem__(Ellipsis, c_ * unmask % PRIME))


class Ciphertext:
    """An encrypted vector: logical data holding ``m s^degree mod p``."""

    def __init__(self, scheme: Scheme, data: Any, degree: int, size: int) -> None:
        self.scheme = scheme
        self.data = data
        self.degree = degree
        self.size = size

    def _check(self, other: Any, same_degree: bool) -> None:
        if other.scheme is not self.scheme:
            raise ValueError("the ciphertexts belong to different schemes")
        if other.size != self.size:
            raise ValueError(f"length mismatch: {self.size} != {other.size}")
        if same_degree and other.degree != self.degree:
            raise ValueError(
                f"degree mismatch: {self.degree} != {other.degree} "
                "(sums need ciphertexts of the same degree)"
            )

    def _binary(self, other: Any, degree: int, body: Any) -> Ciphertext:
        result = Ciphertext(self.scheme, self.data.empty_like(), degree, self.size)
        # Reads both operands, writes a new result: independent operations on the
        # same operands may run concurrently; users of the result wait for it.
        with self.scheme.ctx.task(
            result.data.write(), self.data.read(), other.data.read()
        ) as t:
            t.run(body)
        return result

    def __add__(self, other: Any) -> Ciphertext:
        if not isinstance(other, Ciphertext):
            return NotImplemented
        self._check(other, same_degree=True)
        return self._binary(
            other,
            self.degree,
            lambda xp, r, a, b: r.__setitem__(Ellipsis, (a + b) % PRIME),
        )

    def __sub__(self, other: Any) -> Ciphertext:
        if not isinstance(other, Ciphertext):
            return NotImplemented
        self._check(other, same_degree=True)
        return self._binary(
            other,
            self.degree,
            lambda xp, r, a, b: r.__setitem__(Ellipsis, (a - b) % PRIME),
        )

    def __mul__(self, other: Any) -> Ciphertext:
        if not isinstance(other, Ciphertext):
            return NotImplemented
        self._check(other, same_degree=False)
        return self._binary(
            other,
            self.degree + other.degree,
            lambda xp, r, a, b: r.__setitem__(Ellipsis, a * b % PRIME),
        )


def sum_circuit(a: Any, b: Any) -> Any:
    """The reference's circuit: ``(a + b) + (b - a)`` (``= 2 b``)."""
    return (a + b) + (b - a)


def product_circuit(a: Any, b: Any) -> Any:
    """``(a + b) * (b - a)`` (``= b^2 - a^2``): a product of two ciphertexts."""
    return (a + b) * (b - a)


def plaintext(circuit: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``circuit`` on the plaintexts, in exact integers modulo ``p``."""

    class Mod:
        def __init__(self, v: Any) -> None:
            self.v = v

        def __add__(self, o: Mod) -> Mod:
            return Mod((self.v + o.v) % PRIME)

        def __sub__(self, o: Mod) -> Mod:
            return Mod((self.v - o.v) % PRIME)

        def __mul__(self, o: Mod) -> Mod:
            return Mod(self.v * o.v % PRIME)

    return np.asarray(
        circuit(Mod(a.astype(object)), Mod(b.astype(object))).v, dtype=np.int64
    )


def run(
    a: np.ndarray,
    b: np.ndarray,
    secret: int = 123_456_789,
    backend: str | None = None,
    use_graph: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Encrypt ``a`` and ``b``, evaluate both circuits on the ciphertexts, decrypt;
    returns the decrypted sum and product circuits."""
    sums = np.zeros(len(a), dtype=np.int64)
    products = np.zeros(len(a), dtype=np.int64)
    with stf.context(backend=backend, use_graph=use_graph) as ctx:
        scheme = Scheme(ctx, secret)
        ea, eb = scheme.encrypt(a, name="a"), scheme.encrypt(b, name="b")
        scheme.decrypt(sum_circuit(ea, eb), sums)
        scheme.decrypt(product_circuit(ea, eb), products)
    return sums, products


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="length of the vectors")
    parser.add_argument("--graph", action="store_true", help="record a graph")
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "emulated"])
    args = parser.parse_args(argv)
    backend = None if args.backend == "auto" else args.backend
    rng = np.random.default_rng(0)
    a = rng.integers(0, PRIME, args.n, dtype=np.int64)
    b = rng.integers(0, PRIME, args.n, dtype=np.int64)
    start = time.perf_counter()
    sums, products = run(a, b, backend=backend, use_graph=args.graph)
    elapsed = time.perf_counter() - start
    ok_sum = np.array_equal(sums, plaintext(sum_circuit, a, b))
    ok_product = np.array_equal(products, plaintext(product_circuit, a, b))
    print(
        f"(a + b) + (b - a): {'matches' if ok_sum else 'DIFFERS FROM'} the plaintext "
        f"arithmetic; (a + b) * (b - a): {'matches' if ok_product else 'DIFFERS FROM'} "
        f"it"
    )
    ok = ok_sum and ok_product
    print(
        f"{'PASS' if ok else 'FAIL'}: toy homomorphic arithmetic on {args.n} values "
        f"mod {PRIME} in {elapsed:.3f} s ({'graph' if args.graph else 'stream'} mode)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
