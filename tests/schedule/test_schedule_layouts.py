"""Layout changes of inputs in schedules: packed panels (GEMM's B, conv
weights across output channels) and zero-padded copies (conv2d's input),
checked against the reference evaluator, by default and when asked."""
import numpy as np
import pytest

import neoflow as nf
from neoflow.graph import kernels_for
from neoflow.schedule import Config, ConfigError, Stage, validate

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_default_gemm_packs_both_operands():
    # 160 rows: each of B's panels serves PANEL_MIN_ROW_TILES register tiles or more
    a, b = nf.placeholder((160, 80), name="a"), nf.placeholder((80, 72), name="b")
    k = nf.reduce_axis(80, name="k")
    c = nf.compute((160, 72), lambda i, j: nf.sum(a[i, k] * b[k, j], axis=k))
    f = nf.build(c, [a, b], database=False)
    st = Stage(c)
    assert [(t.name, axis, dim) for t, axis, dim in st.packable] == [("a", "s0", 0),
                                                                     ("b", "s1", 1)]
    assert f.configs[0].stages[0].pack == [1, 0]      # B's column panels, then A's row panels
    av, bv = randn(160, 80), randn(80, 72)
    np.testing.assert_allclose(f(av, bv), av @ bv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("vector_bytes", ["32", "64"])       # AVX2's tiles and AVX-512's
def test_a_cached_gemm_b_serving_few_row_tiles_stays_unpacked(monkeypatch, vector_bytes):
    # an RNN step's dgates @ W_hh: 32 (or 37) rows, W_hh 512x128 (256 KB): its
    # panels would serve a few register tiles of rows, and the copy, made afresh
    # by every call, costs more than the strided reads (the scanned LSTM's step
    # 1.05x faster unpacked). 300 rows serve enough tiles; a B beyond
    # CACHED_PANEL_BYTES (512x1200, 2.4 MB) is packed whatever the rows.
    from neoflow.schedule.default import CACHED_PANEL_BYTES
    monkeypatch.setenv("NEOFLOW_VECTOR_BYTES", vector_bytes)
    for rows, cols, packed in ((32, 128, False), (37, 128, False), (300, 128, True),
                               (32, 1200, True)):
        g, w = nf.placeholder((rows, 512), name="g"), nf.placeholder((512, cols), name="w")
        j = nf.reduce_axis(512, name="j")
        y = nf.compute((rows, cols), lambda b, k: nf.sum(g[b, j] * w[j, k], axis=j))
        f = nf.build(y, [g, w], database=False)
        sc = f.configs[0].stages[0]
        assert (512 * cols * 4 > CACHED_PANEL_BYTES) == (cols == 1200)
        assert ("w" in [Stage(y).packable[n][0].name for n in sc.pack]) == packed, (rows, sc)
        gv, wv = randn(rows, 512), randn(512, cols)
        np.testing.assert_allclose(f(gv, wv), gv @ wv, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("avx2")
def test_default_dense_packs_its_transposed_weight():
    # y[b, j] = sum_k x[b, k] * W[j, k]: no operand is contiguous along j until W is packed
    x, w = nf.placeholder((10, 96), name="x"), nf.placeholder((70, 96), name="w")
    k = nf.reduce_axis(96, name="k")
    y = nf.compute((10, 70), lambda b, j: nf.sum(x[b, k] * w[j, k], axis=k))
    f = nf.build(y, [x, w], database=False)
    sc = f.configs[0].stages[0]
    assert [t.name for t, _, _ in (Stage(y).packable[n] for n in sc.pack)] == ["w"]
    assert sc.vectorize == "s1" and sc.cache_write
    xv, wv = randn(10, 96), randn(70, 96)
    np.testing.assert_allclose(f(xv, wv), xv @ wv.T, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("avx2")
def test_a_small_gemm_a_stays_unpacked_under_a_wide_tile():
    # an RNN step's h[b, k] @ W[j, k]: 32 (or 37) rows of h, 16 KB, stay in cache
    # from one column tile to the next; only W is packed. So do the hoisted
    # input projections' 1-4 MB of rows. From ROW_PANEL_MIN_BYTES (32768 rows)
    # x is packed too.
    from neoflow.schedule.default import ROW_PANEL_MIN_BYTES
    for rows, cols, packed in ((32, 512, ["w"]), (37, 512, ["w"]), (2048, 512, ["w"]),
                               (32768, 32, ["w", "x"])):
        x, w = nf.placeholder((rows, 128), name="x"), nf.placeholder((cols, 128), name="w")
        k = nf.reduce_axis(128, name="k")
        y = nf.compute((rows, cols), lambda b, j: nf.sum(x[b, k] * w[j, k], axis=k))
        f = nf.build(y, [x, w], database=False)
        sc = f.configs[0].stages[0]
        assert sc.tile["s1"] == [16] and (rows * 128 * 4 >= ROW_PANEL_MIN_BYTES) == (rows == 32768)
        assert [Stage(y).packable[n][0].name for n in sc.pack] == packed, (rows, sc)
        xv, wv = randn(rows, 128), randn(cols, 128)
        np.testing.assert_allclose(f(xv, wv), xv @ wv.T, rtol=1e-4, atol=1e-4)
    # a weight gradient's dy[b, j], contiguous along its rows j: read in place
    # while it stays in cache (up to CACHED_PANEL_BYTES), packed beyond
    for batch, packed in ((64, False), (1200, True)):
        dy, x = nf.placeholder((batch, 120), name="dy"), nf.placeholder((batch, 400), name="x")
        b = nf.reduce_axis(batch, name="b")
        dw = nf.compute((120, 400), lambda j, i: nf.sum(dy[b, j] * x[b, i], axis=b))
        f = nf.build(dw, [dy, x], database=False)
        sc = f.configs[0].stages[0]
        assert ("dy" in [Stage(dw).packable[n][0].name for n in sc.pack]) == packed, sc
        dyv, xv = randn(batch, 120), randn(batch, 400)
        np.testing.assert_allclose(f(dyv, xv), dyv.T @ xv, rtol=1e-4, atol=1e-3)


def test_default_batched_q_kt_packs_k_along_the_output_columns():
    # s[b, i, j] = sum_e q[b, i, e] * k[b, j, e]: k qualifies along b and along j; packed
    # along j (the last axis) it streams there and the stage is register-blocked
    q, kk = nf.placeholder((6, 37, 40), name="q"), nf.placeholder((6, 45, 40), name="k")
    e = nf.reduce_axis(40, name="e")
    s_ = nf.compute((6, 37, 45), lambda b, i, j: nf.sum(q[b, i, e] * kk[b, j, e], axis=e))
    st = Stage(s_)
    assert ("k", "s2", 1) in [(t.name, axis, dim) for t, axis, dim in st.packable]
    f = nf.build(s_, [q, kk], database=False)
    sc = f.configs[0].stages[0]
    assert [st.packable[n][0].name for n in sc.pack] == ["k"] and sc.vectorize == "s2"
    qv, kv = randn(6, 37, 40), randn(6, 45, 40)
    np.testing.assert_allclose(f(qv, kv), np.einsum("bie,bje->bij", qv, kv), rtol=1e-4,
                               atol=1e-4)


def test_a_masked_row_reduction_runs_row_by_row():
    # max over r of x[b, l * 64 + r] beside a mask m[l, r]: packing the mask along l
    # would gather x with stride 64; row by row both stream along r
    x = nf.placeholder((20, 40 * 48), name="x")
    m = nf.placeholder((40, 48), dtype="bool", name="m")
    r = nf.reduce_axis(48, name="r")
    top = nf.compute((20, 40), lambda b, l: nf.max(nf.where(m[l, r], -np.inf, x[b, l * 48 + r]),
                                                 axis=r))
    f = nf.build(top, [x, m], database=False)
    assert f.configs[0].stages[0].pack == [] and f.configs[0].stages[0].vectorize == "r0"
    xv, mv = randn(20, 40 * 48), rng.random((40, 48)) < 0.3
    want = np.where(mv[None], -np.inf, xv.reshape(20, 40, 48)).max(-1)
    np.testing.assert_array_equal(f(xv, mv), want)


@pytest.mark.usefixtures("avx2")
@pytest.mark.parametrize("reduce, rows", [(130, 6), (40, 4)])
def test_a_batch_of_32_rows_takes_6_row_tiles_over_a_long_reduction(reduce, rows):
    # y[b, j] = sum_k h[b, k] * w[k, j], 32 rows: over a long reduction 6 rows and a
    # shifted tail (6 tiles) beat 4 rows (8 tiles); over a short one the tail's rows cost
    h, w = nf.placeholder((32, reduce), name="h"), nf.placeholder((reduce, 176), name="w")
    k = nf.reduce_axis(reduce, name="k")
    y = nf.compute((32, 176), lambda b, j: nf.sum(h[b, k] * w[k, j], axis=k), name="y")
    f = nf.build(y, [h, w], database=False)
    assert f.configs[0].stages[0].tile["s0"] == [rows], f.configs[0]
    hv, wv = randn(32, reduce), randn(reduce, 176)
    np.testing.assert_allclose(f(hv, wv), hv.astype(np.float64) @ wv, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("avx2")
def test_a_small_conv_weight_gradient_vectorises_along_its_rows():
    # dW[c, i, j] = sum over (n, y, x) of dy[n, c, y, x] * img[n, y + i, x + j]: its
    # contiguous output axis j (5) is shorter than a vector, while both operands stream
    # along x (27): the reduction is vectorised along x, not register-blocked along j
    dy, img = nf.placeholder((3, 5, 27, 27), name="dy"), nf.placeholder((3, 31, 31), name="img")
    n, y, x = nf.reduce_axis(3, name="n"), nf.reduce_axis(27, name="y"), nf.reduce_axis(27,
                                                                                        name="x")
    dw = nf.compute((5, 5, 5), lambda c, i, j: nf.sum(dy[n, c, y, x] * img[n, y + i, x + j],
                                                      axis=[n, y, x]), name="dw")
    f = nf.build(dw, [dy, img], database=False)
    sc = f.configs[0].stages[0]
    assert sc.vectorize == "r2" and sc.order[-1] == "r2.0", sc
    dv, iv = randn(3, 5, 27, 27), randn(3, 31, 31)
    windows = np.lib.stride_tricks.sliding_window_view(iv.astype(np.float64), (27, 27),
                                                       axis=(1, 2))       # (n, i, j, y, x)
    want = np.einsum("ncyx,nijyx->cij", dv.astype(np.float64), windows)
    np.testing.assert_allclose(f(dv, iv), want, rtol=1e-4, atol=1e-3)


@pytest.mark.usefixtures("avx2")
def test_default_gemm_splits_columns_among_threads_when_b_outgrows_a():
    # N > M: each thread takes a range of column tiles (the panels it packed),
    # with 8 tiles or more the panel loop alone; N <= M: a range of row tiles
    for m, n, first, parallel in ((24, 160, "s1.0", 1), (24, 96, "s1.0", 2),
                                  (96, 48, "s0.0", 2), (64, 64, "s0.0", 2)):
        x, w = nf.placeholder((m, 96), name="x"), nf.placeholder((n, 96), name="w")
        k = nf.reduce_axis(96, name="k")
        y = nf.compute((m, n), lambda b, j: nf.sum(x[b, k] * w[j, k], axis=k))
        f = nf.build(y, [x, w], database=False)
        sc = f.configs[0].stages[0]
        assert (sc.order[0], sc.parallel) == (first, parallel), (m, n, sc)
        xv, wv = randn(m, 96), randn(n, 96)
        np.testing.assert_allclose(f(xv, wv), xv @ wv.T, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("avx2")
def test_panels_packed_one_at_a_time_inside_the_panel_loop():
    # the panel loop outermost and alone in parallel: each iteration packs its
    # panel (a partial last one padded with zeros), GEMM's B and dense's W alike
    cases = []
    a, b = nf.placeholder((160, 64), name="a"), nf.placeholder((64, 300), name="b")
    k = nf.reduce_axis(64, name="k")
    cases.append((nf.compute((160, 300), lambda i, j: nf.sum(a[i, k] * b[k, j], axis=k)),
                  [a, b], lambda av, bv: av @ bv))
    for n in (150, 160):     # W's rows not / a multiple of the panel: element / 8x8 copies
        x, w = nf.placeholder((40, 64), name="x"), nf.placeholder((n, 64), name="w")
        k = nf.reduce_axis(64, name="k")
        cases.append((nf.compute((40, n), lambda i, j: nf.sum(x[i, k] * w[j, k], axis=k)),
                      [x, w], lambda xv, wv: xv @ wv.T))
    for y, inputs, expect in cases:
        f = nf.build(y, inputs, database=False)
        sc = f.configs[0].stages[0]
        assert sc.order[0] == "s1.0" and sc.parallel == 1 and sc.pack, sc
        panel = 64 * sc.tile["s1"][0]            # one panel's floats, allocated per iteration
        assert f"malloc(sizeof(float) * {panel})" in f.source
        values = [randn(*t.shape) for t in inputs]
        np.testing.assert_allclose(f(*values), expect(*values), rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("avx2")
def test_row_panels_of_a_weight_gradient_are_packed_a_block_of_rows_at_a_time():
    # dW[j, k] = sum_{t, b} dy[t, b, j] x[t, b, k]: dy (beyond CACHED_PANEL_BYTES)
    # packed along j (its last dimension) in panels; copied in blocks of
    # PACK_ROW_BLOCK rows of b, each into every panel, so dy is read row by row.
    # Odd sizes: a partial last block of rows and a partial last panel; x's
    # copy serial (under PACK_PARALLEL_MIN elements) or in parallel.
    from neoflow.schedule import lower_program
    from neoflow.schedule.loop_ir import For, nodes
    from neoflow.schedule.lower import PACK_PARALLEL_MIN, PACK_ROW_BLOCK
    for T, B, J, K in ((9, 131, 130, 24), (7, 149, 132, 40)):
        dy, x = nf.placeholder((T, B, J), name="dy"), nf.placeholder((T, B, K), name="x")
        t, b = nf.reduce_axis(T, name="t"), nf.reduce_axis(B, name="b")
        dw = nf.compute((J, K), lambda j, k: nf.sum(dy[t, b, j] * x[t, b, k], axis=[t, b]),
                        name="dw")
        f = nf.build(dw, [dy, x], database=False)
        sc = f.configs[0].stages[0]
        assert [Stage(dw).packable[n][0].name for n in sc.pack] == ["x", "dy"], sc
        program = lower_program(f.kernels, f.configs, [dy, x], [dw])
        loops = [n for n in nodes(program.kernels[0].body) if isinstance(n, For)]
        blocks = [n for n in loops if n.var.name == "pack_rb"]    # x's and dy's copies
        assert len(blocks) == 2 and all(n.end.value == -(-B // PACK_ROW_BLOCK) for n in blocks)
        parallel = [n.var.name for n in loops if n.kind == "parallel" and "pack" in n.var.name]
        assert parallel == ["pack"] * sum(n >= PACK_PARALLEL_MIN for n in (T * B * J, T * B * K))
        dyv, xv = randn(T, B, J), randn(T, B, K)
        np.testing.assert_allclose(f(dyv, xv), np.einsum("tbj,tbk->jk", dyv, xv), rtol=1e-4,
                                   atol=1e-4)


def test_default_parallelises_small_stages_heavy_with_transcendentals(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)   # spinning threads: cheap to start
    a = nf.placeholder((64, 256), name="a")
    plain = nf.compute((64, 256), lambda i, j: a[i, j] * 2 + 1, name="plain")
    heavy = nf.compute((64, 256), lambda i, j: nf.sigmoid(a[i, j]) * nf.tanh(a[i, j]),
                       name="heavy")
    assert nf.build(plain, [a], database=False).configs[0].stages[0].parallel == 0
    f = nf.build(heavy, [a], database=False)
    assert f.configs[0].stages[0].parallel >= 1
    av = randn(64, 256)
    np.testing.assert_allclose(f(av), nf.evaluate(heavy, {a: av}), rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("avx2")
def test_transposed_panels_are_copied_in_8x8_blocks_when_the_sizes_allow():
    # W[j, k] into P[j // 16, k, j % 16]: 8x8 blocks copied transposed; sizes
    # that are not multiples of the block fall back to the element loop
    for n_out, n_in, blocks in ((48, 64, True), (48, 36, False), (44, 64, False)):
        x, w = nf.placeholder((12, n_in), name="x"), nf.placeholder((n_out, n_in), name="w")
        k = nf.reduce_axis(n_in, name="k")
        y = nf.compute((12, n_out), lambda b, j: nf.sum(x[b, k] * w[j, k], axis=k))
        f = nf.build(y, [x, w], database=False)
        sc = f.configs[0].stages[0]
        assert sc.pack and sc.tile["s1"][0] % 8 == 0
        assert ("nf_transpose8_f32(&" in f.source) == blocks, (n_out, n_in, sc)
        xv, wv = randn(12, n_in), randn(n_out, n_in)
        np.testing.assert_allclose(f(xv, wv), xv @ wv.T, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("avx2")
def test_transposed_panels_of_an_operand_with_a_dimension_before_the_packed_one():
    # y[i, j] = sum_{r, k} x[i, r, k] * w[r, j, k]: w packed along j, its dimension 1 of 3
    x, w = nf.placeholder((10, 3, 24), name="x"), nf.placeholder((3, 32, 24), name="w")
    r, k = nf.reduce_axis(3, name="r"), nf.reduce_axis(24, name="k")
    y = nf.compute((10, 32), lambda i, j: nf.sum(x[i, r, k] * w[r, j, k], axis=[r, k]))
    assert ("w", "s1", 1) in [(t.name, axis, dim) for t, axis, dim in Stage(y).packable]
    f = nf.build(y, [x, w], database=False)
    assert "nf_transpose8_f32(&" in f.source
    xv, wv = randn(10, 3, 24), randn(3, 32, 24)
    np.testing.assert_allclose(f(xv, wv), np.einsum("irk,rjk->ij", xv, wv), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.usefixtures("avx2")
def test_default_conv_pads_and_blocks_output_channels():
    x, w = nf.placeholder((2, 8, 9, 9), name="x"), nf.placeholder((16, 8, 3, 3), name="w")
    y = nf.nn.conv2d(x, w, padding=1)
    f = nf.build(y, [x, w], database=False)
    sc = f.configs[0].stages[0]
    assert sc.pad == [0] and sc.pack == [0] and sc.vectorize == "s1"
    xv, wv = randn(2, 8, 9, 9), randn(16, 8, 3, 3)
    np.testing.assert_allclose(f(xv, wv), nf.evaluate(y, {x: xv, w: wv}), rtol=1e-4,
                               atol=1e-4)


def test_pad_and_pack_with_tails_and_strides():
    """A strided, dilated conv: a padded copy with different pads per side,
    weights packed in panels of 3 over 5 channels (a partial last panel)."""
    x, w = nf.placeholder((2, 3, 11, 9), name="x"), nf.placeholder((5, 3, 3, 3), name="w")
    y = nf.nn.conv2d(x, w, stride=2, padding=(2, 1), dilation=2)
    kernel = kernels_for([y])[-1]
    st = Stage(y)
    [(t, lo, hi, _)] = st.paddable
    assert t is x and lo == (0, 0, 2, 1) and hi[2:] != (0, 0)
    assert [(t.name, axis) for t, axis, _ in st.packable] == [("w", "s1")]
    config = Config.from_dict({"stages": [{
        "tile": {"s0": [], "s1": [3], "s2": [], "s3": [], "r0": [], "r1": [], "r2": []},
        "order": ["s0.0", "s1.0", "s2.0", "r0.0", "r1.0", "r2.0", "s3.0", "s1.1"],
        "parallel": 2, "vectorize": "s1", "cache_write": True, "pack": [0], "pad": [0]}]})
    validate(config, kernel)
    f = nf.build(y, [x, w], configs=config)
    xv, wv = randn(2, 3, 11, 9), randn(5, 3, 3, 3)
    np.testing.assert_allclose(f(xv, wv), nf.evaluate(y, {x: xv, w: wv}), rtol=1e-4,
                               atol=1e-4)


def test_bad_pack_and_pad_are_refused():
    a, b = nf.placeholder((8, 8), name="a"), nf.placeholder((8, 8), name="b")
    k = nf.reduce_axis(8, name="k")
    c = nf.compute((8, 8), lambda i, j: nf.sum(a[i, k] * b[k, j], axis=k))
    kernel = kernels_for([c])[0]

    def config(**fields):
        return Config.from_dict({"stages": [{
            "tile": {"s0": [], "s1": [], "r0": []}, "order": ["s0.0", "s1.0", "r0.0"],
            "cache_write": True, **fields}]})
    with pytest.raises(ConfigError, match="pad must list"):
        validate(config(pad=[0]), kernel)
    with pytest.raises(ConfigError, match="pack must list"):
        validate(config(pack=[2]), kernel)
    with pytest.raises(ConfigError, match="needs s1 split"):
        validate(config(pack=[1]), kernel)
