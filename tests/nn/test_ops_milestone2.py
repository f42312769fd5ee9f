# The operators added in the second milestone against PyTorch in float64:
# forward and gradient (nf.grad) through the interpreter, and for one case of
# each operator also through nf.build's native code; odd sizes, random
# inputs; unsupported options and bad arguments raise NeoFlowError.
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neoflow as nf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autodiff"))
from grad_check import Spec, check_torch  # noqa: E402

F64 = "float64"
# torch's notice that kl_div's 'mean' will change meaning
pytestmark = pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")


# torch's float64 hardsigmoid backward multiplies by 1/6 rounded to float32
# (5e-9 off), its hardswish backward likewise; NeoFlow's are exact. (Its celu
# rounds 1 / alpha to float32 too: the test's alpha is a power of two.)
LOOSE = {"hardsigmoid": 1e-7, "hardswish": 1e-7}


def ramp(shape):
    """Constant positive weights (torch does not differentiate loss weights):
    a compute with no inputs, and the same values as a torch tensor."""
    vals = 0.5 + 0.25 * np.arange(int(np.prod(shape))).reshape(shape)
    flat = lambda *i: sum(i[d] * int(np.prod(shape[d + 1:])) for d in range(len(shape)))  # noqa
    t = nf.compute(shape, lambda *i: nf.cast(flat(*i), F64) * 0.25 + 0.5, name="ramp")
    return t, torch.tensor(vals)


ACTIVATIONS = {
    "silu": (nf.nn.silu, F.silu),
    "mish": (nf.nn.mish, F.mish),
    "softplus": (nf.nn.softplus, F.softplus),
    "softplus_beta": (lambda x: nf.nn.softplus(x, beta=2.5, threshold=3.0),
                      lambda x: F.softplus(x, beta=2.5, threshold=3.0)),
    "leaky_relu": (lambda x: nf.nn.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2)),
    "hardtanh": (lambda x: nf.nn.hardtanh(x, -1.5, 2.0), lambda x: F.hardtanh(x, -1.5, 2.0)),
    "hardsigmoid": (nf.nn.hardsigmoid, F.hardsigmoid),
    "hardswish": (nf.nn.hardswish, F.hardswish),
    "logsigmoid": (nf.nn.logsigmoid, F.logsigmoid),
    "relu6": (nf.nn.relu6, F.relu6),
    "selu": (nf.nn.selu, F.selu),
    "celu": (lambda x: nf.nn.celu(x, alpha=0.5), lambda x: F.celu(x, alpha=0.5)),
    "elu": (nf.nn.elu, F.elu),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("shape,native", [((7, 33), True), ((1, 3, 5), False)])
def test_activation(name, shape, native):
    fn, ref = ACTIVATIONS[name]
    scale = 4.0   # cross -3, 0, 3, 6 (hard activations' corners)
    check_torch(lambda x: fn(x * scale), lambda x: ref(x * scale), [Spec(shape)], F64,
                native=native, seed=len(name), tol=LOOSE.get(name))


def test_activation_corners_match_torch_gradients():
    """Exactly at the corners (0, ±3, 6, the hardtanh bounds) torch's gradients
    are conventions; NeoFlow follows them."""
    corners = np.array([0.0, -3.0, 3.0, 6.0, -1.5, 2.0, -1.0, 1.0, 20.0, -0.0], np.float64)
    x = nf.placeholder(corners.shape, F64, name="x")
    for name, (fn, ref) in ACTIVATIONS.items():
        y = fn(x)
        g, = nf.grad(nf.nn.sum(y), [x])
        t = torch.tensor(corners, requires_grad=True)
        ref(t).sum().backward()
        got = nf.evaluate([y, g], {x: corners})
        np.testing.assert_allclose(got[0], ref(torch.tensor(corners)).numpy(), rtol=1e-12,
                                   atol=1e-12, err_msg=name)
        tol = LOOSE.get(name, 1e-12)
        np.testing.assert_allclose(got[1], t.grad.numpy(), rtol=tol, atol=tol,
                                   err_msg=f"{name} gradient")


@pytest.mark.parametrize("wshape", [(1,), (3,)])
def test_prelu(wshape):
    check_torch(lambda x, w: nf.nn.prelu(x, w), F.prelu, [Spec((2, 3, 5)), Spec(wshape)], F64,
                native=wshape == (3,))


def test_activation_errors():
    x = nf.placeholder((4, 3), name="x")
    with pytest.raises(nf.NeoFlowError, match="inplace"):
        nf.nn.silu(x, inplace=True)
    with pytest.raises(nf.NeoFlowError, match="min_val"):
        nf.nn.hardtanh(x, 2.0, 1.0)
    with pytest.raises(nf.NeoFlowError, match="alpha"):
        nf.nn.celu(x, alpha=0.0)
    with pytest.raises(nf.NeoFlowError, match="beta"):
        nf.nn.softplus(x, beta="2")
    with pytest.raises(nf.NeoFlowError, match=r"weight 'w'.*\(4,\).*\(1,\) or \(3,\)"):
        nf.nn.prelu(x, nf.placeholder((4,), name="w"))
    with pytest.raises(nf.NeoFlowError, match="int64"):
        nf.nn.silu(nf.placeholder((3,), "int64", name="n"))


# ---------------------------------------------------------------------- norms

@pytest.mark.parametrize("xshape,groups,affine,native", [
    ((2, 6, 5, 3), 3, True, True), ((3, 4, 7), 4, False, False), ((2, 6), 2, True, False),
    ((1, 5, 3, 3), 1, True, False)])
def test_group_norm(xshape, groups, affine, native):
    c = xshape[1]
    specs = [Spec(xshape)] + ([Spec((c,)), Spec((c,))] if affine else [])
    check_torch(lambda x, *wb: nf.nn.group_norm(x, groups, *wb, eps=1e-4),
                lambda x, *wb: F.group_norm(x, groups, *wb, eps=1e-4), specs, F64,
                native=native, tol=1e-8)


@pytest.mark.parametrize("xshape,affine,native", [((2, 3, 5, 3), True, True),
                                                  ((3, 2, 7), False, False)])
def test_instance_norm(xshape, affine, native):
    c = xshape[1]
    specs = [Spec(xshape)] + ([Spec((c,)), Spec((c,))] if affine else [])
    check_torch(lambda x, *wb: nf.nn.instance_norm(x, None, None, *wb),
                lambda x, *wb: F.instance_norm(x, None, None, *wb), specs, F64,
                native=native, tol=1e-8)


@pytest.mark.parametrize("xshape,nshape,weight,eps,native", [
    ((4, 7, 9), (9,), True, None, True), ((3, 5), (5,), False, 1e-3, False),
    ((2, 3, 4), (3, 4), True, 1e-6, False)])
def test_rms_norm(xshape, nshape, weight, eps, native):
    specs = [Spec(xshape)] + ([Spec(nshape)] if weight else [])
    check_torch(lambda x, *w: nf.nn.rms_norm(x, nshape, *w, eps=eps),
                lambda x, *w: F.rms_norm(x, nshape, *w, eps=eps), specs, F64, native=native,
                tol=1e-8)


def test_norm_errors():
    x = nf.placeholder((2, 6, 5), name="x")
    with pytest.raises(nf.NeoFlowError, match=r"num_groups=4.*6 channels"):
        nf.nn.group_norm(x, 4)
    with pytest.raises(nf.NeoFlowError, match=r"weight 'g'.*\(5,\).*\(6,\)"):
        nf.nn.group_norm(x, 3, nf.placeholder((5,), name="g"))
    with pytest.raises(nf.NeoFlowError, match="running_mean"):
        nf.nn.instance_norm(x, nf.placeholder((6,), name="rm"), nf.placeholder((6,)))
    with pytest.raises(nf.NeoFlowError, match="use_input_stats"):
        nf.nn.instance_norm(x, use_input_stats=False)
    with pytest.raises(nf.NeoFlowError, match="at least 3"):
        nf.nn.instance_norm(nf.placeholder((2, 6), name="x2"))
    with pytest.raises(nf.NeoFlowError, match=r"normalized_shape \(6,\)"):
        nf.nn.rms_norm(x, (6,))


# --------------------------------------------------------------------- losses

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    w = ramp((5,)) if weighted else (None, None)

    def build(x, y):
        return nf.nn.nll_loss(nf.nn.log_softmax(x, 1), y, w[0], ignore_index=2,
                              reduction=reduction)

    def ref(x, y):
        return F.nll_loss(F.log_softmax(x, 1), y, w[1], ignore_index=2, reduction=reduction)

    check_torch(build, ref, [Spec((7, 5)), Spec((7,), "int64", high=5)], F64,
                native=reduction == "mean")


def test_nll_loss_spatial_and_unbatched():
    check_torch(lambda x, y: nf.nn.nll_loss(x, y), F.nll_loss,
                [Spec((2, 3, 4, 5)), Spec((2, 4, 5), "int64", high=3)], F64, native=False)
    check_torch(lambda x, y: nf.nn.nll_loss(x, y), F.nll_loss,
                [Spec((5,)), Spec((), "int64", high=5)], F64, native=False)


PAIR_LOSSES = {
    "l1": (nf.nn.l1_loss, F.l1_loss, {}),
    "smooth_l1": (nf.nn.smooth_l1_loss, F.smooth_l1_loss, {"beta": 0.6}),
    "smooth_l1_b0": (nf.nn.smooth_l1_loss, F.smooth_l1_loss, {"beta": 0.0}),
    "huber": (nf.nn.huber_loss, F.huber_loss, {"delta": 0.8}),
    "mse": (nf.nn.mse_loss, F.mse_loss, {}),
}


@pytest.mark.parametrize("name", list(PAIR_LOSSES))
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_pair_losses(name, reduction):
    fn, ref, kw = PAIR_LOSSES[name]
    check_torch(lambda a, b: fn(a, b, reduction=reduction, **kw),
                lambda a, b: ref(a, b, reduction=reduction, **kw),
                [Spec((7, 3)), Spec((7, 3))], F64, native=reduction == "mean")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    w = ramp((3,)) if weighted else (None, None)

    def build(z, t):
        return nf.nn.binary_cross_entropy(nf.nn.sigmoid(z), nf.nn.sigmoid(t), w[0],
                                          reduction=reduction)

    def ref(z, t):
        return F.binary_cross_entropy(torch.sigmoid(z), torch.sigmoid(t), w[1],
                                      reduction=reduction)
    check_torch(build, ref, [Spec((5, 3)), Spec((5, 3))], F64,
                native=reduction == "mean" and weighted)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kind", ["plain", "weight", "pos_weight", "both"])
def test_binary_cross_entropy_with_logits(reduction, kind):
    w = ramp((6, 1)) if kind in ("weight", "both") else (None, None)
    pw = ramp((3,)) if kind in ("pos_weight", "both") else (None, None)

    def build(z, t):
        return nf.nn.binary_cross_entropy_with_logits(z * 5.0, nf.nn.sigmoid(t), w[0],
                                                      reduction=reduction, pos_weight=pw[0])

    def ref(z, t):
        return F.binary_cross_entropy_with_logits(z * 5.0, torch.sigmoid(t), w[1],
                                                  reduction=reduction, pos_weight=pw[1])
    check_torch(build, ref, [Spec((6, 3)), Spec((6, 3))], F64,
                native=reduction == "sum" and kind == "both")


@pytest.mark.parametrize("reduction", ["mean", "batchmean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    def target(t):
        p = nf.nn.softmax(t, 1)
        return nf.nn.log_softmax(t, 1) if log_target else p

    def torch_target(t):
        return F.log_softmax(t, 1) if log_target else F.softmax(t, 1)
    check_torch(lambda x, t: nf.nn.kl_div(nf.nn.log_softmax(x, 1), target(t),
                                          reduction=reduction, log_target=log_target),
                lambda x, t: F.kl_div(F.log_softmax(x, 1), torch_target(t),
                                      reduction=reduction, log_target=log_target),
                [Spec((5, 4)), Spec((5, 4))], F64, native=reduction == "batchmean")


def test_kl_div_zero_target():
    """target == 0 contributes 0 (torch's xlogy), not NaN."""
    x = nf.placeholder((2, 3), F64, name="x")
    t = nf.placeholder((2, 3), F64, name="t")
    a = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.6, 0.3]]))
    b = np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    got = nf.evaluate(nf.nn.kl_div(x, t, reduction="sum"), {x: a, t: b})
    want = F.kl_div(torch.tensor(a), torch.tensor(b), reduction="sum").item()
    assert np.isfinite(got) and abs(got - want) < 1e-12


def test_loss_errors():
    x = nf.placeholder((4, 3), F64, name="x")
    y = nf.placeholder((4,), "int64", name="y")
    with pytest.raises(nf.NeoFlowError, match=r"nll_loss: target 'yy'.*\(3,\).*\(4,\)"):
        nf.nn.nll_loss(x, nf.placeholder((3,), "int64", name="yy"))
    with pytest.raises(nf.NeoFlowError, match="int32/int64"):
        nf.nn.nll_loss(x, nf.placeholder((4,), F64, name="yf"))
    with pytest.raises(nf.NeoFlowError, match="reduction='avg'"):
        nf.nn.nll_loss(x, y, reduction="avg")
    with pytest.raises(nf.NeoFlowError, match="size_average"):
        nf.nn.l1_loss(x, x, size_average=True)
    with pytest.raises(nf.NeoFlowError, match=r"target 't'.*\(4, 1\).*\(4, 3\)"):
        nf.nn.binary_cross_entropy(x, nf.placeholder((4, 1), F64, name="t"))
    with pytest.raises(nf.NeoFlowError, match="beta"):
        nf.nn.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(nf.NeoFlowError, match="weight"):
        nf.nn.huber_loss(x, x, weight=x)
    with pytest.raises(nf.NeoFlowError, match="batchmean"):
        nf.nn.kl_div(x, x, reduction="avg")
    with pytest.raises(nf.NeoFlowError, match="do not broadcast"):
        nf.nn.l1_loss(x, nf.placeholder((5,), F64, name="z"))


# ------------------------------------------------------------ logsumexp, einsum

@pytest.mark.parametrize("shape,dim,keepdim,native", [
    ((7, 33), 1, False, True), ((3, 5, 4), (0, 2), True, False), ((5,), 0, False, False),
    ((3, 1, 4), -2, True, False)])
def test_logsumexp(shape, dim, keepdim, native):
    check_torch(lambda x: nf.nn.logsumexp(x * 30.0, dim, keepdim),
                lambda x: torch.logsumexp(x * 30.0, dim, keepdim), [Spec(shape)], F64,
                native=native)


def test_logsumexp_infinite_max():
    x = nf.placeholder((2, 3), F64, name="x")
    a = np.array([[-np.inf, -np.inf, -np.inf], [np.inf, 1.0, 2.0]])
    got = nf.evaluate(nf.nn.logsumexp(x, 1), {x: a})
    np.testing.assert_array_equal(got, torch.logsumexp(torch.tensor(a), 1).numpy())


EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)], True),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], False),
    ("ii->i", [(3, 3)], False),
    ("ii", [(4, 4)], True),
    ("ij->", [(3, 5)], False),
    ("ij->ji", [(3, 5)], False),
    ("i,j->ij", [(3,), (4,)], False),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 7, 4)], False),
    ("ij,jk", [(2, 3), (1, 4)], False),                 # size-1 broadcast, implicit
    ("...ij,...jk", [(2, 1, 2, 3), (5, 3, 4)], True),   # broadcast ellipsis
    ("...ij->ij", [(2, 3, 4)], False),                   # ellipsis summed away
    ("i,i,i->", [(5,), (5,), (5,)], False),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)], False),
]


@pytest.mark.parametrize("eq,shapes,native", EINSUM)
def test_einsum(eq, shapes, native):
    check_torch(lambda *xs: nf.nn.einsum(eq, *xs), lambda *xs: torch.einsum(eq, *xs),
                [Spec(s) for s in shapes], F64, native=native)


def test_einsum_list_operands():
    a, b = nf.placeholder((3, 4), name="a"), nf.placeholder((4, 2), name="b")
    assert nf.nn.einsum("ij,jk->ik", [a, b]).shape == (3, 2)


@pytest.mark.parametrize("eq,shapes,match", [
    ("ij,jk->ik", [(3, 4), (5, 2)], r"subscript 'j'.*4.*5"),
    ("ij->ik", [(3, 4)], "'k'.*appears in no operand"),
    ("ij->ii", [(3, 3)], "appears twice"),
    ("ij,jk->ik", [(3, 4)], "2 operand subscript"),
    ("ijk->i", [(3, 4)], r"2 dimension\(s\).*name 3"),
    ("i1->i", [(3, 4)], "invalid subscript '1'"),
    ("...i...->i", [(3, 4)], "twice"),
])
def test_einsum_errors(eq, shapes, match):
    xs = [nf.placeholder(s, name=f"x{n}") for n, s in enumerate(shapes)]
    with pytest.raises(nf.NeoFlowError, match=match):
        nf.nn.einsum(eq, *xs)
