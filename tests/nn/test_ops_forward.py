# nn operators against PyTorch: every op in float64 through nf.evaluate on
# random inputs (fixed seeds), many shapes and argument combinations; geometry
# that torch rejects must be rejected too; and each user error names the
# tensor, the dimension and the expected value.
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import neoflow as nf

# torch's own warnings about its padding strategy and degenerate variances
pytestmark = [pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning"),
              pytest.mark.filterwarnings("ignore:var\\(\\).*degrees of freedom:UserWarning")]

RTOL, ATOL = 1e-10, 1e-12


def rand(shape, seed=0, scale=1.0):
    """Random float64 data (never all zeros)."""
    return np.asarray(np.random.default_rng(seed).standard_normal(shape) * scale)


def labels(shape, n_classes, seed=0, dtype=np.int64):
    return np.random.default_rng(seed).integers(0, n_classes, size=shape).astype(dtype)


def check(nf_fn, torch_fn, *arrays, rtol=RTOL, atol=ATOL):
    """Build `nf_fn` over placeholders for `arrays`, evaluate it, and compare
    with `torch_fn` on the same arrays (tuples compared elementwise)."""
    phs = [nf.placeholder(a.shape, a.dtype.name, name=f"in{k}") for k, a in enumerate(arrays)]
    out = nf_fn(*phs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    got = nf.evaluate(outs, dict(zip(phs, arrays)))
    ref = torch_fn(*[torch.from_numpy(a) for a in arrays])
    refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    assert len(got) == len(refs)
    for t, g, r in zip(outs, got, refs):
        r = r.detach().numpy()
        assert t.shape == r.shape, (t.shape, r.shape)
        assert g.shape == r.shape
        assert g.dtype == r.dtype, (g.dtype, r.dtype)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return outs


def check_or_both_reject(nf_fn, torch_fn, *arrays):
    """Like `check`, but when torch rejects the arguments NeoFlow must too."""
    try:
        torch_fn(*[torch.from_numpy(a) for a in arrays])
    except (RuntimeError, ValueError):
        phs = [nf.placeholder(a.shape, a.dtype.name) for a in arrays]
        with pytest.raises(nf.NeoFlowError):
            nf_fn(*phs)
        return
    check(nf_fn, torch_fn, *arrays)


# --------------------------------------------------------------------- linear

@pytest.mark.parametrize("xshape,out", [((7,), 3), ((4, 8), 5), ((2, 3, 33), 1), ((1, 1), 7)])
@pytest.mark.parametrize("bias", [False, True])
def test_dense(xshape, out, bias):
    x, w, b = rand(xshape, 1), rand((out, xshape[-1]), 2), rand((out,), 3)
    if bias:
        check(lambda x, w, b: nf.nn.dense(x, w, b), F.linear, x, w, b)
    else:
        check(lambda x, w: nf.nn.dense(x, w), F.linear, x, w)


def test_dense_vector_weight():
    x, w = rand((5, 7), 1), rand((7,), 2)
    check(nf.nn.dense, F.linear, x, w)
    check(nf.nn.dense, F.linear, rand((7,), 3), w)


@pytest.mark.parametrize("ashape,bshape", [
    ((7,), (7,)), ((3, 7), (7,)), ((7,), (7, 4)), ((3, 7), (7, 4)), ((1, 1), (1, 33)),
    ((2, 3, 5), (5, 4)), ((5,), (2, 5, 4)), ((2, 3, 5), (5,)), ((2, 1, 3, 5), (4, 5, 2)),
    ((4, 3, 5), (4, 5, 2)), ((1, 3, 5), (6, 5, 2)), ((2, 1, 3, 5), (1, 7, 5, 2))])
def test_matmul(ashape, bshape):
    check(nf.nn.matmul, torch.matmul, rand(ashape, 1), rand(bshape, 2))


@pytest.mark.parametrize("b,n,k,m", [(1, 1, 1, 1), (3, 7, 5, 2), (2, 4, 33, 3)])
def test_batch_matmul(b, n, k, m):
    check(nf.nn.batch_matmul, torch.bmm, rand((b, n, k), 1), rand((b, k, m), 2))


# ----------------------------------------------------------------------- conv

CONV2D_CASES = [
    (s, d, p, g) for s, d, p, g in itertools.product(
        (1, 2, 3), (1, 2), (0, 1, 2, "same", "valid"), ("1", "2", "dw"))
    if not (p == "same" and s != 1)]


@pytest.mark.parametrize("stride,dilation,padding,groups", CONV2D_CASES)
def test_conv2d(stride, dilation, padding, groups):
    cin = 4
    g = {"1": 1, "2": 2, "dw": cin}[groups]
    cout = {"1": 3, "2": 6, "dw": 8}[groups]   # depthwise with multiplier 2
    kernel = [(3, 3), (2, 3), (1, 1)][(stride + dilation) % 3]
    x = rand((2, cin, 7, 9), 1)
    w = rand((cout, cin // g, *kernel), 2)
    b = rand((cout,), 3)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=g)
    check_or_both_reject(lambda x, w, b: nf.nn.conv2d(x, w, b, **kw),
                         lambda x, w, b: F.conv2d(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("xshape,wshape,kw", [
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ((3, 5, 5), (2, 3, 3, 3), dict(padding=1)),                       # unbatched
    ((1, 3, 33, 7), (5, 3, 4, 2), dict(stride=(3, 1), padding=(2, 0), dilation=(1, 2))),
    ((2, 6, 8, 8), (6, 1, 3, 3), dict(groups=6, padding="same")),     # depthwise
    ((2, 2, 6, 7), (4, 2, 4, 4), dict(padding="same", dilation=2)),   # asymmetric 'same'
    ((1, 2, 7, 7), (2, 2, 7, 7), {}),                                 # output 1x1
])
def test_conv2d_shapes(xshape, wshape, kw):
    for bias in (False, True):
        x, w, b = rand(xshape, 1), rand(wshape, 2), rand(wshape[:1], 3)
        if bias:
            check(lambda x, w, b: nf.nn.conv2d(x, w, b, **kw),
                  lambda x, w, b: F.conv2d(x, w, b, **kw), x, w, b)
        else:
            check(lambda x, w: nf.nn.conv2d(x, w, **kw), lambda x, w: F.conv2d(x, w, **kw), x, w)


@pytest.mark.parametrize("stride,dilation,padding,groups", [
    (1, 1, 0, 1), (2, 1, 1, 1), (3, 2, 2, 2), (1, 2, "same", 4), (1, 1, "valid", 2),
    (2, 2, 0, 4), (1, 1, "same", 1)])
@pytest.mark.parametrize("length,k", [(33, 3), (7, 4), (5, 1)])
def test_conv1d(stride, dilation, padding, groups, length, k):
    x, w, b = rand((2, 4, length), 1), rand((4, 4 // groups, k), 2), rand((4,), 3)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check_or_both_reject(lambda x, w, b: nf.nn.conv1d(x, w, b, **kw),
                         lambda x, w, b: F.conv1d(x, w, b, **kw), x, w, b)


def test_conv1d_unbatched():
    x, w = rand((3, 7), 1), rand((2, 3, 3), 2)
    check(lambda x, w: nf.nn.conv1d(x, w, padding=1), lambda x, w: F.conv1d(x, w, padding=1),
          x, w)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_conv2d_random_geometry(data):
    draw = lambda lo, hi: data.draw(st.integers(lo, hi))   # noqa: E731
    groups, cin_g, cout_g = draw(1, 3), draw(1, 2), draw(1, 2)
    x = rand((draw(1, 2), groups * cin_g, draw(1, 9), draw(1, 9)), draw(0, 99))
    w = rand((groups * cout_g, cin_g, draw(1, 4), draw(1, 4)), draw(0, 99))
    padding = data.draw(st.one_of(st.tuples(st.integers(0, 3), st.integers(0, 3)),
                                  st.sampled_from(["same", "valid"])))
    kw = dict(stride=(draw(1, 3), draw(1, 3)), dilation=(draw(1, 3), draw(1, 3)),
              padding=padding, groups=groups)
    check_or_both_reject(lambda x, w: nf.nn.conv2d(x, w, **kw),
                         lambda x, w: F.conv2d(x, w, **kw), x, w)


# -------------------------------------------------------------------- pooling

POOL_CASES = list(itertools.product((1, 2, 3), (None, 1, 2, 3), (0, 1), (False, True)))


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode", POOL_CASES)
@pytest.mark.parametrize("dilation", [1, 2])
def test_max_pool2d(kernel, stride, padding, ceil_mode, dilation):
    x = rand((2, 3, 7, 8), 1)
    kw = dict(kernel_size=kernel, stride=stride, padding=padding, dilation=dilation,
              ceil_mode=ceil_mode)
    check_or_both_reject(lambda x: nf.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), x)


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool2d(kernel, stride, padding, ceil_mode, count_include_pad):
    x = rand((2, 3, 7, 8), 1)
    kw = dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode,
              count_include_pad=count_include_pad)
    check_or_both_reject(lambda x: nf.nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), x)


@pytest.mark.parametrize("xshape,kw", [
    ((1, 1, 1, 1), dict(kernel_size=1)),
    ((3, 33, 5), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), ceil_mode=True)),
    ((1, 2, 5, 5), dict(kernel_size=3, stride=3, ceil_mode=True)),   # windows cut at the right
    ((1, 1, 6, 6), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True)),
])
def test_pool_shapes(xshape, kw):
    x = rand(xshape, 4)
    check(lambda x: nf.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), x)
    for cip in (False, True):
        check(lambda x: nf.nn.avg_pool2d(x, **kw, count_include_pad=cip),
              lambda x: F.avg_pool2d(x, **kw, count_include_pad=cip), x)
    check(lambda x: nf.nn.avg_pool2d(x, **kw, divisor_override=3),
          lambda x: F.avg_pool2d(x, **kw, divisor_override=3), x)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_pool_random_geometry(data):
    draw = lambda lo, hi: data.draw(st.integers(lo, hi))   # noqa: E731
    x = rand((draw(1, 2), draw(1, 2), draw(1, 9), draw(1, 9)), draw(0, 99))
    k = (draw(1, 4), draw(1, 4))
    kw = dict(kernel_size=k, stride=(draw(1, 4), draw(1, 4)),
              padding=(draw(0, k[0] // 2), draw(0, k[1] // 2)),
              ceil_mode=data.draw(st.booleans()))
    dilation = (draw(1, 3), draw(1, 3))
    check_or_both_reject(lambda x: nf.nn.max_pool2d(x, **kw, dilation=dilation),
                         lambda x: F.max_pool2d(x, **kw, dilation=dilation), x)
    cip = data.draw(st.booleans())
    check_or_both_reject(lambda x: nf.nn.avg_pool2d(x, **kw, count_include_pad=cip),
                         lambda x: F.avg_pool2d(x, **kw, count_include_pad=cip), x)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=0, max_size=4), st.data())
def test_reshape_random(shape, data):
    # the new shape: the old dims shuffled, some neighbours merged, some 1s inserted
    dims = data.draw(st.permutations(shape))
    new = []
    for d in dims:
        if new and data.draw(st.booleans()):
            new[-1] *= d
        else:
            new.append(d)
        if data.draw(st.integers(0, 3)) == 0:
            new.append(1)
    new = tuple(new)
    check(lambda x: nf.nn.reshape(x, new), lambda x: torch.reshape(x, new),
          rand(tuple(shape), 1))


def test_max_pool2d_int():
    x = np.random.default_rng(0).integers(-50, 50, (2, 3, 7, 7)).astype(np.int64)
    check(lambda x: nf.nn.max_pool2d(x, 3, 2, 1), lambda x: F.max_pool2d(x, 3, 2, 1), x)


# ------------------------------------------------------------- normalisation

@pytest.mark.parametrize("xshape", [(7, 3), (4, 5, 33), (2, 3, 5, 7), (1, 2, 3)])
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(xshape, affine, training):
    c = xshape[1]
    x = rand(xshape, 1, 3.0) + 2.0
    rm, rv = rand((c,), 2), np.abs(rand((c,), 3)) + 0.5
    w, b = rand((c,), 4), rand((c,), 5)
    if affine:
        check(lambda x, rm, rv, w, b: nf.nn.batch_norm(x, rm, rv, w, b, training=training,
                                                       eps=1e-3),
              lambda x, rm, rv, w, b: F.batch_norm(x, rm.clone(), rv.clone(), w, b,
                                                   training=training, eps=1e-3),
              x, rm, rv, w, b)
    else:
        check(lambda x, rm, rv: nf.nn.batch_norm(x, rm, rv, training=training),
              lambda x, rm, rv: F.batch_norm(x, rm.clone(), rv.clone(), training=training),
              x, rm, rv)


def test_batch_norm_without_running_stats():
    x = rand((6, 4, 3), 1)
    check(lambda x: nf.nn.batch_norm(x, None, None), lambda x: F.batch_norm(x, None, None,
                                                                            training=True), x)


@pytest.mark.parametrize("xshape,momentum", [((7, 3), 0.1), ((2, 4, 5, 5), 0.3),
                                             ((1, 2, 33), 1.0)])
def test_batch_norm_running_stats(xshape, momentum):
    c = xshape[1]
    x, rm, rv = rand(xshape, 1) * 2 + 1, rand((c,), 2), np.abs(rand((c,), 3)) + 0.5

    def reference(x, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        F.batch_norm(x, rm, rv, training=True, momentum=momentum)
        return rm, rv

    check(lambda x, rm, rv: nf.nn.batch_norm_running_stats(x, rm, rv, momentum), reference,
          x, rm, rv)

    def mean_var(x):
        dims = [0] + list(range(2, x.ndim))
        return x.mean(dims), x.var(dims, unbiased=False)

    check(nf.nn.batch_norm_stats, mean_var, x)


def test_batch_norm_state_updates():
    x = nf.placeholder((4, 3, 5), "float64", name="x")
    rm = nf.parameter((3,), init="zeros", dtype="float64", name="rm", requires_grad=False)
    rv = nf.parameter((3,), init="ones", dtype="float64", name="rv", requires_grad=False)
    loss = nf.nn.mean(nf.nn.relu(nf.nn.batch_norm(x, rm, rv, momentum=0.2)))
    pairs = nf.nn.state_updates(loss)
    assert [p.name for p, _ in pairs] == ["rm", "rv"]
    xa = rand((4, 3, 5), 7)
    got = nf.evaluate([t for _, t in pairs], {x: xa, rm: np.zeros(3), rv: np.ones(3)})
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    F.batch_norm(torch.from_numpy(xa), trm, trv, training=True, momentum=0.2)
    np.testing.assert_allclose(got[0], trm.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got[1], trv.numpy(), rtol=RTOL, atol=ATOL)
    assert nf.nn.state_updates(nf.nn.batch_norm(x, rm, rv, training=False)) == []


@pytest.mark.parametrize("xshape,nshape", [((7,), 7), ((4, 33), (33,)), ((2, 3, 5), (3, 5)),
                                           ((2, 1, 7), 7), ((3, 1), 1)])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(xshape, nshape, affine):
    ns = (nshape,) if isinstance(nshape, int) else nshape
    x, w, b = rand(xshape, 1, 2.0) + 1.0, rand(ns, 2), rand(ns, 3)
    if affine:
        check(lambda x, w, b: nf.nn.layer_norm(x, nshape, w, b, eps=1e-4),
              lambda x, w, b: F.layer_norm(x, ns, w, b, eps=1e-4), x, w, b)
    else:
        check(lambda x: nf.nn.layer_norm(x, nshape), lambda x: F.layer_norm(x, ns), x)


# ---------------------------------------------------------------- activations

ACT_SHAPES = [(7,), (2, 33), (1, 3, 5)]


@pytest.mark.parametrize("shape", ACT_SHAPES)
@pytest.mark.parametrize("name,nf_fn,torch_fn", [
    ("relu", nf.nn.relu, F.relu),
    ("gelu", nf.nn.gelu, F.gelu),
    ("gelu_tanh", lambda x: nf.nn.gelu(x, approximate="tanh"),
     lambda x: F.gelu(x, approximate="tanh")),
    ("elu", nf.nn.elu, F.elu),
    ("elu_alpha", lambda x: nf.nn.elu(x, alpha=0.3), lambda x: F.elu(x, alpha=0.3)),
    ("sigmoid", nf.nn.sigmoid, torch.sigmoid),
    ("tanh", nf.nn.tanh, torch.tanh),
])
def test_activation(shape, name, nf_fn, torch_fn):
    check(nf_fn, torch_fn, rand(shape, 1, 3.0))


def test_activation_float32():
    x = rand((3, 7), 1).astype(np.float32)
    check(nf.nn.gelu, F.gelu, x, rtol=1e-6, atol=1e-6)
    check(nf.nn.sigmoid, torch.sigmoid, x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,dim", [((7,), 0), ((7,), -1), ((4, 33), 1), ((4, 33), 0),
                                       ((2, 3, 5), -2), ((2, 3, 5), 2), ((3, 1), 1), ((), 0)])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax(shape, dim, fn):
    check(lambda x: getattr(nf.nn, fn)(x, dim), lambda x: getattr(F, fn)(x, dim),
          rand(shape, 1, 3.0))


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_stable_and_dtype(fn):
    x = rand((3, 7), 2, 400.0)   # exp would overflow without subtracting the max
    check(lambda x: getattr(nf.nn, fn)(x, -1), lambda x: getattr(F, fn)(x, -1), x)
    x32 = rand((3, 7), 3).astype(np.float32)
    check(lambda x: getattr(nf.nn, fn)(x, 1, dtype="float64"),
          lambda x: getattr(F, fn)(x, 1, dtype=torch.float64), x32)


# ------------------------------------------------------------------ embedding

@pytest.mark.parametrize("ishape,n,d", [((7,), 5, 3), ((2, 33), 40, 1), ((), 3, 4),
                                        ((1, 3, 2), 1, 7)])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_embedding(ishape, n, d, itype):
    check(nf.nn.embedding, F.embedding, labels(ishape, n, 1, itype), rand((n, d), 2))


def test_embedding_out_of_range_raises():
    ids, table = nf.placeholder((3,), "int64", "ids"), nf.placeholder((4, 2), "float64", "tab")
    with pytest.raises(nf.NeoFlowError, match="tab"):
        nf.evaluate(nf.nn.embedding(ids, table), {ids: np.array([0, 4, 1]),
                                                  table: rand((4, 2))})


# ---------------------------------------------------------------------- shape

@pytest.mark.parametrize("shape,new", [
    ((4, 6), (2, -1, 3)), ((4, 6), (24,)), ((2, 3, 5), (5, 6)), ((2, 3, 5), (2, 15)),
    ((7,), (7, 1)), ((1, 7, 1), (7,)), ((), (1, 1)), ((1,), ()), ((3, 4, 5, 2), (3, 2, 10, 2)),
    ((33, 2), (2, 3, 11))])
def test_reshape(shape, new):
    check(lambda x: nf.nn.reshape(x, new), lambda x: torch.reshape(x, new), rand(shape, 1))


@pytest.mark.parametrize("shape,start,end", [((2, 3, 4, 5), 1, -1), ((2, 3, 4), 0, 1),
                                             ((7,), 0, -1), ((2, 3, 4), -2, -2)])
def test_flatten(shape, start, end):
    check(lambda x: nf.nn.flatten(x, start, end), lambda x: torch.flatten(x, start, end),
          rand(shape, 1))


@pytest.mark.parametrize("shape,d0,d1", [((3, 7), 0, 1), ((2, 3, 5), -1, 0), ((2, 3, 5), 1, 1),
                                         ((1, 33), -2, -1)])
def test_transpose(shape, d0, d1):
    check(lambda x: nf.nn.transpose(x, d0, d1), lambda x: torch.transpose(x, d0, d1),
          rand(shape, 1))


@pytest.mark.parametrize("shape,dims", [((3, 7), (1, 0)), ((2, 3, 5), (2, 0, 1)),
                                        ((2, 3, 5, 1), (-1, 1, -4, 2)), ((7,), (0,))])
def test_permute(shape, dims):
    check(lambda x: nf.nn.permute(x, dims), lambda x: torch.permute(x, dims), rand(shape, 1))


@pytest.mark.parametrize("shapes,dim", [
    ([(2, 3)], 0), ([(2, 3), (5, 3)], 0), ([(2, 3), (2, 1), (2, 33)], 1),
    ([(2, 3, 4), (2, 1, 4), (2, 7, 4)], -2), ([(1,), (7,)], -1), ([(2, 3), (2, 3)], -1)])
def test_concat(shapes, dim):
    arrays = [rand(s, k) for k, s in enumerate(shapes)]
    check(lambda *xs: nf.nn.concat(list(xs), dim), lambda *xs: torch.cat(xs, dim), *arrays)


@pytest.mark.parametrize("shape,sizes,dim", [((7, 2), 3, 0), ((7, 2), 7, 0), ((2, 33), 8, -1),
                                             ((4, 7), [1, 4, 2], 1), ((5, 3, 2), (5,), 0),
                                             ((5, 3, 2), [1, 1, 1], -2)])
def test_split(shape, sizes, dim):
    check(lambda x: nf.nn.split(x, sizes, dim), lambda x: torch.split(x, sizes, dim),
          rand(shape, 1))


@pytest.mark.parametrize("shape,dim,start,length", [((7, 3), 0, 2, 4), ((7, 3), -1, 1, 2),
                                                    ((33,), 0, -5, 5), ((2, 1), 1, 0, 1)])
def test_narrow(shape, dim, start, length):
    check(lambda x: nf.nn.narrow(x, dim, start, length),
          lambda x: torch.narrow(x, dim, start, length), rand(shape, 1))


@pytest.mark.parametrize("shape,dim,start,end,step", [
    ((7, 3), 0, 1, None, 2), ((7, 3), -1, None, -1, 1), ((33,), 0, -10, 30, 3),
    ((4, 5), 1, 2, 100, 1), ((4, 5), 0, None, None, 5)])
def test_slice(shape, dim, start, end, step):
    def reference(x):
        idx = [slice(None)] * x.ndim
        idx[dim] = slice(start, end, step)
        return x[tuple(idx)]
    check(lambda x: nf.nn.slice(x, dim, start, end, step), reference, rand(shape, 1))


@pytest.mark.parametrize("shape,pads,value", [
    ((3, 4), (1, 2), None), ((3, 4), (1, 2, 0, 3), 1.5), ((2, 3, 5), (0, 0, 2, 1, 1, 1), -2.0),
    ((7,), (-2, 3), None), ((3, 4), (-1, -1, 2, -1), 0.25), ((1,), (1, 1), None)])
def test_pad(shape, pads, value):
    check(lambda x: nf.nn.pad(x, pads, value=value),
          lambda x: F.pad(x, pads, value=value), rand(shape, 1))


def test_pad_int():
    x = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    check(lambda x: nf.nn.pad(x, (1, 1, 2, 0), value=7), lambda x: F.pad(x, (1, 1, 2, 0),
                                                                         value=7), x)


@pytest.mark.parametrize("shape,r", [((1, 8, 3, 3), 2), ((2, 9, 1, 2), 3), ((4, 5, 7), 1),
                                     ((2, 1, 4, 3, 3), 2)])
def test_pixel_shuffle(shape, r):
    check(lambda x: nf.nn.pixel_shuffle(x, r), lambda x: F.pixel_shuffle(x, r), rand(shape, 1))


# ------------------------------------------------------------------ reductions

REDUCE_CASES = [((7,), None), ((7,), 0), ((4, 33), -1), ((4, 33), (0, 1)), ((2, 3, 5), (0, -1)),
                ((2, 3, 5), 1), ((2, 1, 5), (1,)), ((2, 3, 5), ()), ((), None)]


@pytest.mark.parametrize("shape,dim", REDUCE_CASES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("fn", ["sum", "mean", "amax", "amin"])
def test_reductions(shape, dim, keepdim, fn):
    if fn in ("amax", "amin"):
        ref = lambda x: getattr(torch, fn)(x, dim=() if dim is None else dim,  # noqa: E731
                                           keepdim=keepdim)
    elif dim is None and keepdim:
        ref = lambda x: getattr(torch, fn)(x, dim=None, keepdim=True)   # noqa: E731
    elif dim is None:
        ref = lambda x: getattr(torch, fn)(x)                           # noqa: E731
    else:
        ref = lambda x: getattr(torch, fn)(x, dim, keepdim=keepdim)     # noqa: E731
    nf_dim = () if dim is None and fn in ("amax", "amin") else dim
    check(lambda x: getattr(nf.nn, fn)(x, nf_dim, keepdim=keepdim), ref, rand(shape, 1))


@pytest.mark.parametrize("shape,dim", [((7,), None), ((4, 33), -1), ((2, 3, 5), (0, 2)),
                                       ((2, 3, 5), 1), ((1, 5), 0)])
@pytest.mark.parametrize("unbiased", [True, False])
@pytest.mark.parametrize("keepdim", [False, True])
def test_var(shape, dim, unbiased, keepdim):
    check(lambda x: nf.nn.var(x, dim, unbiased, keepdim),
          lambda x: torch.var(x, dim, unbiased=unbiased, keepdim=keepdim),
          rand(shape, 1, 2.0) + 3.0)


def test_var_correction():
    check(lambda x: nf.nn.var(x, 1, correction=2), lambda x: torch.var(x, 1, correction=2),
          rand((3, 7), 1))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_sum_integer_promotes_to_int64(dtype):
    x = np.random.default_rng(0).integers(-9, 9, (3, 7)).astype(dtype)
    check(lambda x: nf.nn.sum(x, 1), lambda x: torch.sum(x, 1), x)
    check(lambda x: nf.nn.sum(x), lambda x: torch.sum(x), x)


def test_mean_dtype():
    x = rand((3, 7), 1).astype(np.float32)
    check(lambda x: nf.nn.mean(x, -1, dtype="float64"),
          lambda x: torch.mean(x, -1, dtype=torch.float64), x)


# ---------------------------------------------------------------------- losses

@pytest.mark.parametrize("xshape", [(7, 5), (1, 1), (4, 33), (2, 3, 5), (2, 4, 3, 2), (6,)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ltype", [np.int32, np.int64])
def test_cross_entropy(xshape, reduction, ltype):
    cdim = 0 if len(xshape) == 1 else 1
    tshape = xshape[:cdim] + xshape[cdim + 1:]
    x, t = rand(xshape, 1, 3.0), labels(tshape, xshape[cdim], 2, ltype)
    check(lambda x, t: nf.nn.cross_entropy(x, t, reduction=reduction),
          lambda x, t: F.cross_entropy(x, t.long(), reduction=reduction), x, t)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("use_weight", [False, True])
def test_cross_entropy_ignore_index_and_weight(reduction, use_weight):
    x, t, w = rand((9, 4), 1), labels((9,), 4, 2), np.abs(rand((4,), 3)) + 0.1
    t[[1, 4]] = -100
    t2 = t.copy()
    t2[t2 == -100] = 2
    if use_weight:
        check(lambda x, t, w: nf.nn.cross_entropy(x, t, w, reduction=reduction),
              lambda x, t, w: F.cross_entropy(x, t, w, reduction=reduction), x, t, w)
        check(lambda x, t, w: nf.nn.cross_entropy(x, t, w, ignore_index=2, reduction=reduction),
              lambda x, t, w: F.cross_entropy(x, t, w, ignore_index=2, reduction=reduction),
              x, t2, w)
    else:
        check(lambda x, t: nf.nn.cross_entropy(x, t, reduction=reduction),
              lambda x, t: F.cross_entropy(x, t, reduction=reduction), x, t)


def test_cross_entropy_is_stable_and_0d():
    x, t = rand((4, 6), 1, 500.0), labels((4,), 6, 2)
    (out,) = check(nf.nn.cross_entropy, F.cross_entropy, x, t)
    assert out.shape == () and out.ndim == 0


@pytest.mark.parametrize("xshape,tshape", [((7,), (7,)), ((4, 33), (4, 33)), ((2, 3, 5), (3, 5)),
                                           ((3, 1), (3, 4)), ((), ())])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(xshape, tshape, reduction):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch warns when shapes broadcast
        check(lambda x, t: nf.nn.mse_loss(x, t, reduction=reduction),
              lambda x, t: F.mse_loss(x, t, reduction=reduction), rand(xshape, 1),
              rand(tshape, 2))


# ---------------------------------------------------------------------- errors

def _ph(shape, dtype="float32", name="x"):
    return nf.placeholder(shape, dtype, name=name)


ERROR_CASES = [
    ("dense-features", lambda: nf.nn.dense(_ph((4, 7)), _ph((3, 8), name="w")),
     ["dense: x has 7 features in its last dimension but w expects 8 (w.shape[1])"]),
    ("dense-bias", lambda: nf.nn.dense(_ph((4, 8)), _ph((3, 8), name="w"), _ph((4,), name="b")),
     ["dense", "b 'b'", "(4,)", "(3,)"]),
    ("dense-vector-bias", lambda: nf.nn.dense(_ph((4, 8)), _ph((8,), name="w"),
                                              _ph((), name="b")),
     ["dense", "bias", "1-d w", "torch"]),
    ("dense-dtype", lambda: nf.nn.dense(_ph((4, 8)), _ph((3, 8), "float64", "w")),
     ["dense", "w 'w'", "float64", "float32"]),
    ("matmul-inner", lambda: nf.nn.matmul(_ph((3, 4)), _ph((5, 2), name="y")),
     ["matmul", "4 columns", "input.shape[-1]", "5 rows", "other.shape[-2]"]),
    ("matmul-batch", lambda: nf.nn.matmul(_ph((2, 3, 4)), _ph((3, 4, 2), name="y")),
     ["matmul", "batch", "(2, 3, 4)", "(3, 4, 2)"]),
    ("matmul-0d", lambda: nf.nn.matmul(_ph(()), _ph((3,), name="y")), ["matmul", "0-d"]),
    ("bmm-batch", lambda: nf.nn.batch_matmul(_ph((2, 3, 4)), _ph((3, 4, 5), name="y")),
     ["batch_matmul", "batch size 2", "input.shape[0]", "3", "mat2.shape[0]"]),
    ("bmm-ndim", lambda: nf.nn.batch_matmul(_ph((3, 4)), _ph((3, 4, 5), name="y")),
     ["batch_matmul", "input 'x'", "3-d", "(3, 4)"]),
    ("conv-channels", lambda: nf.nn.conv2d(_ph((1, 6, 5, 5)), _ph((4, 2, 3, 3), name="w"),
                                           groups=2),
     ["conv2d: input has 6 channels (input.shape[1]) but weight expects 4",
      "weight.shape[1] * groups"]),
    ("conv-groups-out", lambda: nf.nn.conv2d(_ph((1, 4, 5, 5)), _ph((3, 2, 3, 3), name="w"),
                                             groups=2),
     ["conv2d", "3 output channels", "weight.shape[0]", "groups=2"]),
    ("conv-same-stride", lambda: nf.nn.conv2d(_ph((1, 3, 5, 5)), _ph((4, 3, 3, 3), name="w"),
                                              stride=2, padding="same"),
     ["conv2d", "padding='same'", "strided"]),
    ("conv-too-small", lambda: nf.nn.conv2d(_ph((1, 3, 5, 2)), _ph((4, 3, 3, 3), name="w")),
     ["conv2d", "width is 2", "input.shape[3]", "expected at least 3"]),
    ("conv-bias", lambda: nf.nn.conv2d(_ph((1, 3, 5, 5)), _ph((4, 3, 3, 3), name="w"),
                                       _ph((3,), name="b")),
     ["conv2d", "bias 'b'", "(4,)", "weight.shape[0]"]),
    ("conv-padding-mode", lambda: nf.nn.conv2d(_ph((1, 3, 5, 5)), _ph((4, 3, 3, 3), name="w"),
                                               padding="full"),
     ["conv2d", "'full'", "'same'"]),
    ("conv-ndim", lambda: nf.nn.conv1d(_ph((1, 3, 5, 5)), _ph((4, 3, 3), name="w")),
     ["conv1d", "input 'x'", "(1, 3, 5, 5)"]),
    ("pool-indices", lambda: nf.nn.max_pool2d(_ph((1, 1, 4, 4)), 2, return_indices=True),
     ["max_pool2d", "return_indices=True is not supported"]),
    ("pool-pad", lambda: nf.nn.avg_pool2d(_ph((1, 1, 8, 8)), 3, padding=2),
     ["avg_pool2d", "padding 2", "kernel size 3", "at most 1"]),
    ("pool-small", lambda: nf.nn.max_pool2d(_ph((1, 1, 2, 8)), 3),
     ["max_pool2d", "height is 2", "input.shape[2]", "at least 3"]),
    ("bn-stats-shape", lambda: nf.nn.batch_norm(_ph((4, 3, 5)), _ph((4,), name="rm"),
                                                _ph((3,), name="rv")),
     ["batch_norm: running_mean 'rm' has shape (4,) but input has 3 channels (input.shape[1])",
      "expected (3,)"]),
    ("bn-weight-shape", lambda: nf.nn.batch_norm(_ph((4, 3)), None, None, _ph((2,), name="g")),
     ["batch_norm", "weight 'g'", "(3,)"]),
    ("bn-one-value", lambda: nf.nn.batch_norm(_ph((1, 3)), None, None),
     ["batch_norm", "more than 1 value per channel"]),
    ("bn-momentum", lambda: nf.nn.batch_norm(_ph((4, 3)), _ph((3,), name="rm"),
                                             _ph((3,), name="rv"), momentum=None),
     ["batch_norm", "momentum=None", "not supported"]),
    ("ln-shape", lambda: nf.nn.layer_norm(_ph((4, 3, 5)), (4, 5)),
     ["layer_norm", "input 'x'", "(4, 3, 5)", "normalized_shape (4, 5)"]),
    ("ln-weight", lambda: nf.nn.layer_norm(_ph((4, 5)), 5, _ph((4,), name="g")),
     ["layer_norm", "weight 'g'", "(4,)", "(5,)"]),
    ("softmax-dim", lambda: nf.nn.softmax(_ph((4, 5)), 2),
     ["softmax: dim=2 is out of range", "2 dimension", "expected -2..1"]),
    ("softmax-nodim", lambda: nf.nn.log_softmax(_ph((4, 5)), None),
     ["log_softmax", "dim must be given"]),
    ("softmax-int", lambda: nf.nn.softmax(_ph((4, 5), "int32"), 1),
     ["softmax", "input 'x'", "int32", "float32 or float64"]),
    ("gelu-approx", lambda: nf.nn.gelu(_ph((4,)), approximate="sigmoid"),
     ["gelu", "approximate='sigmoid' is not supported"]),
    ("relu-inplace", lambda: nf.nn.relu(_ph((4,)), inplace=True),
     ["relu", "inplace=True is not supported"]),
    ("embedding-float-ids", lambda: nf.nn.embedding(_ph((4,)), _ph((5, 3), name="w")),
     ["embedding", "input 'x'", "int32 or int64", "float32"]),
    ("embedding-padding-idx", lambda: nf.nn.embedding(_ph((4,), "int64"), _ph((5, 3), name="w"),
                                                      padding_idx=0),
     ["embedding", "padding_idx=0 is not supported"]),
    ("ce-target-shape", lambda: nf.nn.cross_entropy(_ph((4, 5)), _ph((5,), "int64", "t")),
     ["cross_entropy: target 't' has shape (5,)", "(4,)", "class dimension 1"]),
    ("ce-float-target", lambda: nf.nn.cross_entropy(_ph((4, 5)), _ph((4, 5), name="t")),
     ["cross_entropy", "target 't'", "int32/int64", "float32"]),
    ("ce-smoothing", lambda: nf.nn.cross_entropy(_ph((4, 5)), _ph((4,), "int64", "t"),
                                                 label_smoothing=0.1),
     ["cross_entropy", "label_smoothing=0.1 is not supported"]),
    ("ce-weight", lambda: nf.nn.cross_entropy(_ph((4, 5)), _ph((4,), "int64", "t"),
                                              _ph((4,), name="w")),
     ["cross_entropy", "weight 'w'", "(5,)", "input.shape[1]"]),
    ("mse-shape", lambda: nf.nn.mse_loss(_ph((4, 5)), _ph((4, 3), name="t")),
     ["mse_loss", "(4, 5)", "(4, 3)", "broadcast"]),
    ("mse-reduction", lambda: nf.nn.mse_loss(_ph((4,)), _ph((4,), name="t"), reduction="avg"),
     ["mse_loss", "reduction='avg' is not supported"]),
    ("mse-legacy", lambda: nf.nn.mse_loss(_ph((4,)), _ph((4,), name="t"), size_average=True),
     ["mse_loss", "size_average=True is not supported"]),
    ("concat-size", lambda: nf.nn.concat([_ph((2, 3)), _ph((4, 5), name="y")], 0),
     ["concat: tensors[1] 'y' has size 5 in dimension 1 but tensors[0] has 3", "expected 3"]),
    ("concat-dtype", lambda: nf.nn.concat([_ph((2, 3)), _ph((4, 3), "float64", "y")]),
     ["concat", "tensors[1] 'y'", "float64"]),
    ("split-sections", lambda: nf.nn.split(_ph((7, 2)), [3, 3]),
     ["split", "(3, 3) sum to 6", "dimension 0", "'x'", "size 7"]),
    ("narrow-range", lambda: nf.nn.narrow(_ph((7, 2)), 0, 5, 3),
     ["narrow", "dimension 0", "'x'", "size 7", "1..2"]),
    ("pad-mode", lambda: nf.nn.pad(_ph((3, 4)), (1, 1), mode="reflect"),
     ["pad", "mode='reflect' is not supported"]),
    ("pad-dims", lambda: nf.nn.pad(_ph((3,)), (1, 1, 1, 1)),
     ["pad", "pads 2 dimensions", "'x'", "only 1"]),
    ("pad-crop", lambda: nf.nn.pad(_ph((3,)), (-2, -1)),
     ["pad", "dimension 0", "'x'", "size 3", "0 after padding"]),
    ("reshape-size", lambda: nf.nn.reshape(_ph((4, 6)), (5, -1)),
     ["reshape", "(5, -1)", "'x'", "24"]),
    ("permute", lambda: nf.nn.permute(_ph((2, 3, 4)), (0, 1, 1)),
     ["permute", "(0, 1, 1)", "not a permutation", "'x'"]),
    ("pixel-shuffle", lambda: nf.nn.pixel_shuffle(_ph((1, 6, 2, 2)), 2),
     ["pixel_shuffle", "6 channels", "input.shape[-3]", "4"]),
    ("sum-dup", lambda: nf.nn.sum(_ph((2, 3)), (1, -1)),
     ["sum", "(1, -1)", "more than once"]),
    ("mean-int", lambda: nf.nn.mean(_ph((2, 3), "int64")),
     ["mean", "input 'x'", "int64", "float"]),
    ("var-correction", lambda: nf.nn.var(_ph((2, 3)), 1, correction=-1),
     ["var", "correction", "-1"]),
    ("transpose-dim", lambda: nf.nn.transpose(_ph((2, 3)), 0, -3),
     ["transpose", "dim1=-3", "expected -2..1"]),
]


@pytest.mark.parametrize("name,fn,fragments", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_error_messages(name, fn, fragments):
    with pytest.raises(nf.NeoFlowError) as info:
        fn()
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_not_a_tensor():
    with pytest.raises(nf.NeoFlowError, match="relu: input must be a neoflow Tensor"):
        nf.nn.relu(np.zeros(3))


def test_relu_passes_nan_through_like_torch():
    a = np.array([np.nan, -1.0, 0.0, 2.0])
    check(nf.nn.relu, torch.relu, a)
