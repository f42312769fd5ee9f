# The foundation suite: operators written in the tensor-expression language
# (nf.nn ops and raw nf.compute bodies), each checked three ways — generated
# native code (nf.build) against the reference interpreter (nf.evaluate)
# against an independent NumPy/PyTorch implementation — on random inputs of
# at least two shapes each, odd sizes (1, 7, 33) included.
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neoflow as nf

# torch's own warnings about its padding strategy and degenerate variances
pytestmark = [pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning"),
              pytest.mark.filterwarnings("ignore:var\\(\\).*degrees of freedom:UserWarning")]

F32 = dict(rtol=1e-4, atol=1e-5)     # float32: generated code may sum in another order
F64 = dict(rtol=1e-11, atol=1e-12)   # float64: tight


def rand(shape, seed=0, dtype=np.float32, lo=None, hi=None):
    """Random data of `dtype` (never all zeros): normal, or uniform in [lo, hi)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) if lo is None else rng.uniform(lo, hi, shape)
    return np.asarray(a).astype(dtype)


def ints(shape, lo, hi, seed=0, dtype=np.int64):
    return np.asarray(np.random.default_rng(seed).integers(lo, hi, shape)).astype(dtype)


def ph(a, name):
    return nf.placeholder(a.shape, a.dtype.name, name=name)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _compare(got, want, tol, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, err_msg=what, **tol)


def check_three_ways(outputs, inputs, arrays, expected, tol=F32):
    """nf.build(outputs, inputs)(*arrays) == nf.evaluate(outputs, feed) == expected.

    `outputs` is one Tensor (expected: one array) or a list (expected: a list).
    Also checks dtypes, the result's tuple-ness, and that inputs are not modified.
    """
    single = isinstance(outputs, nf.Tensor)
    outs = [outputs] if single else list(outputs)
    exps = [expected] if single else list(expected)
    assert len(exps) == len(outs)
    copies = [a.copy() for a in arrays]

    evaluated = nf.evaluate(outputs, dict(zip(inputs, arrays)))
    f = nf.build(outputs, inputs, target="cpu")
    built = f(*arrays)
    if single:
        assert isinstance(built, np.ndarray), type(built)
        evaluated, built = (evaluated,), (built,)
    else:
        assert isinstance(built, tuple) and len(built) == len(outs), type(built)

    for n, (o, b, e, x) in enumerate(zip(outs, built, evaluated, exps)):
        assert e.dtype == np.dtype(o.dtype) and e.shape == o.shape
        assert b.dtype == np.dtype(o.dtype), f"output {n} ({o.name}): built dtype {b.dtype}"
        assert b.shape == o.shape, f"output {n} ({o.name}): built shape {b.shape}"
        if np.asarray(x).dtype.kind in "biu" or e.dtype.kind in "biu":
            assert np.asarray(x).dtype == e.dtype, (np.asarray(x).dtype, e.dtype)
        _compare(e, x, tol, f"output {n} ({o.name}): nf.evaluate vs reference")
        _compare(b, e, tol, f"output {n} ({o.name}): nf.build vs nf.evaluate")
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c, err_msg="an input was modified")


# ---------------------------------------------------------------- 1. matmul

@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 33, 5), (33, 7, 1)])
def test_matmul_raw(m, k, n):
    a, b = rand((m, k), 1), rand((k, n), 2)
    A, B = ph(a, "A"), ph(b, "B")
    r = nf.reduce_axis(k, name="k")
    C = nf.compute((m, n), lambda i, j: nf.sum(A[i, r] * B[r, j], axis=r), name="C")
    check_three_ways(C, [A, B], [a, b], a.astype(np.float64) @ b)


@pytest.mark.parametrize("ashape,bshape", [((7,), (7, 5)), ((3, 7), (7,)), ((33, 7), (7, 2)),
                                           ((7,), (7,))])
def test_matmul_nn_float64(ashape, bshape):
    a, b = rand(ashape, 1, np.float64), rand(bshape, 2, np.float64)
    A, B = ph(a, "A"), ph(b, "B")
    check_three_ways(nf.nn.matmul(A, B), [A, B], [a, b], np.matmul(a, b), F64)


# ------------------------------------------------------- 2. batched matmul

@pytest.mark.parametrize("ashape,bshape", [((1, 1, 1), (1, 1, 1)), ((3, 7, 33), (3, 33, 5))])
def test_batch_matmul(ashape, bshape):
    a, b = rand(ashape, 1), rand(bshape, 2)
    A, B = ph(a, "A"), ph(b, "B")
    check_three_ways(nf.nn.batch_matmul(A, B), [A, B], [a, b], np.matmul(a, b))


@pytest.mark.parametrize("ashape,bshape", [((2, 1, 3, 5), (4, 5, 2)), ((1, 7, 3), (5, 1, 3, 1))])
def test_matmul_broadcast_batch(ashape, bshape):
    a, b = rand(ashape, 1), rand(bshape, 2)
    A, B = ph(a, "A"), ph(b, "B")
    check_three_ways(nf.nn.matmul(A, B), [A, B], [a, b], np.matmul(a, b))


# ------------------------------------------------------------------ 3. conv1d

@pytest.mark.parametrize("xshape,wshape,kw", [
    ((1, 1, 1), (1, 1, 1), {}),
    ((2, 4, 33), (6, 2, 3), dict(stride=2, padding=1, groups=2)),
    ((3, 7), (3, 3, 4), dict(padding="same", dilation=2)),
])
def test_conv1d(xshape, wshape, kw):
    x, w, b = rand(xshape, 1), rand(wshape, 2), rand(wshape[:1], 3)
    X, W, B = ph(x, "x"), ph(w, "w"), ph(b, "b")
    ref = F.conv1d(t(x), t(w), t(b), **kw).numpy()
    check_three_ways(nf.nn.conv1d(X, W, B, **kw), [X, W, B], [x, w, b], ref)


# ------------------------------------------------------------------ 4. conv2d

CONV2D = [
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ((2, 3, 7, 7), (4, 3, 3, 3), dict(stride=1, padding=1)),
    ((1, 3, 33, 7), (5, 3, 3, 2), dict(stride=(3, 2), padding=(2, 0))),
    ((2, 4, 9, 8), (4, 2, 3, 3), dict(stride=2, padding=2, dilation=2, groups=2)),
    ((2, 6, 7, 7), (12, 1, 3, 3), dict(padding="same", groups=6)),            # depthwise x2
    ((1, 2, 8, 7), (3, 2, 4, 4), dict(padding="same", dilation=(1, 2))),
    ((3, 7, 7), (2, 3, 5, 5), dict(padding="valid")),                          # unbatched
]


@pytest.mark.parametrize("xshape,wshape,kw", CONV2D)
def test_conv2d(xshape, wshape, kw):
    x, w, b = rand(xshape, 1), rand(wshape, 2), rand(wshape[:1], 3)
    X, W, B = ph(x, "x"), ph(w, "w"), ph(b, "b")
    ref = F.conv2d(t(x), t(w), t(b), **kw).numpy()
    check_three_ways(nf.nn.conv2d(X, W, B, **kw), [X, W, B], [x, w, b], ref)


def test_conv2d_float64_no_bias():
    x, w = rand((2, 3, 7, 9), 1, np.float64), rand((4, 3, 3, 3), 2, np.float64)
    X, W = ph(x, "x"), ph(w, "w")
    ref = F.conv2d(t(x), t(w), stride=2, padding=1).numpy()
    check_three_ways(nf.nn.conv2d(X, W, stride=2, padding=1), [X, W], [x, w], ref, F64)


# --------------------------------------------------------------- 5. max pool

POOLS = [
    ((1, 1, 1, 1), dict(kernel_size=1)),
    ((2, 3, 7, 7), dict(kernel_size=3, stride=2, padding=1)),
    ((1, 2, 33, 8), dict(kernel_size=(3, 2), stride=(2, 3), ceil_mode=True)),
    ((3, 7, 8), dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)),
]


@pytest.mark.parametrize("xshape,kw", POOLS + [((2, 2, 9, 9), dict(kernel_size=3, dilation=2,
                                                                   padding=1, ceil_mode=True))])
def test_max_pool2d(xshape, kw):
    x = rand(xshape, 1)
    X = ph(x, "x")
    check_three_ways(nf.nn.max_pool2d(X, **kw), [X], [x], F.max_pool2d(t(x), **kw).numpy())


# --------------------------------------------------------------- 6. avg pool

@pytest.mark.parametrize("xshape,kw", POOLS)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(xshape, kw, count_include_pad):
    x = rand(xshape, 1)
    X = ph(x, "x")
    ref = F.avg_pool2d(t(x), **kw, count_include_pad=count_include_pad).numpy()
    check_three_ways(nf.nn.avg_pool2d(X, **kw, count_include_pad=count_include_pad), [X], [x],
                     ref)


# ----------------------------------------------------- 7, 8. (log-)softmax

@pytest.mark.parametrize("shape,dim", [((1, 1), 1), ((7, 33), -1), ((4, 7, 5), 1)])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax(shape, dim, fn):
    x = rand(shape, 1) * 10
    X = ph(x, "x")
    ref = getattr(F, fn)(t(x), dim).numpy()
    check_three_ways(getattr(nf.nn, fn)(X, dim), [X], [x], ref)


def test_softmax_float64_large_values():
    x = rand((3, 33), 2, np.float64) * 300
    X = ph(x, "x")
    check_three_ways([nf.nn.softmax(X, 1), nf.nn.log_softmax(X, 1)], [X], [x],
                     [F.softmax(t(x), 1).numpy(), F.log_softmax(t(x), 1).numpy()], F64)


def test_masked_softmax_with_a_fully_masked_row():
    # (fusion's masked_exp moves the -inf out of exp: values as torch's, NaN rows included)
    x = rand((5, 3, 9), 4) * 4
    keep = np.tril(np.ones((3, 9), bool), 4)
    keep[1] = False
    X, K = ph(x, "x"), nf.placeholder(keep.shape, dtype="bool", name="keep")
    scores = nf.compute(x.shape, lambda n, i, j: nf.where(K[i, j], X[n, i, j], -np.inf),
                        name="scores")
    masked = t(x).masked_fill(~torch.from_numpy(keep), -np.inf)
    check_three_ways([nf.nn.softmax(scores, 2), nf.nn.log_softmax(scores, 2)], [X, K],
                     [x, keep], [F.softmax(masked, 2).numpy(), F.log_softmax(masked, 2).numpy()])


# -------------------------------------------------------------- 9. layer norm

@pytest.mark.parametrize("xshape,nshape", [((7, 1), (1,)), ((4, 33), (33,)), ((2, 3, 7), (3, 7))])
def test_layer_norm(xshape, nshape):
    x, w, b = rand(xshape, 1) * 3 + 1, rand(nshape, 2), rand(nshape, 3)
    X, W, B = ph(x, "x"), ph(w, "w"), ph(b, "b")
    ref = F.layer_norm(t(x), nshape, t(w), t(b)).numpy()
    check_three_ways(nf.nn.layer_norm(X, nshape, W, B), [X, W, B], [x, w, b], ref)


# ---------------------------------------------------- 10. batch-norm statistics

@pytest.mark.parametrize("xshape", [(7, 3), (2, 5, 7, 3), (33, 1, 2)])
def test_batch_norm_and_statistics(xshape):
    c = xshape[1]
    x, w, b = rand(xshape, 1) * 2 + 1, rand((c,), 2), rand((c,), 3)
    rm, rv = rand((c,), 4), rand((c,), 5, lo=0.5, hi=2.0)
    X, W, B, RM, RV = ph(x, "x"), ph(w, "w"), ph(b, "b"), ph(rm, "rm"), ph(rv, "rv")
    y = nf.nn.batch_norm(X, RM, RV, W, B, momentum=0.3)
    (_, new_rm), (_, new_rv) = nf.nn.state_updates(y)
    mean, var = nf.nn.batch_norm_stats(X)
    trm, trv = t(rm.copy()), t(rv.copy())
    ref_y = F.batch_norm(t(x), trm, trv, t(w), t(b), training=True, momentum=0.3).numpy()
    dims = (0,) + tuple(range(2, x.ndim))
    check_three_ways([y, mean, var, new_rm, new_rv], [X, W, B, RM, RV], [x, w, b, rm, rv],
                     [ref_y, x.mean(dims), x.var(dims), trm.numpy(), trv.numpy()])


# ---------------------------------------------- 11. mean / variance, two axes

@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 3, 33), (2, 5, 7)])
def test_mean_variance_over_two_axes_raw(shape):
    n0, c, n2 = shape
    x = rand(shape, 1) * 2 + 5
    X = ph(x, "x")
    i, k = nf.reduce_axis(n0, name="i"), nf.reduce_axis(n2, name="k")
    mean = nf.compute((c,), lambda j: nf.sum(X[i, j, k], axis=[i, k]) / float(n0 * n2),
                      name="mean")
    i2, k2 = nf.reduce_axis(n0, name="i2"), nf.reduce_axis(n2, name="k2")
    var = nf.compute((c,), lambda j: nf.sum((X[i2, j, k2] - mean[j]) * (X[i2, j, k2] - mean[j]),
                                            axis=[i2, k2]) * (1.0 / (n0 * n2)), name="var")
    x64 = x.astype(np.float64)
    check_three_ways([mean, var], [X], [x], [x64.mean((0, 2)), x64.var((0, 2))])


@pytest.mark.parametrize("shape,dim", [((7, 3, 33), (0, 2)), ((2, 5, 7), (-1, -2))])
def test_mean_variance_nn(shape, dim):
    x = rand(shape, 2, np.float64)
    X = ph(x, "x")
    check_three_ways([nf.nn.mean(X, dim, keepdim=True), nf.nn.var(X, dim)], [X], [x],
                     [x.mean(dim, keepdims=True), x.var(dim, ddof=1)], F64)


# ----------------------------------------------------------- 12. transpose

@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (33, 2)])
def test_transpose_raw(shape):
    a = rand(shape, 1)
    A = ph(a, "A")
    check_three_ways(nf.compute(shape[::-1], lambda i, j: A[j, i], name="AT"), [A], [a], a.T)


@pytest.mark.parametrize("shape,dims", [((2, 7, 3), (2, 0, 1)), ((1, 33, 1, 5), (3, 1, 0, 2))])
def test_permute_and_transpose_nn(shape, dims):
    a = rand(shape, 1)
    A = ph(a, "A")
    check_three_ways([nf.nn.permute(A, dims), nf.nn.transpose(A, 0, -1)], [A], [a],
                     [np.transpose(a, dims), np.swapaxes(a, 0, -1)])


# ------------------------------------------------------- 13. reshape, // and %

@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 7, 5), (1, 33, 1, 7)])
def test_reshape_floor_mod_raw(shape):
    n, c, h, w = shape
    x = rand(shape, 1)
    X = ph(x, "x")
    flat = nf.compute((n, c * h * w), lambda i, f: X[i, f // (h * w), (f // w) % h, f % w],
                      name="flat")
    check_three_ways(flat, [X], [x], x.reshape(n, -1))


@pytest.mark.parametrize("shape,new", [((4, 6), (3, 2, 4)), ((7, 33), (33, 7)),
                                       ((2, 3, 5), (5, 1, -1))])
def test_reshape_nn(shape, new):
    x = rand(shape, 1)
    X = ph(x, "x")
    check_three_ways([nf.nn.reshape(X, new), nf.nn.flatten(X)], [X], [x],
                     [x.reshape(new), x.reshape(-1)])


# -------------------------------------------------------------- 14. concat

@pytest.mark.parametrize("n1,n2,m", [(1, 1, 1), (7, 33, 3), (2, 5, 7)])
def test_concat_where_raw(n1, n2, m):
    a, b = rand((n1, m), 1), rand((n2, m), 2)
    A, B = ph(a, "A"), ph(b, "B")
    C = nf.compute((n1 + n2, m), lambda i, j: nf.where(i < n1, A[i, j], B[i - n1, j]), name="C")
    check_three_ways(C, [A, B], [a, b], np.concatenate([a, b], 0))


@pytest.mark.parametrize("shapes,dim", [([(2, 1, 3), (2, 7, 3), (2, 2, 3)], 1),
                                        ([(3, 33), (3, 1)], -1)])
def test_concat_nn(shapes, dim):
    arrays = [rand(s, k) for k, s in enumerate(shapes)]
    phs = [ph(a, f"a{k}") for k, a in enumerate(arrays)]
    check_three_ways(nf.nn.concat(phs, dim), phs, arrays, np.concatenate(arrays, dim))


# ----------------------------------------------------------------- 15. pad

@pytest.mark.parametrize("n,lo,hi", [(1, 1, 1), (7, 2, 0), (33, 0, 3)])
def test_pad_where_raw(n, lo, hi):
    a = rand((n,), 1)
    A = ph(a, "A")
    P = nf.compute((n + lo + hi,), lambda i: nf.where((i >= lo) & (i < lo + n), A[i - lo], -1.5),
                   name="P")
    check_three_ways(P, [A], [a], np.pad(a, (lo, hi), constant_values=-1.5))


@pytest.mark.parametrize("shape,pads", [((3, 7), (1, 2, 0, 1)), ((2, 1, 5), (-1, 2, 3, 3))])
def test_pad_nn(shape, pads):
    a = rand(shape, 1)
    A = ph(a, "A")
    check_three_ways(nf.nn.pad(A, pads, value=0.5), [A], [a],
                     F.pad(t(a), pads, value=0.5).numpy())


# ---------------------------------------------------------------- 16. slice

@pytest.mark.parametrize("n", [3, 8, 33])
def test_strided_slice_raw(n):
    a = rand((n, 2), 1)
    A = ph(a, "A")
    S = nf.compute((n // 2, 2), lambda i, j: A[2 * i + 1, j], name="S")
    check_three_ways(S, [A], [a], a[1::2])


@pytest.mark.parametrize("shape", [(7, 3), (33, 1)])
def test_slice_narrow_split_nn(shape):
    a = rand(shape, 1)
    A = ph(a, "A")
    outs = [nf.nn.narrow(A, 0, 1, 3), nf.nn.slice(A, 0, None, None, 2),
            *nf.nn.split(A, 2, dim=0)]
    refs = [a[1:4], a[::2], *np.split(a, range(2, shape[0], 2), 0)]
    check_three_ways(outs, [A], [a], refs)


# ------------------------------------------------------- 17. broadcasting

@pytest.mark.parametrize("ashape,bshape", [((1,), (1,)), ((7, 1, 33), (5, 1)), ((3, 4), (4,)),
                                           ((), (2, 3))])
def test_broadcast_arithmetic(ashape, bshape):
    a, b = rand(ashape, 1), rand(bshape, 2, lo=0.5, hi=2.0)
    A, B = ph(a, "A"), ph(b, "B")
    outs = [A + B, A - B, A * B, A / B, -A, 2.0 * A + 1.0, 1.0 / B, B - 3.0, (A + B) * 0.5 - A]
    refs = [a + b, a - b, a * b, a / b, -a, 2 * a + 1, 1 / b, b - 3, (a + b) * 0.5 - a]
    check_three_ways(outs, [A, B], [a, b], refs)


# -------------------------------------------------------------- 18. gather

@pytest.mark.parametrize("ishape,n,d", [((1,), 1, 1), ((7, 33), 40, 3), ((5,), 3, 7)])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_embedding_gather(ishape, n, d, itype):
    idx, table = ints(ishape, 0, n, 1, itype), rand((n, d), 2)
    I, T = ph(idx, "idx"), ph(table, "table")
    check_three_ways(nf.nn.embedding(I, T), [I, T], [idx, table], table[idx])


@pytest.mark.parametrize("n,m", [(1, 1), (7, 33)])
def test_gather_raw_rows_and_columns(n, m):
    idx, a = ints((n,), 0, m, 3, np.int32), rand((m, m), 4)
    I, A = ph(idx, "idx"), ph(a, "A")
    rows = nf.compute((n, m), lambda i, j: A[I[i], j], name="rows")
    cols = nf.compute((n,), lambda i: A[i % m, I[i]] * 2.0, name="cols")
    check_three_ways([rows, cols], [I, A], [idx, a], [a[idx], a[np.arange(n) % m, idx] * 2])


# ------------------------------------------------------- 19. pixel shuffle

@pytest.mark.parametrize("shape,r", [((1, 4, 1, 1), 2), ((2, 18, 7, 3), 3), ((3, 8, 5, 5), 2)])
def test_pixel_shuffle(shape, r):
    x = rand(shape, 1)
    X = ph(x, "x")
    check_three_ways(nf.nn.pixel_shuffle(X, r), [X], [x], F.pixel_shuffle(t(x), r).numpy())


# ------------------------------------------------ 20. capsule convolution (5-D)

@pytest.mark.parametrize("b,ic,oc,h,w,e,d,k,s", [(1, 1, 1, 1, 1, 1, 1, 1, 1),
                                                 (2, 3, 2, 7, 5, 4, 3, 3, 1),
                                                 (1, 2, 3, 9, 7, 2, 5, 3, 2)])
def test_capsule_conv(b, ic, oc, h, w, e, d, k, s):
    x, wt = rand((b, ic, h, w, e), 1), rand((ic, oc, k, k, e, d), 2)
    X, W = ph(x, "x"), ph(wt, "W")
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    rc, rh, rw, re = (nf.reduce_axis(n, name=nm) for n, nm in
                      ((ic, "rc"), (k, "rh"), (k, "rw"), (e, "re")))
    out = nf.compute((b, oc, ho, wo, d), lambda n, o, i, j, q: nf.sum(
        X[n, rc, i * s + rh, j * s + rw, re] * W[rc, o, rh, rw, re, q], axis=[rc, rh, rw, re]),
        name="capsule")
    ref = np.zeros((b, oc, ho, wo, d))
    for kh in range(k):
        for kw in range(k):
            win = x[:, :, kh:kh + s * (ho - 1) + 1:s, kw:kw + s * (wo - 1) + 1:s, :]
            ref += np.einsum("bihwe,ioed->bohwd", win.astype(np.float64), wt[:, :, kh, kw])
    check_three_ways(out, [X, W], [x, wt], ref)


# -------------------------------------------------- 21. unary intrinsics

UNARY = {
    "exp": (nf.exp, np.exp, None),
    "log": (nf.log, np.log, (0.1, 5.0)),
    "tanh": (nf.tanh, np.tanh, None),
    "sigmoid": (nf.sigmoid, lambda a: 1 / (1 + np.exp(-a)), None),
    "sqrt": (nf.sqrt, np.sqrt, (0.0, 9.0)),
    "rsqrt": (nf.rsqrt, lambda a: 1 / np.sqrt(a), (0.1, 9.0)),
    "abs": (nf.abs, np.abs, None),
    "erf": (nf.erf, lambda a: torch.erf(t(a)).numpy(), None),
    "neg": (lambda v: -v, np.negative, None),
}


@pytest.mark.parametrize("shape", [(1,), (7, 33)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_intrinsics(shape, dtype, name):
    fn, ref, rng = UNARY[name]
    a = rand(shape, 1, dtype) * 2 if rng is None else rand(shape, 1, dtype, *rng)
    A = ph(a, "A")
    out = nf.compute(shape, lambda *i: fn(A[i]), name=name)
    check_three_ways(out, [A], [a], ref(a.astype(np.float64)),
                     F32 if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12))


# ------------------------------------------------- 22. binary intrinsics

@pytest.mark.parametrize("shape", [(1,), (7, 33)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_intrinsics(shape, dtype):
    a, b = rand(shape, 1, dtype, 0.2, 3.0), rand(shape, 2, dtype) * 2
    A, B = ph(a, "A"), ph(b, "B")
    mk = lambda fn, name: nf.compute(shape, lambda *i: fn(A[i], B[i]), name=name)  # noqa: E731
    outs = [mk(nf.pow, "pow"), mk(lambda x, y: x ** 2.0, "square"), mk(nf.maximum, "maximum"),
            mk(nf.minimum, "minimum"), mk(lambda x, y: x / y + x * y - 3.0, "arith"),
            mk(lambda x, y: nf.pow(x, 0.5) + nf.floor(y), "powfloor")]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    refs = [a64 ** b64, a64 ** 2, np.maximum(a64, b64), np.minimum(a64, b64),
            a64 / b64 + a64 * b64 - 3, np.sqrt(a64) + np.floor(b64)]
    check_three_ways(outs, [A, B], [a, b], refs,
                     F32 if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12))


# ------------------------------------ 23. where, comparisons, & | ~, bool outputs

@pytest.mark.parametrize("shape", [(1,), (7, 33)])
def test_where_comparisons_and_logic(shape):
    a, b = rand(shape, 1), rand(shape, 2)
    a.flat[0] = b.flat[0]   # an equal pair
    A, B = ph(a, "A"), ph(b, "B")
    cmp = {"lt": (lambda x, y: x < y, np.less), "le": (lambda x, y: x <= y, np.less_equal),
           "gt": (lambda x, y: x > y, np.greater), "ge": (lambda x, y: x >= y, np.greater_equal),
           "eq": (lambda x, y: x == y, np.equal), "ne": (lambda x, y: x != y, np.not_equal)}
    outs = [nf.compute(shape, lambda *i, f=f: f(A[i], B[i]), name=n) for n, (f, _) in cmp.items()]
    refs = [r(a, b) for _, r in cmp.values()]
    outs += [nf.compute(shape, lambda *i: (A[i] > 0) & (B[i] < 0.5), name="and"),
             nf.compute(shape, lambda *i: (A[i] > 1) | ~(B[i] > -0.5), name="or_not"),
             nf.compute(shape, lambda *i: nf.where((A[i] > 0) & ~(B[i] > 0), A[i] * B[i],
                                                   nf.where(A[i] > B[i], A[i], -B[i])),
                        name="where")]
    refs += [(a > 0) & (b < 0.5), (a > 1) | ~(b > -0.5),
             np.where((a > 0) & ~(b > 0), a * b, np.where(a > b, a, -b))]
    check_three_ways(outs, [A, B], [a, b], refs)


# ------------------------------------------------------ 24. cast and const

@pytest.mark.parametrize("shape", [(1,), (7, 33)])
def test_cast_and_const(shape):
    a = rand(shape, 1) * 10
    n = ints(shape, -50, 50, 2, np.int32)
    A, N = ph(a, "A"), ph(n, "N")
    outs = [nf.compute(shape, lambda *i: nf.cast(A[i], "int32"), name="f2i"),      # truncates
            nf.compute(shape, lambda *i: nf.cast(A[i], "int64"), name="f2l"),
            nf.compute(shape, lambda *i: nf.cast(N[i], "float32") * 0.5, name="i2f"),
            nf.compute(shape, lambda *i: nf.cast(A[i], "float64") + nf.const(0.25, "float64"),
                       name="f2d"),
            nf.compute(shape, lambda *i: nf.cast(A[i] > 0, "float32"), name="b2f"),
            nf.compute(shape, lambda *i: N[i] * nf.const(3, "int32") + 1, name="iconst"),
            nf.compute(shape, lambda *i: nf.cast(i[-1], "float32") + A[i], name="idx2f")]
    refs = [np.trunc(a).astype(np.int32), np.trunc(a).astype(np.int64), n * np.float32(0.5),
            a.astype(np.float64) + 0.25, (a > 0).astype(np.float32), n * 3 + 1,
            np.arange(shape[-1]) + a]
    check_three_ways(outs, [A, N], [a, n], refs)


# -------------------------------- 25. // and % on negative values (values, indices)

@pytest.mark.parametrize("shape", [(1,), (7, 33)])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_floordiv_mod_negative(shape, itype):
    n = ints(shape, -40, 40, 1, itype)
    n.flat[0] = -7
    N = ph(n, "N")
    outs = [nf.compute(shape, lambda *i: N[i] // 3, name="fd3"),
            nf.compute(shape, lambda *i: N[i] % 3, name="md3"),
            nf.compute(shape, lambda *i: N[i] // -4, name="fdm4"),
            nf.compute(shape, lambda *i: N[i] % -4, name="mdm4"),
            nf.compute(shape, lambda *i: (N[i] - 5) // 2 + (N[i] + 1) % 7, name="mix")]
    refs = [n // 3, n % 3, n // -4, n % -4, (n - 5) // 2 + (n + 1) % 7]
    check_three_ways(outs, [N], [n], refs)


@pytest.mark.parametrize("m", [1, 7, 33])
def test_floordiv_mod_negative_indices(m):
    a = rand((m,), 1)
    A = ph(a, "A")
    # (i - 5) is negative for small i: Python's floor semantics keep the index in range
    rot = nf.compute((m,), lambda i: A[(i - 5) % m], name="rot")
    half = nf.compute((2 * m,), lambda i: A[(i - 2 * m) // 2 + m], name="half")
    r, r2 = np.arange(m), np.arange(2 * m)
    check_three_ways([rot, half], [A], [a], [a[(r - 5) % m], a[(r2 - 2 * m) // 2 + m]])


# --------------------------------------------------- 26. integer dtypes

@pytest.mark.parametrize("shape", [(1, 1), (7, 33)])
def test_integer_dtypes(shape):
    p, q = ints(shape, -1000, 1000, 1, np.int32), ints(shape, -10**9, 10**9, 2, np.int64)
    P, Q = ph(p, "P"), ph(q, "Q")
    k = nf.reduce_axis(shape[1], name="k")
    outs = [nf.compute(shape, lambda i, j: P[i, j] * 3 - P[i, j] // 7, name="i32"),
            nf.compute(shape, lambda i, j: Q[i, j] + P[i, j], name="widen"),       # int64
            nf.compute(shape, lambda i, j: nf.maximum(P[i, j], 0) + nf.abs(P[i, j]),
                       name="maxabs"),
            nf.compute(shape[:1], lambda i: nf.sum(Q[i, k], axis=k), name="sum64"),
            nf.compute(shape[:1], lambda i: nf.max(P[i, k], axis=k), name="max32"),
            nf.compute(shape, lambda i, j: P[i, j] > Q[i, j] // 1000000, name="gtbool")]
    refs = [p * 3 - p // 7, q + p, np.maximum(p, 0) + np.abs(p), q.sum(1), p.max(1),
            p > q // 1000000]
    check_three_ways(outs, [P, Q], [p, q], refs)


# ------------------------------------------------ 27. max / min reductions

@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (33, 7)])
def test_max_min_reductions(shape):
    a = rand(shape, 1)
    A = ph(a, "A")
    k, r = nf.reduce_axis(shape[1], name="k"), nf.reduce_axis(shape[0], name="r")
    k2, r2 = nf.reduce_axis(shape[1], name="k2"), nf.reduce_axis(shape[0], name="r2")
    outs = [nf.compute(shape[:1], lambda i: nf.max(A[i, k], axis=k), name="rowmax"),
            nf.compute(shape[1:], lambda j: nf.min(A[r, j], axis=r), name="colmin"),
            nf.compute((), lambda: nf.max(A[r2, k2], axis=[r2, k2]), name="allmax"),
            nf.nn.amin(A, dim=(0, 1))]
    check_three_ways(outs, [A], [a], [a.max(1), a.min(0), a.max(), a.min()])


# ------------------------------------------------ 28. masked reductions (where=)

@pytest.mark.parametrize("n", [1, 7, 33])
def test_masked_reduction(n):
    a = rand((n, n), 1)
    A = ph(a, "A")
    k, k2, k3 = (nf.reduce_axis(n, name=nm) for nm in ("k", "k2", "k3"))
    tri = nf.compute((n,), lambda i: nf.sum(A[i, k], axis=k, where=k <= i), name="trisum")
    even = nf.compute((n,), lambda i: nf.max(A[i, k2], axis=k2, where=(k2 % 2 == 0)),
                      name="evenmax")
    band = nf.compute((n,), lambda i: nf.min(A[k3, i], axis=k3,
                                             where=(k3 >= i - 1) & (k3 <= i + 1)), name="band")
    mask = np.tril(np.ones((n, n), bool))
    band_ref = np.array([a[max(0, i - 1):i + 2, i].min() for i in range(n)])
    check_three_ways([tri, even, band], [A], [a],
                     [np.where(mask, a, 0).sum(1), a[:, ::2].max(1), band_ref])


# ------------------------------------- 29. a reduction inside another's body

@pytest.mark.parametrize("m,n", [(1, 1), (7, 33), (33, 7)])
def test_nested_reduction(m, n):
    a, b = rand((m, n), 1), rand((n, m), 2)
    A, B = ph(a, "A"), ph(b, "B")
    k, j = nf.reduce_axis(n, name="k"), nf.reduce_axis(m, name="j")
    # out[i] = sum_k A[i, k] * max_j B[k, j]
    out = nf.compute((m,), lambda i: nf.sum(A[i, k] * nf.max(B[k, j], axis=j), axis=k),
                     name="nested")
    k2, j2 = nf.reduce_axis(n, name="k2"), nf.reduce_axis(n, name="j2")
    # softmax's normaliser in one body: out2[i] = sum_k exp(A[i, k] - max_j A[i, j])
    out2 = nf.compute((m,), lambda i: nf.sum(nf.exp(A[i, k2] - nf.max(A[i, j2], axis=j2)),
                                             axis=k2), name="nested2")
    ref2 = np.exp(a - a.max(1, keepdims=True)).sum(1)
    check_three_ways([out, out2], [A, B], [a, b], [a @ b.max(1), ref2])


# --------------------------------------------- 30. dense and activations (nn)

@pytest.mark.parametrize("xshape,out", [((1,), 1), ((7, 33), 5), ((2, 3, 7), 4)])
def test_dense_activations(xshape, out):
    x, w, b = rand(xshape, 1), rand((out, xshape[-1]), 2), rand((out,), 3)
    X, W, B = ph(x, "x"), ph(w, "w"), ph(b, "b")
    h = nf.nn.dense(X, W, B)
    outs = [h, nf.nn.relu(h), nf.nn.gelu(h), nf.nn.gelu(h, approximate="tanh"), nf.nn.elu(h),
            nf.nn.sigmoid(h), nf.nn.tanh(h)]
    th = F.linear(t(x), t(w), t(b))
    refs = [th, F.relu(th), F.gelu(th), F.gelu(th, approximate="tanh"), F.elu(th),
            torch.sigmoid(th), torch.tanh(th)]
    check_three_ways(outs, [X, W, B], [x, w, b], [r.numpy() for r in refs])


# ------------------------------------------------------------- 31. losses

@pytest.mark.parametrize("n,c", [(1, 1), (7, 33), (33, 2)])
@pytest.mark.parametrize("ltype", [np.int32, np.int64])
def test_losses(n, c, ltype):
    x, y, z = rand((n, c), 1) * 3, ints((n,), 0, c, 2, ltype), rand((n, c), 3)
    X, Y, Z = ph(x, "logits"), ph(y, "labels"), ph(z, "target")
    ce, mse = nf.nn.cross_entropy(X, Y), nf.nn.mse_loss(X, Z)
    assert ce.shape == () and mse.shape == ()
    refs = [F.cross_entropy(t(x), t(y).long()).numpy(), F.mse_loss(t(x), t(z)).numpy()]
    check_three_ways([ce, mse], [X, Y, Z], [x, y, z], refs)


def test_cross_entropy_float64_ignore_index():
    x, y = rand((9, 7), 1, np.float64) * 3, ints((9,), 0, 7, 2)
    y[[0, 5]] = -100
    X, Y = ph(x, "logits"), ph(y, "labels")
    check_three_ways(nf.nn.cross_entropy(X, Y), [X, Y], [x, y],
                     F.cross_entropy(t(x), t(y)).numpy(), F64)


# ------------------------------------------------- 32. sums and means (nn)

@pytest.mark.parametrize("shape,dim", [((7,), None), ((7, 33), -1), ((2, 3, 5), (0, 2))])
def test_sum_mean_nn(shape, dim):
    x = rand(shape, 1)
    X = ph(x, "x")
    n = ints(shape, -9, 9, 2, np.int32)
    N = ph(n, "n")
    outs = [nf.nn.sum(X, dim), nf.nn.mean(X, dim, keepdim=True), nf.nn.sum(N, dim)]
    refs = [torch.sum(t(x), dim) if dim is not None else torch.sum(t(x)),
            torch.mean(t(x), dim, keepdim=True) if dim is not None else
            torch.mean(t(x), dim=None, keepdim=True),
            torch.sum(t(n), dim) if dim is not None else torch.sum(t(n))]
    check_three_ways(outs, [X, N], [x, n], [r.numpy() for r in refs])

