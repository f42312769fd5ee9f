"""Lowering to the loop IR: exact tails, hoisted reductions, loop bounds from
reduction conditions, fused parallel loops, multi-stage kernels."""
import ctypes
import re

import numpy as np
import pytest

import neoflow as nf
from neoflow.toolchain import compile_c
from neoflow.codegen import generate_c
from neoflow.codegen.c import ENTRY
from neoflow.graph import Kernel, kernels_for
from neoflow.schedule import Config, default_config, lower_kernel, lower_program
from neoflow.schedule.loop_ir import For, dump


def lowered(t, config=None):
    kernel = kernels_for([t])[-1]
    return lower_kernel(kernel, config or default_config(kernel), [])


def loops(stmt):
    """Every For under `stmt`, outer first."""
    out, stack = [], [stmt]
    while stack:
        s = stack.pop()
        if isinstance(s, For):
            out.append(s)
        for name in ("body", "then", "else_"):
            if getattr(s, name, None) is not None:
                stack.append(getattr(s, name))
        stack.extend(reversed(getattr(s, "stmts", ())))
    return out


def test_softmax_row_sum_is_hoisted_out_of_the_column_loop():
    x = nf.placeholder((64, 128), name="x")
    r = nf.reduce_axis(128, name="r")
    sm = nf.compute((64, 128), lambda i, j: nf.exp(x[i, j]) / nf.sum(nf.exp(x[i, r]), axis=r))
    config = Config.from_dict({"stages": [{"tile": {"s0": [], "s1": []},
                                           "order": ["s0.0", "s1.0"], "parallel": 1,
                                           "vectorize": "s1"}]})
    text = dump(lowered(sm, config).body)
    # the reduction's loop runs inside the row loop, before (not inside) the column loop
    assert text.index("for r in") < text.index("for j in")
    indent = {line.split("for ")[1].split()[0]: len(line) - len(line.lstrip())
              for line in text.splitlines() if line.lstrip().startswith("for ")}
    assert indent["r"] == indent["j"]


def test_reduction_condition_tightens_loop_bounds():
    x = nf.placeholder((10,), name="x")
    r = nf.reduce_axis(10, name="r")
    y = nf.compute((10,), lambda i: nf.sum(x[r], axis=r, where=(r <= i) & (r + 3 > i)))
    func = lowered(y)
    inner = [lp for lp in loops(func.body) if lp.var is r][0]
    assert "if " not in dump(inner.body)        # no guard left
    assert "for r in [max(0, (i + -2)), (i + 1))" in dump(func.body)  # i + 1 <= 10: no min


def _matmul(m, k, n):
    x = nf.placeholder((m, k), name="x")
    y = nf.placeholder((k, n), name="y")
    r = nf.reduce_axis(k, name="k")
    return x, y, nf.compute((m, n), lambda i, j: nf.sum(x[i, r] * y[r, j], axis=r))


def _tiled(cache_write, pack=(), columns=2):
    return Config.from_dict({"stages": [{
        "tile": {"s0": [3], "s1": [columns], "r0": [5]},
        "order": ["s0.0", "s1.0", "r0.0", "r0.1", "s0.1", "s1.1"], "parallel": 2,
        "vectorize": "s1", "cache_write": cache_write, "pack": list(pack)}]})


def _agrees(x, y, c, config):
    rng = np.random.default_rng(3)
    xv = rng.standard_normal(x.shape).astype(np.float32)
    yv = rng.standard_normal(y.shape).astype(np.float32)
    got = nf.build(c, [x, y], configs=config)(xv, yv)
    np.testing.assert_allclose(got, nf.evaluate(c, {x: xv, y: yv}), rtol=1e-5, atol=1e-5)


def test_tails_are_bounded_exactly_and_full_tiles_are_constant():
    x, y, c = _matmul(7, 33, 7)
    config = _tiled(cache_write=False)        # accumulates in the output: no whole edge tiles
    text = dump(lowered(c, config).body)
    assert "min(5, (33 - (r0.0 * 5)))" in text    # the reduce tail
    assert "if ((((s0.0 * 3) + 3) <= 7) & (((s1.0 * 2) + 2) <= 7))" in text  # whole tiles: constant bounds
    assert "min(3, (7 - (s0.0 * 3)))" in text     # else exact tails
    assert "parallel" in text
    _agrees(x, y, c, config)


def test_edge_tiles_of_a_register_tile_move_back_inside_the_axis():
    x, y, c = _matmul(7, 33, 7)
    config = _tiled(cache_write=True)
    text = dump(lowered(c, config).body)
    assert "if " not in text and "min(3" not in text and "min(2" not in text   # one version
    # the edge tile ends at the axis' end; it stores only past the overlap
    assert "let i = (((s0.0 * 3) + s0.1) - max(0, ((s0.0 * 3) + -4)))" in text
    store = text[text.rindex("for s0.1"):]
    assert store.startswith("for s0.1 in [max(0, ((s0.0 * 3) + -4)), 3)")
    assert "for s1.1 in [max(0, ((s1.0 * 2) + -5)), 2)" in store
    _agrees(x, y, c, config)


def test_edge_tiles_along_a_packed_axis_run_into_the_zero_padding():
    x, y, c = _matmul(7, 33, 13)
    config = _tiled(cache_write=True, pack=[1], columns=8)     # y packed along the columns
    text = dump(lowered(c, config).body)
    assert "if " not in text
    update = text[text.index("for r0.0"):text.rindex("for s0.1")]
    assert "for s1.1 in [0, 8) vectorized" in update and "let j = ((s1.0 * 8) + s1.1)" in update
    store = text[text.rindex("for s0.1"):]
    assert "for s1.1 in [0, min(8, (13 - (s1.0 * 8)))) vectorized" in store   # its own points
    _agrees(x, y, c, config)


def test_an_edge_tile_mostly_past_the_end_runs_exactly():
    """6 rows in tiles of 5: the second tile's one row costs less as an
    exact tail than a whole tile (TAIL_SLOWDOWN), so the tile is made
    whole under a test and exact otherwise."""
    x, y, c = _matmul(6, 33, 7)
    config = _tiled(cache_write=True)
    config.stages[0].tile["s0"] = [5]
    text = dump(lowered(c, config).body)
    assert "if ((((s0.0 * 5) + 5) <= 6) & (((s1.0 * 2) + 2) <= 7))" in text
    assert "min(5, (6 - (s0.0 * 5)))" in text and "- max(0," not in text
    _agrees(x, y, c, config)


def test_a_masked_sum_runs_its_padded_edge_rows_under_the_mask():
    """Rows past the end (both operands packed, so in their zero padding)
    test `k <= i` like any other and are not stored."""
    x, y = nf.placeholder((7, 9), name="x"), nf.placeholder((9, 13), name="y")
    k = nf.reduce_axis(9, name="k")
    c = nf.compute((7, 13), lambda i, j: nf.sum(x[i, k] * y[k, j], axis=k, where=k <= i))
    config = Config.from_dict({"stages": [{
        "tile": {"s0": [3], "s1": [8], "r0": []},
        "order": ["s0.0", "s1.0", "r0.0", "s0.1", "s1.1"], "parallel": 2,
        "vectorize": "s1", "cache_write": True, "pack": [0, 1]}]})
    text = dump(lowered(c, config).body)
    assert "if (k <= i)" in text and "for k in [0, 9)" in text and "min(3, (7 - (s0.0 * 3)))" in text
    _agrees(x, y, c, config)


@pytest.mark.parametrize("m, n", [(1, 1), (2, 3), (3, 2), (5, 11), (9, 4)])
def test_whole_edge_tiles_agree_with_the_reference_on_odd_sizes(m, n):
    x, y, c = _matmul(m, 19, n)
    for config in (_tiled(cache_write=True), _tiled(cache_write=True, pack=[1], columns=8)):
        _agrees(x, y, c, config)


def test_multi_stage_kernel_keeps_intermediates_local():
    x = nf.placeholder((5, 9), name="x")
    r = nf.reduce_axis(9, name="r")
    e = nf.compute((5, 9), lambda i, j: nf.exp(x[i, j]), name="e")
    sm = nf.compute((5, 9), lambda i, j: e[i, j] / nf.sum(e[i, r], axis=r), name="sm")
    kernel = Kernel([e, sm], outputs=[sm])
    program = lower_program([kernel], [default_config(kernel)], [x], [sm])
    assert not program.temps
    source = generate_c(program)
    assert "malloc" in source.split("static void nf_kernel0")[1]
    entry = compile_c(source).get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int64)
    xv = np.random.default_rng(0).standard_normal((5, 9)).astype(np.float32)
    out = np.empty((5, 9), np.float32)
    err = (ctypes.c_int64 * 2)()
    assert entry((ctypes.c_void_p * 2)(xv.ctypes.data, out.ctypes.data), err) == 0
    np.testing.assert_allclose(out, nf.evaluate(sm, {x: xv}), rtol=1e-5)


@pytest.mark.usefixtures("avx2")
def test_padded_conv_interior_tiles_skip_the_padding_test():
    x = nf.placeholder((1, 8, 20, 20), name="x")
    w = nf.placeholder((8, 8, 3, 3), name="w")
    y = nf.nn.conv2d(x, w, padding=1)
    config = default_config(kernels_for([y])[-1])
    config.stages[0].pad = []          # tests in the loops (the default pads a copy)
    sc = config.stages[0]              # the outer tile loops one parallel loop, as on big images
    sc.parallel = next(n for n, level in enumerate(sc.order) if level.startswith("r"))
    func = lowered(y, config)
    text = dump(func.body)
    fast, edges = re.split(r"\n *else:\n", text, maxsplit=1)
    assert "where(" not in fast
    condition = [line for line in fast.splitlines() if line.lstrip().startswith("if ")][0]
    assert "((l + -1) >= 0)" in condition and "(((l * -1) + 18) >= 0)" in condition
    # edge tiles (one version, moved back inside the image's columns): per
    # kernel tap, the taps inside the image run without the test too
    assert edges.count("where(") == 1 and edges.count("for rc in") == 1
    tap = [line.strip() for line in edges.splitlines() if line.strip().startswith("if ")][0]
    assert "rh" in tap and "rw" in tap


def test_padded_conv_reads_a_zero_padded_copy_by_default():
    x = nf.placeholder((1, 8, 20, 20), name="x")
    w = nf.placeholder((8, 8, 3, 3), name="w")
    text = dump(lowered(nf.nn.conv2d(x, w, padding=1)).body)
    assert "alloc pad float32[3872] heap" in text      # 8 x 22 x 22
    conv = text.split("alloc pad", 1)[1].split("\n", 1)[1]
    # the copy's bounds test is decided by loop partitioning: border pieces
    # store zeros, the interior piece copies; the convolution tests nothing
    assert conv.count("where(") == 0 and conv.count("blend(") == 0
    assert "for pad in [1, 21) vectorized:" in conv


def test_a_tiles_sum_of_many_products_runs_one_reduce_loop_per_term(monkeypatch):
    """dW[i, j] = sum over b of x_t[b, i] h_t[b, j] for four t (an unrolled
    RNN's recurrent weight gradient, merged into one sum): eight operands
    through one loop would exceed the registers for their addresses, so the
    register tile accumulates the terms one reduce loop after another. A
    bias gradient's sum of products (a one-axis tile) keeps one loop."""
    import neoflow.schedule.lower as lower
    B, I, J, T = 37, 50, 70, 4
    xs = [nf.placeholder((B, I), name=f"x{t}") for t in range(T)]
    hs = [nf.placeholder((B, J), name=f"h{t}") for t in range(T)]

    def dw(i, j):
        total = None
        for x, h in zip(xs, hs):
            b = nf.reduce_axis(B, name="b")
            term = nf.sum(x[b, i] * h[b, j], axis=b)
            total = term if total is None else total + term
        return total
    w = nf.compute((I, J), dw, name="dw")
    rb = nf.reduce_axis(B, name="rb")
    bias = nf.compute((I,), lambda i: nf.sum(xs[0][rb, i] * xs[1][rb, i] + xs[2][rb, i]
                                             * xs[3][rb, i] + xs[0][rb, i] * xs[3][rb, i],
                                             axis=rb), name="dbias")

    def reduce_loops(t, axis):
        f = nf.build(t, xs + hs, database=False)
        program = lower_program(f.kernels, f.configs, xs + hs, [t])
        return f, len([s for s in loops(program.kernels[-1].body) if s.var.name == axis])
    values = [np.random.default_rng(n).standard_normal(p.shape).astype(np.float32)
              for n, p in enumerate(xs + hs)]
    expect = sum(x.T @ h for x, h in zip(values[:T], values[T:]))
    f, split = reduce_loops(w, "b")
    np.testing.assert_allclose(f(*values), expect, rtol=1e-4, atol=1e-4)
    _, bias_loops = reduce_loops(bias, "rb")
    monkeypatch.setattr(lower, "_distributed_terms", lambda red, sc, extents: [red.body])
    _, whole = reduce_loops(w, "b")
    _, bias_whole = reduce_loops(bias, "rb")
    assert whole > 0 and split == T * whole and bias_loops == bias_whole > 0

