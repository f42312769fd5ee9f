"""te.simplify.masked_exp (applied to every fused body, graph/partition): a
mask's -inf moved out of exp gives the same values bit for bit -- masked,
unmasked, a fully masked row (NaN, as torch), NaN and infinite shifts -- in
the interpreter and in native code, and the masked softmax keeps torch's
values and gradients in float64."""
import numpy as np
import pytest

import neoflow as nf
from neoflow.te.expr import Select, Unary
from neoflow.te.simplify import masked_exp
from neoflow.te.tensor import ComputeOp, Tensor
from neoflow.te.visit import post_order

torch = pytest.importorskip("torch")


def _exp_args(e):
    return [n.a for n in post_order(e) if isinstance(n, Unary) and n.op == "exp"]


@pytest.mark.parametrize("masked_first", [True, False])
@pytest.mark.parametrize("shifted", [True, False])
def test_rewrite_keeps_every_value(masked_first, shifted):
    rows, cols = 5, 7
    s = nf.placeholder((rows, cols), name="s")
    m = nf.placeholder((rows, cols), dtype="bool", name="m")
    b = nf.placeholder((rows,), name="b")

    def body(i, j):
        masked = nf.where(m[i, j], -np.inf, s[i, j]) if masked_first else \
            nf.where(m[i, j], s[i, j], -np.inf)
        return nf.exp(masked - b[i]) if shifted else nf.exp(masked)
    original = nf.compute((rows, cols), body, name="e")
    rewritten_body = masked_exp(original.op.body)
    assert not any(isinstance(a, Select) or any(isinstance(n, Select) for n in post_order(a))
                   for a in _exp_args(rewritten_body)), "a select still feeds exp"
    rng = np.random.default_rng(3)
    sv = rng.standard_normal((rows, cols)).astype(np.float32) * 30
    sv[0, 2], sv[1, 1] = np.nan, np.inf
    mv = rng.random((rows, cols)) < 0.5
    mv[2] = True                                   # a fully masked row
    bv = rng.standard_normal(rows).astype(np.float32)
    bv[3], bv[4] = -np.inf, np.nan
    feed = {s: sv, m: mv, b: bv}
    want = nf.evaluate(original, feed)
    twin = Tensor(original.shape, original.dtype, "e2", ComputeOp(original.op.axes, rewritten_body))
    got = nf.evaluate(twin, feed)
    np.testing.assert_array_equal(got, want)       # (NaN where NaN)
    built = nf.build(original, [s, m, b])(sv, mv, bv)    # (vector exp: within an ulp or two)
    np.testing.assert_allclose(built, want, rtol=1e-6)
    for special in (np.isnan, np.isinf, lambda v: v == 0):
        np.testing.assert_array_equal(special(built), special(want))


def test_masked_softmax_matches_torch_and_runs_unmasked_exp():
    batch, rows, cols = 3, 6, 9
    x = nf.parameter((batch, rows, cols), dtype="float64", name="x")
    keep = nf.placeholder((rows, cols), dtype="bool", name="keep")
    scores = nf.compute((batch, rows, cols),
                        lambda n, i, j: nf.where(keep[i, j], x[n, i, j], -np.inf), name="scores")
    probs = nf.nn.softmax(scores, -1)
    weights = nf.placeholder((batch, rows, cols), dtype="float64", name="w")
    loss = (probs * weights).sum()
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((batch, rows, cols))
    kv = np.tril(np.ones((rows, cols), bool))
    wv = rng.standard_normal((batch, rows, cols))
    f = nf.build(probs, [x, keep])
    got = f(xv, kv)
    tx = torch.tensor(xv, requires_grad=True)
    want = torch.softmax(tx.masked_fill(~torch.tensor(kv), -np.inf), -1)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-12, atol=1e-15)
    assert (got[:, ~kv] == 0).all()
    (gx,) = nf.grad(loss, [x])
    g = nf.build(gx, [x, keep, weights])(xv, kv, wv)
    (want * torch.tensor(wv)).sum().backward()
    np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    fused = [st for k in f.kernels for st in k.stages]
    assert not any(isinstance(n, Select) for st in fused for a in _exp_args(st.op.body)
                   for n in post_order(a)), "the fused softmax still feeds -inf to exp"
