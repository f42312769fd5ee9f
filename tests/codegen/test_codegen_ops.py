"""Generated C agrees with the reference evaluator on every kind of op."""
import ctypes

import numpy as np
import pytest

import neoflow as nf
from neoflow.toolchain import compile_c
from neoflow.codegen.c.prelude import PRELUDE

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(scope="module")
def X():
    return nf.placeholder((7, 33), name="X"), randn(7, 33)


def test_elementwise_and_broadcasting(X, assert_matches):
    x, xv = X
    y = nf.placeholder((33,), name="y")
    s = nf.placeholder((), name="s")
    outs = [x + y, x * s, (x - y) / 2.0, -x,
            nf.compute((7, 33), lambda i, j: nf.where(x[i, j] > y[j], x[i, j], y[j] * 3.0))]
    assert_matches(outs, [x, y, s], [xv, randn(33), np.float32(1.5)])


def test_math_functions(X, assert_matches):
    x, xv = X
    fns = [nf.exp, nf.log, nf.sqrt, nf.rsqrt, nf.erf, nf.floor, nf.sigmoid, nf.tanh, nf.abs]
    outs = [nf.compute((7, 33), lambda i, j, fn=fn: fn(nf.abs(x[i, j]) + 0.5)) for fn in fns]
    outs.append(nf.compute((7, 33), lambda i, j: nf.pow(nf.abs(x[i, j]), 1.5)))
    assert_matches(outs, [x], [xv])


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions_plain_and_masked(X, op, assert_matches):
    x, xv = X
    fn = getattr(nf, op)
    r = nf.reduce_axis(33, name="r")
    outs = [nf.compute((7,), lambda i: fn(x[i, r], axis=r)),
            nf.compute((7,), lambda i: fn(x[i, r], axis=r, where=r < i * 3)),  # row 0: empty
            nf.compute((33,), lambda j: fn(x[r % 7, j] * x[r % 7, j], axis=r,
                                           where=(r >= 2) & (x[r % 7, 0] > -1.0)))]
    assert_matches(outs, [x], [xv])


def test_reduction_identities_when_nothing_is_selected(assert_matches):
    z = nf.placeholder((9,), dtype="int32", name="z")
    v = nf.placeholder((9,), name="v")
    r = nf.reduce_axis(9, name="r")
    outs = [nf.compute((), lambda: nf.max(z[r], axis=r, where=z[r] > 100)),
            nf.compute((), lambda: nf.min(z[r], axis=r, where=z[r] > 100)),
            nf.compute((), lambda: nf.max(v[r], axis=r, where=r > 100)),
            nf.compute((), lambda: nf.min(v[r], axis=r, where=r < 0))]
    assert_matches(outs, [z, v], [np.arange(9, dtype=np.int32), randn(9)])


def test_nested_and_hoisted_reductions(X, assert_matches):
    x, xv = X
    y = nf.placeholder((33,), name="y")
    r, r2 = nf.reduce_axis(33, name="r"), nf.reduce_axis(33, name="r2")
    e = nf.compute((7, 33), lambda i, j: nf.exp(x[i, j]), name="e")
    softmax = nf.compute((7, 33), lambda i, j: e[i, j] / nf.sum(e[i, r], axis=r))
    fused = nf.compute((7, 33), lambda i, j: nf.exp(x[i, j] - nf.max(x[i, r2], axis=r2))
                       / nf.sum(nf.exp(x[i, r] - nf.max(x[i, r2], axis=r2)), axis=r))
    inner = nf.compute((7,), lambda i: nf.sum(x[i, r] * nf.max(x[i, r2] * y[r], axis=r2),
                                              axis=r))
    assert_matches([softmax, fused, inner], [x, y], [xv, randn(33)])


def test_reduction_with_epilogues(X, assert_matches):
    x, xv = X
    b = nf.placeholder((5,), name="b")
    w = nf.placeholder((33, 5), name="w")
    k = nf.reduce_axis(33, name="k")
    outs = [nf.compute((7, 5), lambda i, j: nf.maximum(nf.sum(x[i, k] * w[k, j], axis=k)
                                                       + b[j], 0.0)),
            nf.compute((7, 5), lambda i, j: nf.sum(x[i, k] * w[k, j], axis=k) / 33.0),
            nf.compute((7, 5), lambda i, j: nf.where(i < 3, nf.sum(x[i, k] * w[k, j], axis=k),
                                                     -1.0)),
            nf.compute((7, 5), lambda i, j: nf.cast(nf.sum(x[i, k] * w[k, j], axis=k) > 0,
                                                    "int32"))]
    assert_matches(outs, [x, w, b], [xv, randn(33, 5), randn(5)])


def test_padding_with_where(X, assert_matches):
    x, xv = X
    pad = nf.compute((9, 37), lambda i, j: nf.where((i >= 1) & (i < 8) & (j >= 2) & (j < 35),
                                                    x[i - 1, j - 2], 0.0))
    r = nf.reduce_axis(3, name="r")
    blur = nf.compute((7, 33), lambda i, j: nf.sum(
        nf.where((j + r - 1 >= 0) & (j + r - 1 < 33), x[i, j + r - 1], 0.0), axis=r))
    assert_matches([pad, blur], [x], [xv])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_gather(X, dtype, assert_matches):
    x, xv = X
    idx = nf.placeholder((5,), dtype=dtype, name="idx")
    rows = nf.compute((5, 33), lambda i, j: x[idx[i], j])
    cols = nf.compute((7, 5), lambda i, j: x[i, idx[j] % 33])
    assert_matches([rows, cols], [x, idx], [xv, np.array([0, 6, 3, 2, 6], dtype)])


def test_floor_division_and_modulo_on_negative_values(assert_matches):
    z = nf.placeholder((9,), dtype="int32", name="z")
    f = nf.placeholder((9,), name="f")
    outs = [nf.compute((9,), lambda i: z[i] // 3), nf.compute((9,), lambda i: z[i] % 3),
            nf.compute((9,), lambda i: z[i] // -2), nf.compute((9,), lambda i: z[i] % -2),
            nf.compute((9,), lambda i: nf.cast((i - 4) // 3 * 10 + (i - 4) % 3, "int32")),
            nf.compute((9,), lambda i: f[i] // 3.0), nf.compute((9,), lambda i: f[i] % 3.0),
            nf.compute((9,), lambda i: f[i] % -2.5)]
    assert_matches(outs, [z, f], [np.arange(-4, 5, dtype=np.int32),
                                  np.linspace(-4, 4, 9).astype(np.float32)])


def test_casts_bool_outputs_and_nan(X, assert_matches):
    x, xv = X
    n = nf.placeholder((4,), name="n")
    r = nf.reduce_axis(4, name="r")
    outs = [nf.compute((7, 33), lambda i, j: nf.cast(x[i, j] * 1.7, "int32")),
            nf.compute((7, 33), lambda i, j: nf.cast(x[i, j], "bool")),
            nf.compute((7, 33), lambda i, j: (x[i, j] > 0) & ~(x[i, j] > 1) | (i == j)),
            nf.compute((7, 33), lambda i, j: nf.cast(x[i, j] > 0, "float64") + 0.5),
            nf.compute((4,), lambda i: nf.maximum(n[i], 1.5)),
            nf.compute((4,), lambda i: nf.minimum(1.5, n[i])),
            nf.compute((), lambda: nf.max(n[r], axis=r))]
    f = assert_matches(outs, [x, n], [xv, np.array([np.nan, 1, -np.inf, 2], np.float32)])
    assert f(xv, np.array([np.nan, 1, -np.inf, 2], np.float32))[1].dtype == np.bool_


def test_zero_dimensional_and_float64(assert_matches):
    d = nf.placeholder((7, 33), dtype="float64", name="d")
    r = nf.reduce_axis(33, name="r")
    loss = nf.compute((), lambda: nf.sum(d[0, r] * d[1, r], axis=r))
    mix = nf.compute((7,), lambda i: nf.sum(nf.tanh(d[i, r]) * nf.sigmoid(d[i, r])
                                            + nf.erf(d[i, r]), axis=r))
    f = assert_matches([loss, mix], [d], [randn(7, 33, dtype=np.float64)], rtol=1e-10)
    assert f(randn(7, 33, dtype=np.float64))[0].shape == ()


def test_multi_dimensional_reduction_and_transpose(assert_matches):
    a = nf.placeholder((3, 4, 5, 6), name="a")
    r1, r2 = nf.reduce_axis(4, name="r1"), nf.reduce_axis(6, name="r2")
    outs = [nf.compute((5, 3), lambda i, j: nf.sum(a[j, r1, i, r2], axis=[r1, r2])),
            nf.compute((6, 5, 4, 3), lambda i, j, k, m: a[m, k, j, i] * 2.0)]
    assert_matches(outs, [a], [randn(3, 4, 5, 6)])


def test_several_conjuncts_bound_the_same_loop(assert_matches):
    x = nf.placeholder((12,), name="x")
    r = nf.reduce_axis(12, name="r")
    y = nf.compute((12,), lambda i: nf.sum(x[r], axis=r, where=(r >= i - 2) & (r <= i + 2)
                                           & (r > 1) & (2 * r < 19) & (r != 5)))
    assert_matches(y, [x], [randn(12)])


def test_reduction_condition_becomes_loop_bounds(assert_matches):
    """Strided/padded conv backward: `where` conjuncts bound the reduce loops."""
    dy = nf.placeholder((2, 3, 4, 4), name="dy")     # conv output grad, stride 2, pad 1, k 3
    w = nf.placeholder((3, 2, 3, 3), name="w")
    co, rh, rw = nf.reduce_axis(3, "co"), nf.reduce_axis(3, "rh"), nf.reduce_axis(3, "rw")

    def dx(n, c, h, x):
        ph, pw = h + 1 - rh, x + 1 - rw
        cond = (ph >= 0) & (ph < 8) & (pw >= 0) & (pw < 8) & (ph % 2 == 0) & (pw % 2 == 0)
        return nf.sum(dy[n, co, ph // 2, pw // 2] * w[co, c, rh, rw], axis=[co, rh, rw],
                      where=cond)
    grad = nf.compute((2, 2, 7, 7), dx)
    f = assert_matches(grad, [dy, w], [randn(2, 3, 4, 4), randn(3, 2, 3, 3)])
    assert "nf_oob" not in f.source.split("static void nf_kernel0")[1]


@pytest.mark.parametrize("flags", [(), ("-mno-avx",)], ids=["avx", "portable"])
def test_transposing_block_copy_with_and_without_avx(flags):
    source = PRELUDE + ("void t(float* d, int64_t ds, const float* s, int64_t ss) "
                        "{ nf_transpose8_f32(d, ds, s, ss); }\n")
    copy = compile_c(source, extra_flags=flags).get(
        "t", [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64], None)
    src = np.random.default_rng(0).standard_normal((8, 24)).astype(np.float32)
    dst = np.zeros((8, 16), np.float32)
    copy(dst.ctypes.data, 16, src.ctypes.data, 24)        # rows of 16 and 24 floats
    np.testing.assert_array_equal(dst[:, :8], src[:, :8].T)
    assert not dst[:, 8:].any()                            # nothing past the block
