"""The toy homomorphic-encryption example (examples/fhe.py): encrypted sums and
products, one task each, decrypt to the plaintext arithmetic on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example

import stflow as stf


def _example():
    return load_example("fhe")


@pytest.mark.parametrize("use_graph", [False, True], ids=["streams", "graph"])
@pytest.mark.parametrize("length", [1, 5, 257])
def test_the_circuits_decrypt_to_the_plaintext_results(backend, use_graph, length):
    example = _example()
    rng = np.random.default_rng(length)
    a = rng.integers(0, example.PRIME, length, dtype=np.int64)
    b = rng.integers(0, example.PRIME, length, dtype=np.int64)
    sums, products = example.run(a, b, backend=backend, use_graph=use_graph)
    np.testing.assert_array_equal(sums, (2 * b) % example.PRIME)
    np.testing.assert_array_equal(
        products, example.plaintext(example.product_circuit, a, b)
    )


def test_ciphertexts_hide_the_values_and_decrypt_by_degree(backend):
    example = _example()
    a = np.array([0, 1, 2, 3, 40000], dtype=np.int64)
    raw = np.zeros(5, dtype=np.int64)
    cubes = np.zeros(5, dtype=np.int64)
    with stf.context(backend=backend) as ctx:
        scheme = example.Scheme(ctx, 987_654_321)
        ea = scheme.encrypt(a)
        cube = ea * ea * ea
        assert (ea.degree, cube.degree) == (1, 3)
        scheme.decrypt(cube, cubes)
        with ctx.task(ea.data.read(), ctx.logical_data(raw).write()) as t:
            t.run(lambda xp, c, r: r.__setitem__(Ellipsis, c))
    np.testing.assert_array_equal(cubes, a**3 % example.PRIME)
    assert not np.array_equal(raw[1:], a[1:])


def test_mismatched_operands_are_refused(backend):
    example = _example()
    with stf.context(backend=backend) as ctx:
        scheme, other = example.Scheme(ctx, 5), example.Scheme(ctx, 7)
        a = scheme.encrypt(np.arange(3))
        with pytest.raises(ValueError, match="length mismatch"):
            a + scheme.encrypt(np.arange(2))
        with pytest.raises(ValueError, match="degree mismatch"):
            a + a * a
        with pytest.raises(ValueError, match="different schemes"):
            a * other.encrypt(np.arange(3))
        with pytest.raises(ValueError, match="plaintexts"):
            scheme.encrypt(np.array([-1]))


def test_the_script_says_pass(capsys):
    assert _example().main(["--backend", "emulated", "--n", "100"]) == 0
    assert "PASS" in capsys.readouterr().out
