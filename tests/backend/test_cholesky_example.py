"""The tiled Cholesky example (examples/cholesky.py) matches NumPy on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.examples import load_example


def _example():
    return load_example("cholesky")


@pytest.mark.parametrize("n, nb", [(256, 64), (192, 96), (64, 64)])
def test_the_tiled_factor_matches_numpy(backend, n, nb):
    example = _example()
    a = example.spd_matrix(n, seed=n)
    lower, _ = example.cholesky(a, nb, backend)
    np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "options",
    [{}, {"devices": 1}, {"use_graph": True}, {"memory_budget": 4 * 64 * 64 * 8}],
    ids=["stream", "devices", "graph", "budget"],
)
def test_in_place_the_matrix_becomes_its_factor(backend, options):
    """``overwrite_a``: the factor is written into ``a`` itself, its upper
    triangle zeroed (the tiles right of the diagonal zeroed on the devices and
    written back), and ``a`` is returned."""
    example = _example()
    a = example.spd_matrix(256, seed=3)
    expected = np.linalg.cholesky(a)
    a[np.triu_indices(256, 1)] = 7.0  # the upper triangle is not read
    lower, _ = example.cholesky(a, 64, backend, overwrite_a=True, **options)
    assert lower is a
    np.testing.assert_allclose(a, expected, rtol=1e-10, atol=1e-10)
    assert not np.triu(a, 1).any()


def test_graph_mode_on_the_emulated_backend():
    example = _example()
    a = example.spd_matrix(256)
    lower, _ = example.cholesky(a, 64, "emulated", use_graph=True)
    np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)


def test_a_size_that_is_not_a_multiple_of_the_tile_gets_smaller_last_tiles():
    example = _example()
    a = example.spd_matrix(100)
    lower, _ = example.cholesky(a, 64, "emulated")
    np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="square"):
        example.cholesky(np.ones((4, 5)), 2, "emulated")


def test_the_script_says_pass():
    assert _example().main(["--backend", "emulated", "--n", "256", "--nb", "64"]) == 0


def test_runs_prints_the_first_time_and_the_best_of_the_others(capsys, monkeypatch):
    example = _example()
    made = _contexts(example, monkeypatch)
    assert (
        example.main(["--backend", "emulated", "--n", "128", "--nb", "64", "--runs", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert len(made) == 3  # a fresh context per run
    assert "PASS" in out and "first run " in out and ", best of 2 more " in out
    assert example.describe_times([2.0], 1000) == "2.000 s (0.000167 TFLOP/s)"
    assert (
        example.describe_times([3.0, 2.0, 1.0], 1000)
        == "first run 3.000 s (0.000111 TFLOP/s), best of 2 more 1.000 s (0.000333 TFLOP/s)"
    )
    with pytest.raises(SystemExit) as exit_:
        example.main(["--backend", "emulated", "--n", "64", "--nb", "32", "--runs", "0"])
    assert exit_.value.code == 2
    assert "--runs must be at least 1, got 0" in capsys.readouterr().err


def _contexts(example, monkeypatch):
    """The contexts the example creates, kept for their statistics."""
    made = []
    real = example.stf.context

    def context(*args, **kwargs):
        ctx = real(*args, **kwargs)
        made.append(ctx)
        return ctx

    monkeypatch.setattr(example.stf, "context", context)
    return made


@pytest.mark.parametrize("use_graph", [False, True])
def test_tiles_spread_over_two_devices_move_between_them(backend, monkeypatch, use_graph):
    """``devices=2``: the tasks execute on the device of the tile they write, so
    tiles cross between the devices, and the factor is still NumPy's."""
    from stflow.backends import get_backend

    if get_backend(backend).device_count < 2:
        pytest.skip("needs two devices")
    if use_graph and backend != "emulated":
        pytest.skip("graph mode is covered on the emulated backend")
    example = _example()
    made = _contexts(example, monkeypatch)
    a = example.spd_matrix(320, seed=3)
    lower, seconds = example.cholesky(a, 64, backend, use_graph, devices=2)
    np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
    assert seconds > 0
    assert made[-1].statistics().copies_d2d > 0
    one = example.cholesky(a, 64, backend, use_graph, devices=1)[0]
    np.testing.assert_allclose(one, lower, rtol=1e-12, atol=1e-12)
    assert made[-1].statistics().copies_d2d == 0  # one device: nothing crosses


def test_a_device_count_the_backend_lacks_is_refused():
    from stflow.backends import get_backend

    example = _example()
    count = get_backend("emulated").device_count
    with pytest.raises(
        ValueError,
        match=rf"devices must be between 1 and {count} "
        rf"\(the emulated backend's devices\), got "
        rf"{count + 1}",
    ):
        example.cholesky(example.spd_matrix(64), 32, "emulated", devices=count + 1)
    with pytest.raises(SystemExit) as exit_:
        example.main(
            ["--backend", "emulated", "--n", "64", "--nb", "32", "--devices", "-1"]
        )
    assert exit_.value.code == 2
    assert (
        example.main(
            ["--backend", "emulated", "--n", "256", "--nb", "64", "--devices", "2"]
        )
        == 0
    )


def test_settle_returns_once_the_work_on_every_device_completed():
    """``settle`` blocks until the tasks on the tiles ran (``fence()`` does not),
    on every device, and leaves the tiles on their devices."""
    import time

    import stflow as stf

    example = _example()
    ran = []

    def slow(xp, tile):
        time.sleep(0.05)
        tile += 1.0
        ran.append(float(tile[0, 0]))

    with stf.context(backend="emulated") as ctx:
        tiles = {
            (i, 0): ctx.logical_data(np.zeros((2, 2)), name=f"t{i}") for i in range(2)
        }
        for (i, _), tile in tiles.items():
            with ctx.task(stf.exec_place.device(i), tile.rw()) as t:
                t.run(slow)
        before = ctx.statistics().copies_d2h
        example.settle(ctx, tiles, lambda i, j: i)
        assert ran == [1.0, 1.0]
        assert ctx.statistics().copies_d2h == before + 2  # the two flags only
