# The intrinsics of the second milestone (log1p, expm1, sin, cos, sign, floor,
# ceil, round, clamp): values against torch (interpreter and native code, edge
# values included), gradients against torch.autograd through nf.grad and
# nf.build, float32 accuracy of the generated C, flops, and every intrinsic
# applied to whole Tensors.
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import neoflow as nf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autodiff"))
from grad_check import Spec, check_torch  # noqa: E402

UNARY = {
    "log1p": (nf.log1p, torch.log1p),
    "expm1": (nf.expm1, torch.expm1),
    "sin": (nf.sin, torch.sin),
    "cos": (nf.cos, torch.cos),
    "sign": (nf.sign, torch.sign),
    "floor": (nf.floor, torch.floor),
    "ceil": (nf.ceil, torch.ceil),
    "round": (nf.round, torch.round),
}

EDGES = [0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0, -3.0, 1e-7, -1e-7, 1e-30, 0.49999997,
         1e20, -1e20, np.inf, -np.inf, np.nan, 4.5, 7.0, -7.0, 1023.5]


def _data(dtype, n=61, seed=0):
    """Random values over several scales, then the edge values."""
    rng = np.random.default_rng(seed)
    a = np.concatenate([rng.normal(size=n) * 3, rng.uniform(-0.9, 5, size=n),
                        np.array(EDGES)])
    return a.astype(dtype)


def _same(got, want, dtype, name):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    rtol = {"float32": 2.5e-7, "float64": 1e-15}[np.dtype(dtype).name]
    exact = name in ("sign", "floor", "ceil", "round")
    np.testing.assert_allclose(got, want, rtol=0 if exact else rtol, atol=0, equal_nan=True,
                               err_msg=name)
    if exact:   # the sign of zero too (round(-0.5) == -0.0, as torch)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_values_match_torch(dtype):
    a = _data(dtype)
    x = nf.placeholder(a.shape, np.dtype(dtype).name, name="x")
    outs = [nf.compute(a.shape, lambda i, f=f: f(x[i]), name=n) for n, (f, _) in UNARY.items()]
    with np.errstate(all="ignore"):
        evaluated = nf.evaluate(outs, {x: a})
        built = nf.build(outs, [x])(a)
    for (name, (_, ref)), e, b in zip(UNARY.items(), evaluated, built):
        want = ref(torch.from_numpy(a)).numpy()
        _same(e, want, dtype, f"{name} (nf.evaluate)")
        _same(b, want, dtype, f"{name} (nf.build)")


def test_round_half_to_even_and_sign_edges():
    a = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 0.0, -0.0, np.nan, 2.0, -2.0],
                 np.float64)
    x = nf.placeholder(a.shape, "float64", name="x")
    r = nf.compute(a.shape, lambda i: nf.round(x[i]), name="r")
    s = nf.compute(a.shape, lambda i: nf.sign(x[i]), name="s")
    fl = nf.compute(a.shape, lambda i: nf.floor(x[i]) + nf.ceil(x[i]), name="fc")
    got_r, got_s, got_fc = nf.build([r, s, fl], [x])(a)
    np.testing.assert_array_equal(got_r[:7], [0, 2, 2, 4, -0.0, -2, -2])
    np.testing.assert_array_equal(got_s, [1, 1, 1, 1, -1, -1, -1, 0, 0, 0, 1, -1])
    np.testing.assert_array_equal(got_fc[-2:], [4.0, -4.0])   # integers stay put


def test_sign_and_clamp_of_integers():
    a = np.array([-5, 0, 3, 7, -1], np.int64)
    n = nf.placeholder(a.shape, "int64", name="n")
    s = nf.compute(a.shape, lambda i: nf.sign(n[i]), name="s")
    c = nf.compute(a.shape, lambda i: nf.clamp(n[i], -2, 4), name="c")
    got = nf.build([s, c], [n])(a)
    np.testing.assert_array_equal(got[0], np.sign(a))
    np.testing.assert_array_equal(got[1], np.clip(a, -2, 4))
    assert got[0].dtype == np.int64 and got[1].dtype == np.int64


def test_clamp_values_match_torch():
    a = _data(np.float64)
    x = nf.placeholder(a.shape, "float64", name="x")
    cases = [((-1.0, 2.0), dict(min=-1.0, max=2.0)), ((0.5, None), dict(min=0.5)),
             ((None, 0.25), dict(max=0.25)), ((2.0, 1.0), dict(min=2.0, max=1.0)),
             ((1.0, 1.0), dict(min=1.0, max=1.0))]
    outs = [nf.compute(a.shape, lambda i, b=b: nf.clamp(x[i], *b), name="clamp")
            for b, _ in cases]
    for got in (nf.evaluate(outs, {x: a}), nf.build(outs, [x])(a)):
        for g, (_, kw) in zip(got, cases):
            np.testing.assert_array_equal(g, torch.clamp(torch.from_numpy(a), **kw).numpy())


# ------------------------------------------------------------------ gradients

@pytest.mark.parametrize("name", list(UNARY))
def test_unary_gradients_match_torch(name):
    fn, ref = UNARY[name]
    shape = (7, 33)
    if name == "log1p":   # domain x > -1
        build = lambda x: nf.nn.sigmoid(x) * 3.0 - 0.9        # noqa: E731
        tfn = lambda x: torch.sigmoid(x) * 3 - 0.9            # noqa: E731
    else:
        build = tfn = lambda x: x * 3.0                       # noqa: E731
    check_torch(lambda x: nf.compute(shape, lambda i, j: fn(build(x)[i, j]) * x[i, j]),
                lambda x: ref(tfn(x)) * x, [Spec(shape)], "float64")


def test_step_gradients_are_zero_at_their_steps():
    """torch defines the gradient of floor, ceil, round and sign as 0
    everywhere, also at the jumps."""
    a = np.array([0.0, 0.5, 1.0, -2.5, 3.0, -0.0], np.float64)
    x = nf.placeholder(a.shape, "float64", name="x")
    for f in (nf.floor, nf.ceil, nf.round, nf.sign):
        y = nf.compute(a.shape, lambda i, f=f: f(x[i]) + x[i] * 2.0)
        g, = nf.grad(nf.nn.sum(y), [x])
        np.testing.assert_array_equal(nf.build(g, [x])(a), np.full(a.shape, 2.0))


CLAMPS = {
    "both": (lambda x, lo, hi: nf.clamp(x, -0.5, 0.8), lambda x, lo, hi: torch.clamp(x, -0.5, 0.8)),
    "lo": (lambda x, lo, hi: nf.clamp(x, lo=0.1), lambda x, lo, hi: torch.clamp(x, min=0.1)),
    "hi": (lambda x, lo, hi: nf.clamp(x, hi=0.1), lambda x, lo, hi: torch.clamp(x, max=0.1)),
    "crossed": (lambda x, lo, hi: nf.clamp(x, 1.0, -1.0),
                lambda x, lo, hi: torch.clamp(x, 1.0, -1.0)),
    "tensors": (lambda x, lo, hi: nf.clamp(x, lo, hi), lambda x, lo, hi: torch.clamp(x, lo, hi)),
}


@pytest.mark.parametrize("name", list(CLAMPS))
def test_clamp_gradients_match_torch(name):
    """Bounds given as tensors get gradients too (crossed bounds included: the
    random lo and hi below cross at some positions)."""
    fn, ref = CLAMPS[name]
    check_torch(lambda x, lo, hi: fn(x, lo, hi) * 1.0,
                lambda x, lo, hi: ref(x, lo, hi) * 1.0,
                [Spec((5, 7)), Spec((5, 7)), Spec((7,))], "float64")


def test_clamp_gradient_at_the_bounds_is_torch_s():
    """x exactly at a bound gets its gradient (torch's clamp, unlike hardtanh)."""
    a = np.array([-0.5, 0.8, 0.0, -2.0, 2.0])
    x = nf.placeholder(a.shape, "float64", name="x")
    g, = nf.grad(nf.nn.sum(nf.clamp(x, -0.5, 0.8)), [x])
    t = torch.tensor(a, requires_grad=True)
    torch.clamp(t, -0.5, 0.8).sum().backward()
    np.testing.assert_array_equal(nf.build(g, [x])(a), t.grad.numpy())


# -------------------------------------------------- accuracy of the C code

@pytest.mark.parametrize("name", ["log1p", "expm1", "sin", "cos"])
def test_float32_code_is_libm_accurate(name):
    """Generated float32 code against float64 truth: within 2 ulp, also where
    log(1 + x) or exp(x) - 1 would lose every digit (|x| ~ 1e-7) and for large
    sine arguments; on a vectorised loop (4099 elements)."""
    fn, ref = UNARY[name]
    rng = np.random.default_rng(3)
    tiny = rng.uniform(-1e-6, 1e-6, 2000)
    big = rng.uniform(-1e4, 1e4, 1000) if name in ("sin", "cos") else rng.uniform(-0.9, 5, 1000)
    rest = rng.normal(size=1099)
    a = np.concatenate([tiny, big, np.abs(rest) if name == "log1p" else rest])
    a = a.astype(np.float32)
    x = nf.placeholder(a.shape, "float32", name="x")
    y = nf.compute(a.shape, lambda i: fn(x[i]), name=name)
    f = nf.build(y, [x])
    assert f"{name}f(" in f.source
    got = f(a).astype(np.float64)
    want = ref(torch.from_numpy(a.astype(np.float64))).numpy()
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - want) / ulp) <= 2.0


def test_round_prints_rint_not_c_round():
    x = nf.placeholder((9,), "float64", name="x")
    src = nf.build(nf.compute((9,), lambda i: nf.round(x[i])), [x]).source
    assert "rint(" in src and " round(" not in src


# ------------------------------------------------------------------ flops

def test_flops_count_one_per_intrinsic():
    x = nf.placeholder((6, 5), "float64", name="x")
    for name, (f, _) in UNARY.items():
        assert nf.flops(nf.compute((6, 5), lambda i, j, f=f: f(x[i, j]))) == 30, name
    n = nf.placeholder((6,), "int64", name="n")
    assert nf.flops(nf.compute((6,), lambda i: nf.sign(n[i]))) == 0   # integer work is free
    assert nf.flops(nf.compute((6, 5), lambda i, j: nf.clamp(x[i, j], -1.0, 1.0))) == 60


# ------------------------------------------------------- whole tensors

def test_intrinsics_of_whole_tensors():
    a = np.random.default_rng(0).normal(size=(3, 1)) * 2
    b = np.random.default_rng(1).normal(size=(4,)) * 2
    A = nf.placeholder((3, 1), "float64", name="A")
    B = nf.placeholder((4,), "float64", name="B")
    cases = [
        (nf.exp(A), np.exp(a)), (nf.log1p(nf.abs(B)), np.log1p(np.abs(b))),
        (nf.sin(A), np.sin(a)), (nf.round(B), np.round(b)), (nf.sign(A), np.sign(a)),
        (nf.sigmoid(B), 1 / (1 + np.exp(-b))), (nf.sqrt(nf.abs(A)), np.sqrt(np.abs(a))),
        (nf.maximum(A, B), np.maximum(a, b)), (nf.minimum(0.5, B), np.minimum(0.5, b)),
        (nf.pow(nf.abs(A), B), np.abs(a) ** b), (nf.clamp(B, -1.0, 1.0), np.clip(b, -1, 1)),
        (nf.clamp(A, B, 2.0), np.minimum(np.maximum(a, b), 2.0)),
        (nf.where(A > B, A, 0.0), np.where(a > b, a, 0.0)),
        (nf.where(B < 0, -1.0, 1.0), np.where(b < 0, -1.0, 1.0).astype(np.float32)),
        (nf.cast(A, "float32"), a.astype(np.float32)),
        (A ** 2.0 - B, a ** 2 - b), (A >= 0.5, a >= 0.5),
    ]
    for t, _ in cases:
        assert isinstance(t, nf.Tensor)
    outs = [t for t, _ in cases]
    for got in (nf.evaluate(outs, {A: a, B: b}), nf.build(outs, [A, B])(a, b)):
        for (t, want), g in zip(cases, got):
            assert g.shape == want.shape and g.dtype == want.dtype, (t.name, g.shape, g.dtype)
            np.testing.assert_allclose(g, want, rtol=1e-12, err_msg=t.name)


def test_whole_tensor_gradients_match_torch():
    check_torch(lambda a, b: nf.nn.sum(nf.where(a > b, nf.exp(a), nf.clamp(b, -0.3, 0.4))
                                       * nf.sin(b)),
                lambda a, b: (torch.where(a > b, torch.exp(a), torch.clamp(b, -0.3, 0.4))
                              * torch.sin(b)).sum(),
                [Spec((5, 1)), Spec((6,))], "float64")


def test_whole_tensor_errors():
    x = nf.placeholder((3, 4), name="x")
    y = nf.placeholder((5,), name="y")
    with pytest.raises(nf.NeoFlowError, match="cannot mix a whole tensor"):
        nf.compute((3,), lambda i: nf.maximum(x, x[i, 0]))
    with pytest.raises(nf.NeoFlowError, match="do not broadcast"):
        nf.maximum(x, y)
    with pytest.raises(nf.NeoFlowError, match="must be bool"):
        nf.where(x, x, 0.0)
    with pytest.raises(nf.NeoFlowError, match="needs a float"):
        nf.exp(nf.placeholder((3,), "int32", name="n"))
    with pytest.raises(nf.NeoFlowError, match="at least one of lo and hi"):
        nf.clamp(x)
    with pytest.raises(nf.NeoFlowError, match="combines tensors and Python numbers"):
        nf.maximum(x, "0")
