"""The first hour of a new user (issue 14, items 1, 3 and 7): the mistakes a newcomer
makes get a clear message, and what they look at (tracebacks, warnings, reprs, the
DOT graph, the trace) says what happened."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from helpers.bodies import add_to, fill_with

import stflow as stf
from stflow.errors import BufferOverlapError, ScopeError, ShapeError
from stflow.instrument import DotRecorder, TraceRecorder

# -- item 1: a tuple of views whatever the number of dependencies -------------------


def test_views_is_a_tuple_for_zero_one_and_two_dependencies(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        y = ctx.logical_data(np.zeros(4))
        token = ctx.token()
        with ctx.task(x.rw()) as t:
            (view,) = t.views()
            assert view is t.get_arg_cai(0) is t.args_cai()
        with ctx.task(x.read(), token.rw(), y.rw()) as t:
            views = t.views()
            assert views == (t.get_arg_cai(0), t.get_arg_cai(2))
            assert views == t.args_cai()
        with ctx.task(token.rw()) as t:
            assert t.views() == ()
            assert t.args_cai() is None


def test_views_on_cuda_kernel_and_stackable_task(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        with ctx.cuda_kernel(x.rw()) as k:
            (view,) = k.views()
            assert view is k.get_arg_cai(0)
    with stf.stackable_context(backend=backend) as sctx:
        x = sctx.logical_data(np.zeros(4))
        y = sctx.logical_data(np.zeros(4))
        with sctx.task(x.read(), y.rw()) as t:
            assert len(t.views()) == 2
            fill_with(t, 1, 3.0)
        assert isinstance(t, stf.stackable_task)


def test_views_outside_the_task_is_a_scope_error(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        t = ctx.task(x.rw())
        with pytest.raises(ScopeError, match=r"views\(\)"):
            t.views()
        t.start()
        t.end()
        with pytest.raises(ScopeError, match=r"views\(\)"):
            t.views()


def test_a_single_view_used_as_a_tuple_names_views(backend):
    with stf.context(backend=backend) as ctx:
        x = ctx.logical_data(np.zeros(4))
        with ctx.task(x.rw()) as t:
            view = t.args_cai()
            with pytest.raises(TypeError, match=r"one view.*task\.views\(\)"):
                (_,) = view
            with pytest.raises(TypeError, match=r"args_cai\(\) returns the bare view"):
                print(*t.args_cai())
            with pytest.raises(TypeError, match=r"task\.views\(\)"):
                len(view)
            assert view  # still true, as before __len__
            add_to(t, 0, None, 1.0)
        assert ctx.wait(x).tolist() == [1.0] * 4


def test_a_plain_stf_cai_is_not_a_sequence_either():
    view = stf.stf_cai(0x1000, (3,), np.float32)
    with pytest.raises(TypeError, match="not a tuple of views"):
        list(view)
    assert view["shape"] == (3,)


# -- item 3: overlapping registrations and ndarray subclasses ------------------------


def test_registering_one_array_twice_is_an_error(backend):
    a = np.zeros(8)
    with stf.context(backend=backend) as ctx:
        first = ctx.logical_data(a, name="first")
        with pytest.raises(
            BufferOverlapError, match=r"is the buffer of logical data 'first'.*existing"
        ):
            ctx.logical_data(a)
        with pytest.raises(BufferOverlapError, match="overlaps the buffer"):
            ctx.logical_data(a[6:])
        assert first.shape == (8,)  # alive until here
    assert issubclass(BufferOverlapError, ValueError)


def test_overlapping_slices_are_an_error_and_disjoint_ones_are_not(backend):
    a = np.arange(12.0)
    with stf.context(backend=backend) as ctx:
        low = ctx.logical_data(a[:6])
        high = ctx.logical_data(a[6:])  # touching, not overlapping
        with pytest.raises(BufferOverlapError):
            ctx.logical_data(a[5:7])
        with ctx.task(low.rw(), high.rw()) as t:
            add_to(t, 0, None, 1.0)
            add_to(t, 1, None, 2.0)
    assert a.tolist() == [n + 1.0 for n in range(6)] + [n + 2.0 for n in range(6, 12)]


def test_overlapping_read_only_buffers_are_allowed(backend):
    table = np.arange(8.0)
    table.setflags(write=False)
    out = np.zeros(8)
    with stf.context(backend=backend) as ctx:
        whole = ctx.logical_data(table)
        again = ctx.logical_data(table)
        part = ctx.logical_data(table[2:])
        result = ctx.logical_data(out)
        with ctx.task(whole.read(), again.read(), part.read(), result.rw()) as t:
            add_to(t, 3, 0, 1.0)
    assert out.tolist() == table.tolist()


def test_a_writable_view_of_read_only_registered_memory_is_an_error(backend):
    a = np.zeros(4)
    frozen = a.view()
    frozen.setflags(write=False)
    with stf.context(backend=backend) as ctx:
        kept = ctx.logical_data(frozen)
        with pytest.raises(BufferOverlapError):
            ctx.logical_data(a)
        assert kept.shape == (4,)


@pytest.mark.parametrize("fence", [False, True])
def test_a_buffer_is_free_again_once_its_data_is_collected(backend, fence):
    a = np.zeros(4)
    with stf.context(backend=backend) as ctx:
        first = ctx.logical_data(a)
        with ctx.task(stf.exec_place.device(0), first.rw()) as t:
            fill_with(t, 0, 5.0)
        del first, t
        gc.collect()
        if fence:
            ctx.fence()  # drains the retired data (its write-back)
        again = ctx.logical_data(a)  # starts from the written-back value
        with ctx.task(stf.exec_place.device(0), again.rw()) as t:
            add_to(t, 0, None, 1.0)
    assert a.tolist() == [6.0] * 4
    with stf.context(backend=backend) as ctx:
        ctx.logical_data(a)  # another context: no conflict


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: np.ma.masked_array([1.0, 2.0], mask=[False, True]), r"mask.*filled"),
        (lambda: np.zeros((1, 2)).view(np.matrix), r"numpy\.matrix.*asarray"),
    ],
)
def test_subclasses_that_would_lose_meaning_are_refused(backend, make, match):
    with stf.context(backend=backend) as ctx:
        with pytest.raises(TypeError, match=match):
            ctx.logical_data(make())


def test_other_subclasses_are_refused_and_plain_byte_subclasses_accepted(
    backend, tmp_path
):
    class Tagged(np.ndarray):
        pass

    mapped = np.memmap(tmp_path / "m.bin", dtype=np.float64, mode="w+", shape=(4,))
    records = np.zeros(2, dtype=[("a", "f8")]).view(np.recarray)
    with stf.context(backend=backend) as ctx:
        with pytest.raises(TypeError, match=r"Tagged.*numpy\.asarray\(buf\)"):
            ctx.logical_data(np.zeros(3).view(Tagged))
        lm = ctx.logical_data(mapped)
        ctx.logical_data(records)
        with ctx.task(lm.rw()) as t:
            fill_with(t, 0, 7.0)
    assert mapped.tolist() == [7.0] * 4


# -- item 7: modules, warnings, reprs ------------------------------------------------


def test_exceptions_report_the_public_module():
    for name in stf.errors.__all__:
        assert getattr(stf.errors, name).__module__ == "stflow.errors", name
    error = pickle.loads(pickle.dumps(ShapeError("bad shape")))
    assert type(error) is ShapeError and str(error) == "bad shape"


def test_unfinalized_context_warnings_point_at_the_users_line(backend):
    a = np.zeros(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctx = stf.context(backend=backend)
        x = ctx.logical_data(a)
        with ctx.task(x.rw()) as t:
            fill_with(t, 0, 1.0)
        del ctx, x, t
        gc.collect()
    unfinalized = [
        w for w in caught if issubclass(w.category, stf.errors.UnfinalizedContextWarning)
    ]
    assert unfinalized, [str(w.message) for w in caught]
    assert all(w.filename == __file__ for w in unfinalized)
    assert a.tolist() == [0.0] * 4


def test_the_backend_notice_points_at_the_users_line(tmp_path):
    script = tmp_path / "first_program.py"
    script.write_text(
        textwrap.dedent("""\
        import warnings
        import stflow as stf
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ctx = stf.stackable_context()
            ctx.finalize()
        notices = [w for w in caught if w.category is stf.errors.BackendNotice]
        print(ctx.backend, [(w.filename, w.lineno) for w in notices])
        """)
    )
    env = {k: v for k, v in os.environ.items() if k != "STFLOW_BACKEND"}
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    backend, _, located = result.stdout.strip().partition(" ")
    if backend == "cuda":
        pytest.skip("a usable GPU: 'auto' gives no notice")
    assert located == repr([(str(script), 5)])


def test_warn_user_skips_every_stflow_frame():
    from stflow._core.errors import warn_user

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_user("notice", UserWarning)
        line = _line() - 1  # the line of the call above
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def _line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def test_reprs_name_modes_and_finalized_contexts(backend):
    ctx = stf.context(backend=backend)
    x = ctx.logical_data(np.zeros(2), name="x")
    assert repr(x.rw()).endswith(", 'rw', None)")
    assert ", 'read', " in repr(x.read())
    assert ", 'write', " in repr(x.write())
    assert "'reduce(max)'" in repr(x.reduce("max"))
    assert "finalized" not in repr(ctx)
    ctx.finalize()
    assert repr(ctx).endswith(", finalized)")
    sctx = stf.stackable_context(backend=backend)
    assert "finalized" not in repr(sctx)
    sctx.finalize()
    assert repr(sctx).endswith(", finalized)")


# -- item 7: the DOT graph and the trace ---------------------------------------------


def _loop_program(backend):
    dot, trace = DotRecorder(), TraceRecorder()
    a = np.zeros(4)
    with stf.stackable_context(backend=backend) as sctx:
        sctx.attach(dot)
        sctx.attach(trace)
        x = sctx.logical_data(a, name="x")
        y = sctx.logical_data(np.ones(4), name="y")
        with sctx.task(x.rw(), symbol="init") as t:
            fill_with(t, 0, 1.0)
        with sctx.repeat(3):
            with sctx.task(x.rw(), y.read(), symbol="step") as t:
                add_to(t, 0, 1, 1.0)
        sctx.fence()
        with sctx.task(x.read(), symbol="after"):
            pass
    return dot, trace, a


def test_dot_draws_loop_bodies_as_clusters_and_fences(backend):
    dot, _, a = _loop_program(backend)
    assert a.tolist() == [4.0] * 4
    text = dot.to_dot()
    cluster = text[text.index("subgraph cluster_") :]
    cluster = cluster[: cluster.index("}")]
    assert 'label="repeat(3)"' in cluster
    assert "task 'step'" in cluster and "task 'init'" not in cluster
    step = next(r.ident for r in dot.records if r.label == "task 'step'")
    assert 'wf1 [label="fence", shape=octagon' in text
    assert f"w{step} -> wf1;" in text


def test_dot_draws_waits_after_the_writer(backend):
    dot = DotRecorder()
    with stf.context(backend=backend) as ctx:
        ctx.attach(dot)
        x = ctx.logical_data(np.zeros(4), name="x")
        with ctx.task(x.rw(), symbol="fill") as t:
            fill_with(t, 0, 2.0)
        assert ctx.wait(x).tolist() == [2.0] * 4
    text = dot.to_dot()
    fill = next(r.ident for r in dot.records if "fill" in r.label)
    wait = next(ident for ident, label, _ in dot.syncs if label.startswith("wait"))
    assert f"w{wait} [label=\"wait 'x'\", shape=octagon" in text
    assert f"w{fill} -> w{wait};" in text


def test_dot_marks_a_discarded_scope(backend):
    dot = DotRecorder()
    with stf.stackable_context(backend=backend) as sctx:
        sctx.attach(dot)
        x = sctx.logical_data(np.zeros(4), name="x")
        with pytest.raises(RuntimeError, match="boom"):
            with sctx.graph_scope():
                with sctx.task(x.rw(), symbol="lost") as t:
                    fill_with(t, 0, 1.0)
                raise RuntimeError("boom")
    assert 'label="graph_scope (discarded)"; style=dashed;' in dot.to_dot()


def test_the_trace_labels_copies_before_a_loop_as_such(backend):
    _, trace, _ = _loop_program(backend)
    spans = [e for e in trace.to_json()["traceEvents"] if e["ph"] == "X"]
    copies = {e["name"] for e in spans if e["cat"] == "copy"}
    assert "copy before scope 'y'" in copies
    writebacks = {e["name"] for e in spans if e["cat"] == "writeback"}
    assert writebacks <= {"write-back 'x'", "write-back 'y'"}
    assert "write-back 'y'" not in writebacks  # y was only read
