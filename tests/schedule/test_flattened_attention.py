"""Attention read out of one fused, flattened projection (`qkv[b * T + i,
h * hd + e]`, q/k/v side by side): its d(qkv) is cut at the q/k/v column
boundaries (graph/split on the quotient bounds), each block is scheduled
as a dense batched contraction over split axes (schedule/delinearize.py),
and the gradients match PyTorch in float64."""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow import nn
from neoflow.schedule import Stage
from neoflow.te.divmod import divmod_count

B, T, H, HD = 3, 5, 2, 9            # odd sizes; hd of 9 leaves a vector's worth of columns
D = H * HD


def custom_attention(x, wqkv, temp, rel):
    """Per-head temperature, relative-position bias, read from the flattened projection."""
    qkv = nn.dense(nn.reshape(x, (B * T, D)), wqkv)                     # (B*T, 3D)
    e = nf.reduce_axis(HD, name="e")
    s = nf.compute((B, H, T, T), lambda b, h, i, j: nf.sum(
        qkv[b * T + i, h * HD + e] * qkv[b * T + j, D + h * HD + e], axis=e) * temp[h]
        + rel[h, i - j + T - 1], name="scores")
    a = nn.softmax(s, -1)
    j = nf.reduce_axis(T, name="j")
    return nf.compute((B * T, D), lambda n, c: nf.sum(
        a[n // T, c // HD, n % T, j] * qkv[(n // T) * T + j, 2 * D + c], axis=j), name="ctx")


def torch_attention(x, wqkv, temp, rel):
    qkv = (x.reshape(B * T, D) @ wqkv.T).view(B, T, 3, H, HD).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :] + T - 1
    s = (q @ k.transpose(-1, -2)) * temp[None, :, None, None] + rel[:, offset][None]
    return (torch.softmax(s, -1) @ v).permute(0, 2, 1, 3).reshape(B * T, D)


def test_fused_projection_attention_gradients_match_torch():
    rng = np.random.default_rng(5)
    shapes = {"x": (B, T, D), "wqkv": (3 * D, D), "temp": (H,), "rel": (H, 2 * T - 1)}
    leaves = {n: nf.placeholder(s, "float64", name=n) for n, s in shapes.items()}
    values = {n: rng.standard_normal(s) for n, s in shapes.items()}
    ctx = custom_attention(**leaves)
    head = nf.placeholder(ctx.shape, "float64", name="head")
    grads = nf.grad(ctx, [leaves["x"], leaves["wqkv"], leaves["temp"], leaves["rel"]], head=head)
    inputs = list(leaves.values()) + [head]
    f = nf.build([ctx] + list(grads), inputs)
    hv = rng.standard_normal(ctx.shape)
    got = f(*[values[n] for n in shapes], hv)

    tv = {n: torch.tensor(v, requires_grad=True) for n, v in values.items()}
    out = torch_attention(**tv)
    out.backward(torch.from_numpy(hv))
    want = [out.detach().numpy()] + [tv[n].grad.numpy() for n in shapes]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)
    want_ref = nf.evaluate([ctx] + list(grads), {**{leaves[n]: values[n] for n in shapes},
                                                 head: hv})
    for g, w in zip(got, want_ref):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)

    # d(qkv) comes as three column blocks (q, k, v), each a view over split axes
    pieces = [t for k in f.kernels for t in k.stages if t.name.startswith("ddense.")]
    assert sorted(t.name for t in pieces) == sorted(
        [f"ddense.0_{D}", f"ddense.{D}_{2 * D}", f"ddense.{2 * D}_{3 * D}"])
    for t in pieces:
        st = Stage(t)
        assert st.tensor.shape == (B, T, H, HD), t.name
        assert divmod_count(st.reduction.body) == 0, t.name


def test_zoo_transformer_with_viewed_head_gradients_matches_torch():
    """The zoo's windowed talking-heads attention reads heads as c // dh; at a
    head size of 8 its q/k/context gradients are scheduled over (head, e)."""
    from neoflow import zoo
    from neoflow.graph.partition import fuse_training_graph
    from neoflow.graph.training import training_graph
    model = zoo.get("transformer").build("small", dim=16, heads=2, window=3, seq=6, ff=8)
    _, part = fuse_training_graph(training_graph(model.loss, nf.optim.SGD(lr=0.1)))
    viewed = [t.name for k in part.kernels for t in k.stages if Stage(t).tensor is not t]
    assert len(viewed) >= 3, viewed
    rng = np.random.default_rng(1)
    batch = model.make_batch(rng)
    values = {n: (rng.standard_normal(p.shape) * 0.3).astype(np.float32)
              for n, p in model.params.items()}
    grads = nf.grad(model.loss, [model.params[n] for n in model.trainable])
    inputs = list(model.inputs.values()) + list(model.params.values())
    f = nf.build([model.loss] + list(grads), inputs)
    loss, *ours = f(*[batch[k] for k in model.inputs], *[values[k] for k in model.params])
    twin = model.torch_model(values)
    their = twin({k: torch.from_numpy(v) for k, v in batch.items()})
    their.backward()
    tensors = twin.tensors()
    assert float(loss) == pytest.approx(their.item(), rel=1e-4)
    theirs = {n: tensors[n].grad.numpy() for n in model.trainable}
    scale = max(float(np.abs(g).max()) for g in theirs.values())   # k's bias: exactly 0
    for name, g in zip(model.trainable, ours):
        np.testing.assert_allclose(g, theirs[name], rtol=1e-4, atol=1e-4 * scale, err_msg=name)
