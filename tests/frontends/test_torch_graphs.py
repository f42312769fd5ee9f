"""How the backend shapes what it builds from aot_autograd's graphs: views
that leave NeoFlow (the transposed weights saved for the backward, aliases)
are taken by PyTorch on the materialised root instead of being copied by a
kernel, and the backward's per-step weight gradients of an unrolled network
(add(add(mm, mm), mm)) become one reduction -- each checked against eager
PyTorch in float64 as well as by what the records show."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neoflow as nf  # noqa: E402
from neoflow.frontends.torch.report import _COMPILED  # noqa: E402
from neoflow.te.expr import Read  # noqa: E402

D = torch.float64


def _records(seen):
    return [g for c in _COMPILED for g in c.graphs if g["name"] not in seen]


def _train_once(fn, params, data, nf_backend):
    """Loss and gradients of `fn(*params, *data)` compiled and eager, float64."""
    seen = set(nf.torch.report())
    ours = [p.clone().requires_grad_() for p in params]
    ref = [p.clone().requires_grad_() for p in params]
    compiled = torch.compile(fn, backend=nf_backend, options={"fallback": "error"},
                             dynamic=False, fullgraph=True)
    lo, le = compiled(*ours, *data), fn(*ref, *data)
    lo.backward(), le.backward()
    np.testing.assert_allclose(lo.item(), le.item(), rtol=1e-10)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-12)
    return _records(seen)


def _mlp(w1, b1, w2, x):
    return (torch.tanh(x @ w1.t() + b1) @ w2.t()).square().mean()


def test_views_leaving_neoflow_are_taken_by_torch(nf_backend):
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(7, 5, generator=g, dtype=D), torch.randn(7, generator=g, dtype=D),
              torch.randn(3, 7, generator=g, dtype=D)]
    records = _train_once(_mlp, params, [torch.randn(4, 5, generator=g, dtype=D)], nf_backend)
    forward = next(r for r in records if r["kind"] == "forward")
    assert forward["views"], "no view of the forward was left to PyTorch"
    assert not forward["fallback"]
    for record in records:
        for runner in record.runners:
            outputs, inputs = runner.lowered
            placeholders = {id(t) for t in inputs}
            for t in outputs:             # no kernel output is a bare copy of an input
                body = t.op.body
                assert not (isinstance(body, Read) and id(body.tensor) in placeholders), \
                    f"{record['name']}: '{t.name}' copies input '{body.tensor.name}'"


def _unrolled(w, xs):
    h = torch.zeros(xs.shape[1], w.shape[1], dtype=xs.dtype)
    for t in range(xs.shape[0]):
        h = torch.tanh(xs[t] @ w + h)
    return h.sum()


def test_per_step_weight_gradients_become_one_reduction(nf_backend):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(6, 6, generator=g, dtype=D) * 0.3
    xs = torch.randn(5, 3, 6, generator=g, dtype=D)
    records = _train_once(_unrolled, [w], [xs], nf_backend)
    backward = next(r for r in records if r["kind"] == "backward")
    assert backward["native"].get("aten.mm.default", 0) >= 4      # a product per step
    outputs, _ = backward.runners[0].lowered
    grad_w = [t for t in outputs if t.shape == (6, 6)]
    assert len(grad_w) == 1
    reductions = [n for n in _nodes(grad_w[0].op.body) if type(n).__name__ == "Reduce"]
    assert len(reductions) == 1, f"dW holds {len(reductions)} sums, not one merged sum"


def _nodes(e):
    from neoflow.te.visit import post_order
    return post_order(e)


def test_an_error_the_kernels_report_is_a_neoflow_error(nf_backend):
    from neoflow.errors import NeoFlowError
    compiled = torch.compile(lambda w, i: torch.nn.functional.embedding(i, w) * 2,
                             backend=nf_backend, dynamic=False, fullgraph=True)
    w = torch.randn(5, 3, dtype=D)
    good = torch.tensor([[0, 4], [2, 1]])
    np.testing.assert_allclose(compiled(w, good).numpy(), (w[good] * 2).numpy())
    with pytest.raises(NeoFlowError, match="outside its size 5"):
        compiled(w, torch.tensor([[0, 5], [2, 1]]))
