"""The example networks, each written twice over the same parameter names:
in NeoFlow (nf.nn operators and custom tensor-expression operators) and in
PyTorch (the reference for the parity tests in tests/models and the
baseline of bench/train.py).

    mlp     MLP on 8x8 digits: dense-relu-...-dense, cross-entropy
    lenet   LeNet-5 on digits upsampled to 16x16: conv-relu-maxpool x2, 3 dense
    lltm    an LLTM cell (PyTorch's C++-extension tutorial cell) unrolled over a
            sequence, regression of the mean of the first input feature
    milstm  a multiplicative-integration LSTM (Wu et al., 2016) unrolled over a
            sequence, classification of the sign of the first feature's sum

Each model is a `Spec`: `build(batch, dtype)` returns a NeoFlow `Net`,
`torch_loss(params, batch)` computes the same loss with torch from a dict of
torch tensors keyed by the NeoFlow names, `batch(rng, n, dtype)` draws a
synthetic batch (the digits examples feed real data of the same shapes).

>>> net = SPECS["mlp"].build(batch=32)
>>> trainer = nf.Trainer(net.loss, optimizer=nf.optim.SGD(lr=0.1, momentum=0.9))
"""
import numpy as np

import neoflow as nf


class Net:
    """A NeoFlow model: its 0-d `loss`, the `output` the loss is taken of
    (logits or prediction) and its data `inputs` by name."""

    def __init__(self, loss, output, inputs):
        self.loss, self.output, self.inputs = loss, output, inputs


class Spec:
    """A model in NeoFlow and in PyTorch, with a synthetic batch generator."""

    def __init__(self, build, torch_loss, batch):
        self.build, self.torch_loss, self.batch = build, torch_loss, batch


def _param(shape, name, init, dtype):
    return nf.parameter(shape, init=init, dtype=dtype, name=name)


def _zeros(shape, dtype, name):
    return nf.compute(shape, lambda *i: nf.const(0.0, dtype), name=name)


# -- MLP ------------------------------------------------------------------------
def build_mlp(batch, dtype="float32", n_in=64, hidden=(128,), n_out=10):
    """MLP: len(hidden) dense+relu layers, then a dense layer to n_out logits."""
    x = nf.placeholder((batch, n_in), dtype, name="x")
    y = nf.placeholder((batch,), "int64", name="y")
    h, width = x, n_in
    sizes = list(hidden) + [n_out]
    for n, out in enumerate(sizes, 1):
        w = _param((out, width), f"fc{n}.weight", "kaiming", dtype)
        b = _param((out,), f"fc{n}.bias", "zeros", dtype)
        h = nf.nn.dense(h, w, b)
        if n < len(sizes):
            h = nf.nn.relu(h)
        width = out
    return Net(nf.nn.cross_entropy(h, y), h, {"x": x, "y": y})


def torch_mlp(p, batch):
    import torch.nn.functional as F
    h, n = batch["x"], 1
    while f"fc{n}.weight" in p:
        h = F.linear(h, p[f"fc{n}.weight"], p[f"fc{n}.bias"])
        if f"fc{n + 1}.weight" in p:
            h = F.relu(h)
        n += 1
    return F.cross_entropy(h, batch["y"])


def digits_batch(shape):
    def draw(rng, n, dtype="float32"):
        return {"x": rng.standard_normal((n,) + shape).astype(dtype),
                "y": rng.integers(0, 10, n).astype(np.int64)}
    return draw


# -- LeNet-5 --------------------------------------------------------------------
def build_lenet(batch, dtype="float32", size=16, c1=6, c2=16, f1=120, f2=84, n_out=10):
    """LeNet-5 for 1 x size x size images: conv5x5(pad 2)-relu-maxpool2,
    conv5x5-relu-maxpool2, then dense f1, f2 and n_out (relu between)."""
    x = nf.placeholder((batch, 1, size, size), dtype, name="x")
    y = nf.placeholder((batch,), "int64", name="y")
    h = nf.nn.conv2d(x, _param((c1, 1, 5, 5), "conv1.weight", "kaiming", dtype),
                     _param((c1,), "conv1.bias", "zeros", dtype), padding=2)
    h = nf.nn.max_pool2d(nf.nn.relu(h), 2)
    h = nf.nn.conv2d(h, _param((c2, c1, 5, 5), "conv2.weight", "kaiming", dtype),
                     _param((c2,), "conv2.bias", "zeros", dtype))
    h = nf.nn.max_pool2d(nf.nn.relu(h), 2)
    h = nf.nn.flatten(h, 1)
    width = h.shape[1]
    for n, out in enumerate((f1, f2, n_out), 1):
        h = nf.nn.dense(h, _param((out, width), f"fc{n}.weight", "kaiming", dtype),
                        _param((out,), f"fc{n}.bias", "zeros", dtype))
        if n < 3:
            h = nf.nn.relu(h)
        width = out
    return Net(nf.nn.cross_entropy(h, y), h, {"x": x, "y": y})


def torch_lenet(p, batch):
    import torch.nn.functional as F
    h = F.max_pool2d(F.relu(F.conv2d(batch["x"], p["conv1.weight"], p["conv1.bias"],
                                     padding=2)), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, p["conv2.weight"], p["conv2.bias"])), 2)
    h = h.flatten(1)
    for n in (1, 2, 3):
        h = F.linear(h, p[f"fc{n}.weight"], p[f"fc{n}.bias"])
        if n < 3:
            h = F.relu(h)
    return F.cross_entropy(h, batch["y"])


# -- LLTM -----------------------------------------------------------------------
def lltm_cell(x, t, h, c, weight, bias):
    """One LLTM step as custom operators: the input [h, x_t] (a guarded read),
    gates = W [h, x_t] + b, then c' = c + elu(g2) * sigmoid(g0),
    h' = tanh(c') * sigmoid(g1).

    (Written as two sums over W's column halves instead, the gradient of W
    that nf.grad builds today grows as 4**steps as a tree; see the report.)"""
    batch, state = h.shape
    n_in = x.shape[2]
    joined = nf.compute((batch, state + n_in),
                        lambda b, k: nf.where(k < state, h[b, k], x[b, t, k - state]),
                        name=f"lltm_input{t}")
    k = nf.reduce_axis(state + n_in, name="k")
    gates = nf.compute((batch, 3 * state),
                       lambda b, g: nf.sum(weight[g, k] * joined[b, k], axis=k) + bias[g],
                       name=f"lltm_gates{t}")

    def elu(z):
        return nf.where(z > 0, z, nf.exp(z) - 1)

    new_c = nf.compute((batch, state), lambda b, s: c[b, s] + elu(gates[b, 2 * state + s])
                       * nf.sigmoid(gates[b, s]), name=f"lltm_c{t}")
    new_h = nf.compute((batch, state), lambda b, s: nf.tanh(new_c[b, s])
                       * nf.sigmoid(gates[b, state + s]), name=f"lltm_h{t}")
    return new_h, new_c


def build_lltm(batch, dtype="float32", steps=8, n_in=4, state=16):
    """LLTM over `steps` inputs; a dense head on the last h predicts y (mse)."""
    x = nf.placeholder((batch, steps, n_in), dtype, name="x")
    y = nf.placeholder((batch, 1), dtype, name="y")
    weight = _param((3 * state, state + n_in), "lltm.weight", "xavier", dtype)
    bias = _param((3 * state,), "lltm.bias", "zeros", dtype)
    h = c = _zeros((batch, state), dtype, "lltm_zeros")
    for t in range(steps):
        h, c = lltm_cell(x, t, h, c, weight, bias)
    out = nf.nn.dense(h, _param((1, state), "head.weight", "xavier", dtype),
                      _param((1,), "head.bias", "zeros", dtype))
    return Net(nf.nn.mse_loss(out, y), out, {"x": x, "y": y})


def torch_lltm(p, batch):
    import torch
    import torch.nn.functional as F
    x = batch["x"]
    n, steps, _ = x.shape
    state = p["lltm.bias"].shape[0] // 3
    h = c = x.new_zeros((n, state))
    for t in range(steps):
        gates = F.linear(torch.cat([h, x[:, t]], dim=1), p["lltm.weight"], p["lltm.bias"])
        g0, g1, g2 = gates.chunk(3, dim=1)
        c = c + F.elu(g2) * torch.sigmoid(g0)
        h = torch.tanh(c) * torch.sigmoid(g1)
    return F.mse_loss(F.linear(h, p["head.weight"], p["head.bias"]), batch["y"])


def lltm_batch(rng, n, dtype="float32", steps=8, n_in=4):
    x = rng.standard_normal((n, steps, n_in)).astype(dtype)
    return {"x": x, "y": x[:, :, :1].mean(axis=1).astype(dtype)}


# -- MI-LSTM --------------------------------------------------------------------
def milstm_cell(x, t, h, c, p):
    """One MI-LSTM step: wx = W x_t, uh = U h, then per gate
    alpha*wx*uh + beta1*uh + beta2*wx + b (i, f, o: sigmoid; z: tanh),
    c' = f*c + i*z, h' = o*tanh(c'). `h` is None for the first step (h = 0)."""
    batch, n_in = x.shape[0], x.shape[2]
    four = p["W"].shape[0]
    hidden = four // 4
    f = nf.reduce_axis(n_in, name="f")
    wx = nf.compute((batch, four), lambda b, j: nf.sum(p["W"][j, f] * x[b, t, f], axis=f),
                    name=f"mi_wx{t}")
    if h is None:
        pre = nf.compute((batch, four), lambda b, j: p["beta2"][j] * wx[b, j] + p["bias"][j],
                         name=f"mi_pre{t}")
    else:
        uh = nf.nn.dense(h, p["U"])
        pre = nf.compute((batch, four), lambda b, j: p["alpha"][j] * wx[b, j] * uh[b, j]
                         + p["beta1"][j] * uh[b, j] + p["beta2"][j] * wx[b, j] + p["bias"][j],
                         name=f"mi_pre{t}")

    def gate(b, s, n):
        return pre[b, n * hidden + s]

    def cell(b, s):
        new = nf.sigmoid(gate(b, s, 0)) * nf.tanh(gate(b, s, 3))
        return new if c is None else nf.sigmoid(gate(b, s, 1)) * c[b, s] + new

    new_c = nf.compute((batch, hidden), cell, name=f"mi_c{t}")
    new_h = nf.compute((batch, hidden), lambda b, s: nf.sigmoid(gate(b, s, 2))
                       * nf.tanh(new_c[b, s]), name=f"mi_h{t}")
    return new_h, new_c


def build_milstm(batch, dtype="float32", steps=8, n_in=4, hidden=16, n_out=2):
    """MI-LSTM over `steps` inputs; a dense head on the last h gives n_out logits."""
    x = nf.placeholder((batch, steps, n_in), dtype, name="x")
    y = nf.placeholder((batch,), "int64", name="y")
    p = {"W": _param((4 * hidden, n_in), "mi.W", "xavier", dtype),
         "U": _param((4 * hidden, hidden), "mi.U", "xavier", dtype),
         "alpha": _param((4 * hidden,), "mi.alpha", "ones", dtype),
         "beta1": _param((4 * hidden,), "mi.beta1", "ones", dtype),
         "beta2": _param((4 * hidden,), "mi.beta2", "ones", dtype),
         "bias": _param((4 * hidden,), "mi.bias", "zeros", dtype)}
    h = c = None
    for t in range(steps):
        h, c = milstm_cell(x, t, h, c, p)
    logits = nf.nn.dense(h, _param((n_out, hidden), "head.weight", "xavier", dtype),
                         _param((n_out,), "head.bias", "zeros", dtype))
    return Net(nf.nn.cross_entropy(logits, y), logits, {"x": x, "y": y})


def torch_milstm(p, batch):
    import torch
    import torch.nn.functional as F
    x = batch["x"]
    n, steps, _ = x.shape
    hidden = p["mi.U"].shape[1]
    h = c = x.new_zeros((n, hidden))
    for t in range(steps):
        wx, uh = F.linear(x[:, t], p["mi.W"]), F.linear(h, p["mi.U"])
        pre = p["mi.alpha"] * wx * uh + p["mi.beta1"] * uh + p["mi.beta2"] * wx + p["mi.bias"]
        i, f, o, z = pre.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(z)
        h = torch.sigmoid(o) * torch.tanh(c)
    return F.cross_entropy(F.linear(h, p["head.weight"], p["head.bias"]), batch["y"])


def milstm_batch(rng, n, dtype="float32", steps=8, n_in=4):
    x = rng.standard_normal((n, steps, n_in)).astype(dtype)
    return {"x": x, "y": (x[:, :, 0].sum(axis=1) > 0).astype(np.int64)}


SPECS = {"mlp": Spec(build_mlp, torch_mlp, digits_batch((64,))),
         "lenet": Spec(build_lenet, torch_lenet, digits_batch((1, 16, 16))),
         "lltm": Spec(build_lltm, torch_lltm, lltm_batch),
         "milstm": Spec(build_milstm, torch_milstm, milstm_batch)}
