"""The target (toolchain/target.py): its SIMD found from the compiler,
overridden by NEOFLOW_VECTOR_BYTES, and what the schedules make of it --
register tiles within the target's register budget, tuning records kept
apart per width; its threads from OMP_NUM_THREADS (a value OpenMP rejects
falls back, with a warning, to this process's CPUs, as OpenMP does), read at
every target() call (only the compiler's half, native_target(), is cached)."""
import os
import subprocess
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.errors import NeoFlowError
from neoflow.graph import kernels_for
from neoflow.schedule import default_config, sample_config
from neoflow.schedule.default import _register_tile, accumulators, channel_rows, channel_tile
from neoflow.toolchain.compiler import compile_flags, find_compiler
from neoflow.toolchain.target import (ENV, THREADS_ENV, Target, _from_macros, _probe_text,
                                      cpus, native_target, omp_threads, target)
from neoflow.tune.hardware import detect


@pytest.fixture
def width(monkeypatch):
    """Set NEOFLOW_VECTOR_BYTES for one test: width("32")."""
    return lambda w: monkeypatch.setenv(ENV, w)


def _predefined(macro):
    cc = find_compiler()
    flags = [f for f in compile_flags(cc, openmp=False, sanitize=False) if f != "-shared"]
    out = subprocess.run([cc.path, *flags, "-dM", "-E", "-x", "c", os.devnull],
                         capture_output=True, text=True, check=True).stdout
    return f"#define {macro} " in out


def test_native_target_is_what_the_compiler_builds_for(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    t = target()
    assert replace(t, threads=0) == native_target() and not t.overridden
    if _predefined("__AVX512F__"):
        assert (t.vector_bytes, t.vector_registers) == (64, 32)
    elif _predefined("__AVX__"):
        assert (t.vector_bytes, t.vector_registers) == (32, 16)
    else:
        assert t.vector_bytes == 16
    assert t.fma == (_predefined("__FMA__") or _predefined("__ARM_FEATURE_FMA"))


def test_cpu_flags_agree_with_the_detected_width(monkeypatch):
    """On x86 Linux, with -march=native: the kernel's avx512f/avx flags."""
    monkeypatch.delenv(ENV, raising=False)
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    flags = set(text.split("\n\n")[0].split())
    if not {"sse2", "avx", "avx512f"} & flags or "-march=native" not in compile_flags(
            find_compiler(), openmp=False, sanitize=False):
        pytest.skip("not an x86 CPU built for with -march=native")
    expected = 64 if "avx512f" in flags else 32 if "avx" in flags else 16
    assert target().vector_bytes == expected


@pytest.mark.parametrize("macros, expected", [
    ({"__AVX512F__", "__AVX2__", "__AVX__", "__FMA__"}, Target(64, 32, True)),
    ({"__AVX2__", "__AVX__", "__FMA__"}, Target(32, 16, True)),
    ({"__AVX__"}, Target(32, 16, False)),
    ({"__ARM_NEON", "__ARM_FEATURE_FMA"}, Target(16, 32, True)),
    ({"__SSE2__"}, Target(16, 16, False)),
])
def test_levels_from_predefined_macros(macros, expected):
    assert _from_macros(macros) == expected


def test_override_sets_width_and_registers(width):
    width("32")
    t = target()
    assert (t.vector_bytes, t.vector_registers, t.lanes("float32"), t.lanes("float64")) == (
        32, 16, 8, 4)
    assert t.overridden == (native_target().vector_bytes != 32)
    width("64")
    assert (target().vector_bytes, target().vector_registers, target().lanes("float32")) == (
        64, 32, 16)
    assert target().auto_lanes("float32") == 8     # the compiler's own loops stay 256-bit
    width("16")
    assert (target().vector_bytes, target().auto_lanes("float32")) == (16, 4)


@pytest.mark.parametrize("bad", ["48", "avx512", "0"])
def test_bad_override_is_a_clear_error(width, bad):
    width(bad)
    with pytest.raises(NeoFlowError, match=f"{ENV}='{bad}'.*16, 32 or 64"):
        target()


@pytest.mark.parametrize("lanes, registers", [(8, 16), (16, 32), (4, 16)])
def test_register_tiles_fit_the_register_budget(lanes, registers):
    budget = accumulators(registers)
    for v in (1, 3, 7, 8, 15, 16, 17, 33, 56, 64, 100, 1024):
        for u in (1, 2, 5, 6, 13, 14, 29, 64, 1024):
            cols, rows = _register_tile(v, u, lanes, registers)
            vectors = -(-cols // lanes)
            assert 1 <= rows <= u and 1 <= cols <= v and vectors * rows <= budget, (v, u)
    for e in (1, 3, 5, 7, 14, 16, 28, 56, 112):
        vectors, rows = channel_tile(registers, e)
        assert 1 <= rows <= e and vectors * rows <= budget


def _matmul(m, k, n):
    a, b = nf.placeholder((m, k), name="a"), nf.placeholder((k, n), name="b")
    r = nf.reduce_axis(k, name="r")
    return nf.compute((m, n), lambda i, j: nf.sum(a[i, r] * b[r, j], axis=r), name="c")


def _conv(cin, cout, size):
    x = nf.placeholder((2, cin, size, size), name="x")
    w = nf.placeholder((cout, cin, 3, 3), name="w")
    return nf.nn.conv2d(x, w, padding=1)


@pytest.mark.parametrize("bytes_, cols, rows", [("32", 16, 6), ("64", 32, 14)])
def test_default_matmul_tile_follows_the_target(width, bytes_, cols, rows):
    width(bytes_)
    sc = default_config(kernels_for([_matmul(1024, 1024, 1024)])[-1]).stages[0]
    assert sc.tile["s1"] == [cols] and sc.tile["s0"] == [rows] and sc.unroll == {"s0.1": rows}


@pytest.mark.parametrize("bytes_, channels, rows", [("32", 16, 5), ("64", 16, 5)])
def test_default_conv_channel_tile_follows_the_target(width, bytes_, channels, rows):
    """Two vectors of 8 channels with AVX2, one of 16 with AVX-512."""
    width(bytes_)
    sc = default_config(kernels_for([_conv(64, 48, 56)])[-1]).stages[-1]
    assert sc.tile["s1"] == [channels] and sc.vectorize == "s1"
    assert sc.tile["s3"] == [rows] and sc.unroll == {"s3.1": rows}


@pytest.mark.parametrize("bytes_, tile, unroll", [
    ("64", {"s1": [16], "s2": [2], "s3": []}, {"s2.1": 2, "s3.0": 4}),
    ("32", {"s1": [16], "s2": [], "s3": []}, {"s3.0": 4})])
def test_a_short_conv_row_takes_rows_of_the_next_axis(width, bytes_, tile, unroll):
    """A 4x4/2 conv onto 4x4: on AVX-512 the tile is 2 rows x the whole row
    of 4 (8 points, not 4); AVX2 keeps its 2 vectors x 4. Both agree with
    the reference evaluator."""
    width(bytes_)
    x, w = nf.placeholder((3, 16, 8, 8), name="x"), nf.placeholder((32, 16, 4, 4), name="w")
    y = nf.nn.conv2d(x, w, stride=2, padding=1)
    f = nf.build(y, [x, w], database=False)
    sc = f.configs[0].stages[0]
    assert {a: sc.tile[a] for a in tile} == tile and sc.unroll == unroll
    rng = np.random.default_rng(0)
    xv, wv = (rng.standard_normal(t.shape).astype(np.float32) for t in (x, w))
    np.testing.assert_allclose(f(xv, wv), nf.evaluate(y, {x: xv, w: wv}), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bytes_", ["32", "64"])
@pytest.mark.parametrize("size", [28, 10, 4])
def test_a_pooling_window_vectorises_across_rows_shorter_than_a_vector(width, bytes_, size):
    """2x2/2 max pooling onto rows of 14, 5 and 2 points, at 8 and 16
    lanes: the window's loops run around a vector of output points, in a
    parallel loop over the rows (not over every point, as a row reduction
    is); values, and first-maximum positions, agree with the reference."""
    width(bytes_)
    x = nf.placeholder((3, 5, size, size), name="x")
    y = nf.nn.max_pool2d(x, 2)
    f = nf.build(y, [x], database=False)
    sc = f.configs[0].stages[0]
    assert sc.vectorize == "s3" and sc.order[-1] == "s3.0" and sc.parallel <= 3
    xv = np.random.default_rng(size).standard_normal(x.shape).astype(np.float32)
    np.testing.assert_array_equal(f(xv), nf.evaluate(y, {x: xv}))


def test_channel_rows_fill_a_short_tile():
    assert [channel_rows(32, p, 16) for p in (1, 2, 3, 4, 5, 8)] == [8, 4, 2, 2, 1, 1]
    assert channel_rows(32, 4, 3) == 2 and channel_rows(32, 2, 6) == 3   # fewest tails
    assert channel_rows(16, 2, 16) == 1                                  # AVX2: none
    assert channel_tile(32, 8) == (1, 8) and channel_tile(32, 9) == (1, 5)
    # 7 points only where 5 leave a tail that costs TAIL_GAIN more: 14, not 28 or 56
    assert [channel_tile(32, e)[1] for e in (14, 21, 28, 56)] == [7, 7, 5, 5]


def test_an_outer_row_axis_takes_four_points_where_five_leave_a_costly_tail():
    """Rows from the batch (a phase compute whose taps are bounded by every
    spatial axis): 16 = 4 x 4, not 3 x 5 and a tail; 128 keeps 5."""
    assert [channel_tile(32, e, outer=True)[1] for e in (2, 8, 10, 16, 128)] == [2, 4, 5, 4, 5]
    assert [channel_tile(16, e, outer=True)[1] for e in (2, 10, 16, 128)] == [2, 5, 4, 5]  # AVX2


def test_an_avx2_row_takes_three_points_where_five_leave_a_costly_tail():
    """Rows of 6, 9 and 12 (CapsNet's primary conv onto 6x6, its weight
    gradient over 9-wide windows) in tiles of 3; rows of 5, 7, 10 and of the
    ResNet-18 sizes keep 5, four points one tile."""
    assert [channel_tile(16, e)[1] for e in (6, 9, 12)] == [3, 3, 3]
    assert [channel_tile(16, e)[1] for e in (4, 5, 7, 10, 14, 28, 56)] == [4, 5, 5, 5, 5, 5, 5]


@pytest.mark.parametrize("bytes_", ["32", "64"])
def test_a_transposed_convs_bounded_phases_take_rows_from_the_batch(width, bytes_):
    width(bytes_)
    x, w = nf.placeholder((16, 32, 4, 4), name="x"), nf.placeholder((32, 32, 4, 4), name="w")
    y = nf.nn.conv_transpose2d(x, w, stride=2, padding=1)
    kernel, = [k for k in kernels_for([y]) if k.stages[0].name == "dconv_transpose2d_phases"]
    assert kernel.stages[0].op.body.cond is not None       # taps bounded by the positions
    sc = default_config(kernel).stages[0]
    assert sc.vectorize == "s1" and sc.tile["s0"] == [4] and sc.unroll == {"s0.1": 4}
    rng = np.random.default_rng(1)
    xv, wv = (rng.standard_normal(t.shape).astype(np.float32) for t in (x, w))
    f = nf.build(y, [x, w], database=False)
    np.testing.assert_allclose(f(xv, wv), nf.evaluate(y, {x: xv, w: wv}), rtol=1e-4, atol=1e-4)


def test_search_space_samples_two_wide_vectors(width):
    width("64")
    kernel = kernels_for([_matmul(64, 96, 200)])[-1]
    seen = {f for s in range(300) for fs in sample_config(kernel, s).stages[0].tile.values()
            for f in fs}
    assert 32 in seen      # two 16-float vectors, not a divisor of 200 nor among the small ones


def test_tuning_records_are_kept_apart_per_width(width):
    width("32")
    narrow = detect()
    width("64")
    wide = detect()
    assert (narrow.simd_bytes, wide.simd_bytes) == (32, 64)
    assert narrow.fingerprint != wide.fingerprint
    assert (narrow.vector_registers, wide.vector_registers) == (16, 32)


def test_detection_is_kept_in_the_kernel_cache(monkeypatch, tmp_path):
    """The first process asks the compiler and records the answer as a passed
    probe; the next reads it back (the same Target) without the compiler."""
    import neoflow.toolchain.target as target_module
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    native_target.cache_clear()
    try:
        first = native_target()
        assert list((tmp_path / "probes").iterdir())
        native_target.cache_clear()
        monkeypatch.setattr(target_module, "_macros", lambda *a: pytest.fail("compiler asked"))
        assert native_target() == first
        # a probe records the SIMD only: the same text whatever the threads
        assert _probe_text(replace(first, threads=7)) == _probe_text(first)
    finally:
        native_target.cache_clear()


def test_threads_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "3")
    assert target().threads == 3 and target().describe().endswith(", 3 threads")
    monkeypatch.setenv(THREADS_ENV, " 5 , 2")          # a nested list: the outer level's
    assert target().threads == 5
    monkeypatch.setenv(THREADS_ENV, "1")
    assert target().threads == 1 and target().describe().endswith(", 1 thread")
    monkeypatch.setenv(ENV, "16")                      # an overridden width keeps the threads
    assert (target().vector_bytes, target().threads) == (16, 1)
    monkeypatch.delenv(THREADS_ENV)
    assert target().threads == cpus() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(THREADS_ENV, "")                # empty: unset, and no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert target().threads == cpus()
    assert native_target().threads == 0                # the compiler's half says none
    assert omp_threads({THREADS_ENV: "4,1"}) == 4 and omp_threads({}) == cpus()


@pytest.mark.parametrize("bad", ["0", "-2", "abc", "4,", "4,0", "2.5", "0x3"])
def test_threads_a_value_openmp_rejects_falls_back_with_a_warning(monkeypatch, bad):
    """libgomp ignores such a value (printing 'Invalid value for environment
    variable OMP_NUM_THREADS') and runs parallel loops on the CPUs the process
    may use; the target says so too, rather than refuse to build kernels."""
    monkeypatch.setenv(THREADS_ENV, bad)
    with pytest.warns(RuntimeWarning, match=f"{THREADS_ENV}='{bad}' is not a list of "
                                            "positive integers.*CPU"):
        assert target().threads == cpus()


def test_tuning_records_are_kept_apart_per_thread_count(monkeypatch):
    """The hardware fingerprint (the tuning database's key) takes the
    target's thread count: a schedule tuned on 2 threads is not used on 3."""
    monkeypatch.setenv(THREADS_ENV, "2")
    two = detect()
    monkeypatch.setenv(THREADS_ENV, "3")
    three = detect()
    assert (two.threads, three.threads) == (2, 3) and two.fingerprint != three.fingerprint
    assert detect(threads=2) == two                    # a worker's count given explicitly


def test_weights_that_dwarf_the_output_go_panel_by_panel(width):
    """A 3x3 conv over a 3x3 image with 5.3 MB of weights (past an L2, 384x
    its output): the channel panels alone are the parallel loop, each packed
    right before use; a large image keeps the fused parallel loop."""
    width("64")
    x, w = nf.placeholder((1, 384, 3, 3), name="x"), nf.placeholder((384, 384, 3, 3), name="w")
    y = nf.nn.conv2d(x, w, padding=1)
    sc = default_config(kernels_for([y])[-1]).stages[-1]
    assert sc.order[0] == "s1.0" and sc.parallel == 1 and sc.pack
    rng = np.random.default_rng(2)
    xv, wv = (rng.standard_normal(t.shape).astype(np.float32) for t in (x, w))
    f = nf.build(y, [x, w], database=False)
    expect = torch.nn.functional.conv2d(torch.from_numpy(xv).double(), torch.from_numpy(wv).double(),
                                        padding=1).numpy()
    np.testing.assert_allclose(f(xv, wv), expect, rtol=1e-4, atol=1e-3)
    big = nf.nn.conv2d(nf.placeholder((8, 384, 28, 28), name="x"), w, padding=1)
    assert default_config(kernels_for([big])[-1]).stages[-1].parallel > 1


@pytest.mark.parametrize("bytes_", ["32", "64"])
def test_channel_tiles_read_a_contiguous_operand_in_place(width, bytes_):
    """A weight gradient over a few steps (the LLTM's, output columns too
    narrow to vectorise along) is channel-blocked across its rows: the
    upstream gradients, contiguous along those channels, are read in place,
    not packed; a conv's weights (output channels outermost) still are."""
    width(bytes_)
    steps, n, rows, cols = 3, 33, 96, 24
    dgs = [nf.placeholder((n, rows), name=f"dg{t}") for t in range(steps)]
    x = nf.placeholder((n, steps, cols), name="x")
    r = nf.reduce_axis(n, name="r")

    def body(i, j):
        total = dgs[0][r, i] * x[r, 0, j]
        for t in range(1, steps):
            total = total + dgs[t][r, i] * x[r, t, j]
        return nf.sum(total, axis=r)
    dw = nf.compute((rows, cols), body, name="dw")
    sc = default_config(kernels_for([dw])[-1]).stages[-1]
    assert sc.vectorize == "s0" and sc.pack == [], sc
    rng = np.random.default_rng(5)
    values = [rng.standard_normal(t.shape).astype(np.float32) for t in dgs + [x]]
    got = nf.build(dw, dgs + [x], database=False)(*values)
    want = sum(values[t].astype(np.float64).T @ values[-1][:, t].astype(np.float64)
               for t in range(steps))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    conv = nf.nn.conv2d(nf.placeholder((2, 16, 9, 9), name="img"),
                        nf.placeholder((32, 16, 3, 3), name="w"), padding=1)
    assert default_config(kernels_for([conv])[-1]).stages[-1].pack


def _conv_input_grad(batch, channels, size, kernel, stride, padding):
    x = nf.placeholder((batch, channels, size, size), name="x")
    w = nf.placeholder((channels, channels, kernel, kernel), name="w")
    y = nf.nn.conv2d(x, w, stride=stride, padding=padding)
    g = nf.placeholder(y.shape, name="g")
    dx, = nf.grad(y, [x], head=g)
    return x, w, g, dx


@pytest.mark.parametrize("bytes_", ["32", "64"])
@pytest.mark.parametrize("case, window_outside", [
    ((5, 16, 13, 9, 2, 0), True),     # CapsNet's 9x9/2 onto 3x3: 5x5 taps per phase, clipped
    ((2, 16, 2, 3, 1, 1), False),     # 3x3 onto 2x2: clipped, but each weight serves 4 points
    ((2, 16, 9, 3, 1, 1), False)])    # 3x3 onto 9x9: clipped at the borders only
def test_clipped_windows_go_outside_the_channel_sum(width, bytes_, case, window_outside):
    """A strided conv's input gradient whose window most output points see
    only in part runs its window loops outside the channel sum (a constant
    loop innermost, not a few taps whose bounds move with the point); where
    the weights are barely reused, or the window is whole at most points,
    the declared order stays. Values against torch in float64, odd sizes."""
    import torch.nn.functional as F
    width(bytes_)
    batch, channels, size, kernel, stride, padding = case
    x, w, g, dx = _conv_input_grad(batch, channels, size, kernel, stride, padding)
    f = nf.build(dx, [w, g], database=False)
    sc = next(sc for k, c in zip(f.kernels, f.configs) for t, sc in zip(k.stages, c.stages)
              if sc.pack and t.op.body is not None and any(a.startswith("r") for a in sc.order))
    reduce_order = [lv for lv in sc.order if lv.startswith("r")]
    assert (reduce_order[-1] == "r0.0") == window_outside, sc      # r0: the channels
    rng = np.random.default_rng(3)
    wv, gv = rng.standard_normal(w.shape), rng.standard_normal(g.shape)
    xt = torch.zeros(x.shape, dtype=torch.float64, requires_grad=True)
    F.conv2d(xt, torch.from_numpy(wv), stride=stride, padding=padding).backward(
        torch.from_numpy(gv))
    got = f(wv.astype(np.float32), gv.astype(np.float32))
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-4, atol=1e-4 * np.abs(got).max())
