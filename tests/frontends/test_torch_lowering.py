"""The lowering table op by op: small functions of one or a few ATen ops
compiled with backend="neoflow" and fallback="error" (so every ATen op of
the forward and the backward graph was lowered -- nothing ran in PyTorch),
checked against eager PyTorch in float64, forward and backward, on random
inputs of odd sizes."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import neoflow as nf  # noqa: E402

D = torch.float64


def r(*shape):
    return ("float", shape)


def idx(high, *shape):
    return ("int", high, shape)


def ties(*shape):
    """Floats drawn from {0, 1, 2}: windows with tied maxima."""
    return ("ties", shape)


CASES = {
    "linear": (lambda x, w, b: F.linear(x, w, b), [r(3, 5), r(4, 5), r(4)]),
    "linear_3d": (lambda x, w: F.linear(x, w), [r(2, 3, 5), r(4, 5)]),
    "mm_bmm": (lambda a, b, c: (a @ b).sum() + torch.bmm(c, c.transpose(1, 2)),
               [r(3, 4), r(4, 2), r(2, 3, 5)]),
    "addmm_scaled": (lambda m, a, b: torch.addmm(m, a, b, beta=0.5, alpha=2.0),
                     [r(3, 2), r(3, 4), r(4, 2)]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
               [r(2, 3, 7, 6), r(4, 3, 3, 3), r(4)]),
    "conv2d_groups_dilation": (lambda x, w: F.conv2d(x, w, groups=2, dilation=2, padding=2),
                               [r(1, 4, 7, 7), r(6, 2, 3, 3)]),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, padding=1), [r(2, 3, 9), r(5, 3, 3), r(5)]),
    "conv3d": (lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1),
               [r(2, 3, 4, 5, 3), r(2, 3, 3, 3, 2), r(2)]),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1,
                                                            output_padding=1),
                         [r(2, 3, 4, 5), r(3, 2, 3, 3), r(2)]),
    "conv_transpose2d_groups": (lambda x, w: F.conv_transpose2d(x, w, groups=2, dilation=2),
                                [r(1, 4, 3, 4), r(4, 3, 2, 3)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [r(2, 3, 7, 8)]),
    "max_pool2d_indices": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                                                   return_indices=True)[1], [r(2, 3, 7, 8)]),
    "max_pool2d_tiled": (lambda x: F.max_pool2d(x, 2), [r(2, 3, 6, 8)]),
    "max_pool2d_remainder": (lambda x: F.max_pool2d(x, (2, 3)), [r(2, 3, 7, 8)]),
    "max_pool2d_dilated": (lambda x: F.max_pool2d(x, 3, stride=(2, 1), padding=1, dilation=2),
                           [r(1, 2, 9, 8)]),
    "max_pool2d_ceil": (lambda x: F.max_pool2d(x, 3, stride=2, ceil_mode=True), [r(2, 5, 5)]),
    "max_pool2d_ties": (lambda x, y: F.max_pool2d(x, 3, stride=1, padding=1)
                        + F.max_pool2d(y, 2).repeat_interleave(2, -1).repeat_interleave(2, -2),
                        [ties(2, 3, 6, 6), ties(2, 3, 6, 6)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2) + F.avg_pool2d(x, 3, 1, 1)[..., :3, :4],
                   [r(2, 3, 6, 8)]),
    "avg_pool2d_no_pad_count": (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                                [r(1, 2, 7, 7)]),
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, torch.zeros(3, dtype=D),
                                                      torch.ones(3, dtype=D), w, b,
                                                      training=True),
                         [r(4, 3, 5, 2), r(3), r(3)]),
    "batch_norm_eval": (lambda x, w, b: F.batch_norm(x, torch.arange(3, dtype=D) * 0.3 - 0.2,
                                                     torch.arange(3, dtype=D) + 0.5, w, b,
                                                     training=False),
                        [r(4, 3, 5, 2), r(3), r(3)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (5,), w, b), [r(2, 3, 5), r(5), r(5)]),
    "layer_norm_2d": (lambda x: F.layer_norm(x, (3, 5)), [r(2, 3, 5)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [r(3, 4, 5, 3), r(4), r(4)]),
    "activations": (lambda x: F.relu(x) + F.gelu(x) + F.gelu(x, approximate="tanh") + F.elu(x)
                    + torch.sigmoid(x) + torch.tanh(x) + F.silu(x) + F.hardtanh(x, -0.5, 0.7)
                    + F.leaky_relu(x, 0.1), [r(4, 7)]),
    "softmax": (lambda x: F.softmax(x, dim=1) * F.log_softmax(x, dim=-1), [r(3, 5, 4)]),
    "embedding": (lambda i, w: F.embedding(i, w, padding_idx=1) * 1.5, [idx(6, 3, 4), r(6, 5)]),
    "cross_entropy": (lambda x, y: F.cross_entropy(x, y), [r(5, 7), idx(7, 5)]),
    "nll_mse_l1": (lambda x, y, t: F.nll_loss(F.log_softmax(x, 1), y) + F.mse_loss(x, t)
                   + F.l1_loss(x, t) + F.smooth_l1_loss(x, t), [r(4, 3), idx(3, 4), r(4, 3)]),
    "views": (lambda x: torch.cat([x.reshape(6, 5).permute(1, 0)[1:4, ::2],
                                   x.transpose(0, 2).reshape(5, 6)[:3, 1:4]], dim=1)
              .unsqueeze(0).expand(2, 3, 6) * x.flatten()[:6], [r(2, 3, 5)]),
    "split_select": (lambda x: torch.stack([c.sum(1) for c in x.chunk(3, dim=1)])
                     + x[:, 2] + x.split([1, 5], dim=1)[1][:, 4], [r(4, 6)]),
    "arith": (lambda a, b: (a + b * 2 - a / (b * b + 1) + a ** 3 + torch.sqrt(b * b + 0.5)
                            + torch.exp(a) - torch.log(b * b + 1) + torch.abs(a) - (-b)
                            + torch.maximum(a, b) + torch.minimum(a, 0.3 * b)
                            + torch.clamp(a, -0.5, 0.5) + torch.rsqrt(b * b + 1)
                            + 1 / (a * a + 2) + (1 - a)), [r(3, 4), r(3, 4)]),
    "log1p_expm1": (lambda x: torch.log1p(x * x) * torch.expm1(x), [r(3, 5)]),
    "trig_steps": (lambda x: torch.sin(x) * torch.cos(2 * x) + torch.floor(3 * x) * x
                   + torch.ceil(3 * x) - torch.round(5 * x) * torch.sign(x) * x, [r(3, 7)]),
    "cumsum_flip": (lambda x: x.cumsum(1) * x.flip(0, 2) + x.cumsum(-1), [r(3, 4, 5)]),
    "broadcast": (lambda a, b, c: a * b + c - a / 3, [r(3, 1, 4), r(2, 1), r(4)]),
    "compare_where": (lambda a, b: torch.where(a > b, a, b) + torch.where(a <= 0.1, a * 2, b)
                      + (a != b).to(D) + (a == a).to(D) * (b >= 0).to(D)
                      + a.masked_fill(a < -0.5, 0.0), [r(4, 5), r(4, 5)]),
    "reductions": (lambda x: x.sum() + x.sum(dim=(0, 2)).mean() + x.mean(dim=1, keepdim=True)
                   + x.amax(dim=-1, keepdim=True) + x.var(dim=1, keepdim=True)
                   + x.max() - x.min() + x.amin(dim=(1, 2), keepdim=True), [r(3, 4, 5)]),
    "advanced_index": (lambda x, i: x[:, i] * 2, [r(3, 6, 2), idx(6, 4, 2)]),
    "gather": (lambda x, i: x.gather(1, i) * 3, [r(4, 5), idx(5, 4, 3)]),
    "constants": (lambda x: x * torch.ones(3, 4, dtype=D) + torch.full((4,), 2.5, dtype=D)
                  + torch.arange(4, dtype=D) + torch.zeros_like(x), [r(3, 4)]),
    "any": (lambda x: x * (x > 0.5).any(dim=1, keepdim=True).to(D), [r(5, 4)]),
    "dtype_cast": (lambda x, i: x * i.to(D) + (x > 0).sum(dim=1, keepdim=True).to(D),
                   [r(3, 4), idx(5, 3, 4)]),
}


def _inputs(spec, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in spec:
        if s[0] == "float":
            out.append(torch.randn(*s[1], generator=g, dtype=D))
        elif s[0] == "ties":
            out.append(torch.randint(0, 3, s[1], generator=g).to(D))
        else:
            out.append(torch.randint(0, s[1], s[2], generator=g))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering_matches_torch_float64(name, nf_backend):
    fn, spec = CASES[name]
    inputs = _inputs(spec, 7)
    ours = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    ref = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    seen = set(nf.torch.report())
    compiled = torch.compile(fn, backend=nf_backend, options={"fallback": "error"},
                             dynamic=False, fullgraph=True)
    out, want = compiled(*ours), fn(*ref)
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-9,
                               atol=1e-10)
    assert out.dtype == want.dtype
    if not want.requires_grad:          # an integer result (pooling indices): forward only
        return
    head = torch.randn(want.shape, generator=torch.Generator().manual_seed(3), dtype=D)
    (out * head).sum().backward()
    (want * head).sum().backward()
    for a, b in zip(ours, ref):
        if b.grad is not None:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-10)
    graphs = [g for name, g in nf.torch.report().items() if name not in seen]
    assert graphs and all(not g["fallback"] for g in graphs)
