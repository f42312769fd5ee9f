"""Gradients of the operator library and of hand-written expressions against
torch.autograd, in float64 and float32, through the interpreter."""
import itertools

import pytest
import torch
import torch.nn.functional as F

import neoflow as nf
from grad_check import Spec, check_fd, check_torch

DTYPES = ["float64", "float32"]


def _reduce_axis(n, name):
    return nf.reduce_axis(n, name=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(dtype):
    check_torch(lambda a, b: nf.nn.matmul(a, b), torch.matmul,
                [Spec((3, 4)), Spec((4, 5))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_matmul(dtype):
    check_torch(lambda a, b: nf.nn.batch_matmul(a, b), torch.bmm,
                [Spec((2, 3, 4)), Spec((2, 4, 5))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dense(dtype):
    check_torch(lambda x, w, b: nf.nn.dense(x, w, b), F.linear,
                [Spec((2, 3, 4)), Spec((5, 4)), Spec((5,))], dtype)


CONV2D = list(itertools.product((1, 2, 3), (1, 2, 3), (0, 1, 2), (1, 3)))


@pytest.mark.parametrize("stride,dilation,padding,groups", CONV2D)
def test_conv2d(stride, dilation, padding, groups):
    kw = dict(stride=stride, dilation=dilation, padding=padding, groups=groups)
    dtype = "float64" if (stride + dilation + padding) % 2 else "float32"
    check_torch(lambda x, w, b: nf.nn.conv2d(x, w, b, **kw),
                lambda x, w, b: F.conv2d(x, w, b, **kw),
                [Spec((2, 3, 7, 8)), Spec((3, 3 // groups, 2, 3)), Spec((3,))], dtype)


@pytest.mark.parametrize("stride,dilation,padding", list(itertools.product((1, 2, 3), (1, 3),
                                                                          (0, 2))))
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv1d(stride, dilation, padding, dtype):
    kw = dict(stride=stride, dilation=dilation, padding=padding)
    check_torch(lambda x, w: nf.nn.conv1d(x, w, **kw), lambda x, w: F.conv1d(x, w, **kw),
                [Spec((2, 2, 11)), Spec((3, 2, 3))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=1), dict(kernel_size=3, stride=2,
                                                                   padding=1),
                                dict(kernel_size=2, stride=2), dict(kernel_size=3, stride=2,
                                                                    dilation=2, ceil_mode=True)])
def test_max_pool2d(dtype, kw):
    check_torch(lambda x: nf.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw),
                [Spec((2, 2, 7, 8))], dtype)


def test_max_pool2d_ties_go_to_the_first_element():
    x = nf.placeholder((1, 1, 4, 4), "float64", name="x")
    y = nf.nn.max_pool2d(x, 3, stride=1)
    (dx,) = nf.grad(nf.nn.sum(y), [x])
    value = torch.zeros((1, 1, 4, 4), dtype=torch.float64, requires_grad=True)
    F.max_pool2d(value, 3, stride=1).sum().backward()
    got = nf.evaluate(dx, {x: value.detach().numpy()})
    assert (got == value.grad.numpy()).all()
    assert got.sum() == 4 and got[0, 0, :2, :2].sum() == 4   # each window: its first element


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1,
                                     count_include_pad=False, ceil_mode=True),
                                dict(kernel_size=2)])
def test_avg_pool2d(dtype, kw):
    check_torch(lambda x: nf.nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw),
                [Spec((2, 2, 7, 8))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, -1])
def test_softmax(dtype, dim):
    check_torch(lambda x: nf.nn.softmax(x, dim), lambda x: F.softmax(x, dim),
                [Spec((3, 5))], dtype)
    check_torch(lambda x: nf.nn.log_softmax(x, dim), lambda x: F.log_softmax(x, dim),
                [Spec((3, 5))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm(dtype):
    check_torch(lambda x, w, b: nf.nn.layer_norm(x, (3, 4), w, b),
                lambda x, w, b: F.layer_norm(x, (3, 4), w, b),
                [Spec((2, 3, 4)), Spec((3, 4)), Spec((3, 4))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm(dtype):
    def ours(x, w, b):
        return nf.nn.batch_norm(x, None, None, w, b, training=True)

    def theirs(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True)
    check_torch(ours, theirs, [Spec((4, 3, 2, 2)), Spec((3,)), Spec((3,))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding(dtype):
    check_torch(lambda i, w: nf.nn.embedding(i, w), F.embedding,
                [Spec((2, 5), "int64", high=6), Spec((6, 3))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy(dtype):
    check_torch(lambda x, y: nf.nn.cross_entropy(x, y), F.cross_entropy,
                [Spec((4, 5)), Spec((4,), "int64", high=5)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pixel_shuffle(dtype):
    check_torch(lambda x: nf.nn.pixel_shuffle(x, 2), lambda x: F.pixel_shuffle(x, 2),
                [Spec((2, 8, 3, 2))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_transpose_concat_pad(dtype):
    def ours(a, b):
        r = nf.nn.reshape(nf.nn.transpose(a, 0, 1), (3, 8))
        c = nf.nn.concat([r, b], dim=0)
        return nf.nn.pad(c, (1, 2, 0, 1)) * nf.nn.pad(c, (0, 3, 1, 0))

    def theirs(a, b):
        c = torch.cat([a.transpose(0, 1).reshape(3, 8), b], 0)
        return F.pad(c, (1, 2, 0, 1)) * F.pad(c, (0, 3, 1, 0))
    check_torch(ours, theirs, [Spec((4, 3, 2)), Spec((2, 8))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_activations_and_losses(dtype):
    def ours(x, t):
        y = nf.nn.gelu(x) + nf.nn.gelu(x, approximate="tanh") + nf.nn.elu(x) + nf.nn.relu(x)
        return nf.nn.mse_loss(nf.nn.sigmoid(y) + nf.nn.tanh(y), t)

    def theirs(x, t):
        y = F.gelu(x) + F.gelu(x, approximate="tanh") + F.elu(x) + F.relu(x)
        return F.mse_loss(torch.sigmoid(y) + torch.tanh(y), t)
    check_torch(ours, theirs, [Spec((3, 4)), Spec((3, 4))], dtype)


INTRINSICS = {
    "exp": (nf.exp, torch.exp, False), "log": (nf.log, torch.log, True),
    "tanh": (nf.tanh, torch.tanh, False), "sigmoid": (nf.sigmoid, torch.sigmoid, False),
    "sqrt": (nf.sqrt, torch.sqrt, True), "rsqrt": (nf.rsqrt, torch.rsqrt, True),
    "abs": (nf.abs, torch.abs, False), "erf": (nf.erf, torch.erf, False),
    "floor": (nf.floor, torch.floor, False), "neg": (lambda v: -v, torch.neg, False),
}


@pytest.mark.parametrize("name", sorted(INTRINSICS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_intrinsics(name, dtype):
    ours, theirs, positive = INTRINSICS[name]
    check_torch(lambda x: nf.compute(x.shape, lambda i, j: ours(x[i, j])), theirs,
                [Spec((3, 4), positive=positive)], dtype)


BINARY = {
    "add": (lambda a, b: a + b, torch.add), "sub": (lambda a, b: a - b, torch.sub),
    "mul": (lambda a, b: a * b, torch.mul), "div": (lambda a, b: a / b, torch.div),
    "pow": (nf.pow, torch.pow), "maximum": (nf.maximum, torch.maximum),
    "minimum": (nf.minimum, torch.minimum),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_intrinsics_with_broadcasting(name, dtype):
    ours, theirs = BINARY[name]
    positive = name == "pow"
    check_torch(lambda a, b: nf.compute((3, 4), lambda i, j: ours(a[i, 0], b[j])),
                lambda a, b: theirs(a, b), [Spec((3, 1), positive=positive),
                                           Spec((4,), positive=positive)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ties_of_maximum_split_evenly(dtype):
    check_torch(lambda a: nf.compute((3,), lambda i: nf.maximum(a[i], a[i]) * 3.0
                                     + nf.minimum(a[i], 0.0 * a[i])),
                lambda a: torch.maximum(a, a) * 3 + torch.minimum(a, 0 * a),
                [Spec((3,))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_constant_exponents_where_and_cast(dtype):
    other = "float32" if dtype == "float64" else "float64"

    def ours(x):
        return nf.compute(x.shape, lambda i: nf.where(
            x[i] > 0, nf.pow(x[i], 3.0) + nf.pow(x[i], 1.0) * nf.pow(x[i], 0.0),
            nf.cast(nf.cast(x[i], other) * 2.0, dtype)) + x[i] ** 2.0)

    def theirs(x):
        twice = (x.to(getattr(torch, other)) * 2).to(x.dtype)
        return torch.where(x > 0, x ** 3 + x, twice) + x ** 2
    check_torch(ours, theirs, [Spec((7,))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_same_tensor_read_several_times_and_by_several_computes(dtype):
    def ours(a):
        k = _reduce_axis(4, "k")
        s = nf.compute((4,), lambda i: nf.sum(a[i, k] * a[k, i] + a[k, k], axis=k))
        t = nf.compute((4, 4), lambda i, j: a[i, j] * s[j] + a[j, i] * a[i, i])
        return t

    def theirs(a):
        s = (a * a.T).sum(1) + torch.diagonal(a).sum()
        return a * s[None, :] + a.T * torch.diagonal(a)[:, None]
    check_torch(ours, theirs, [Spec((4, 4))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_and_min_reductions_nested(dtype):
    def ours(a):
        k, j = _reduce_axis(5, "k"), _reduce_axis(3, "j")
        # a reduction inside another's body, a max over two axes, a min
        return nf.compute((3,), lambda i: nf.sum(a[i, k] * nf.max(a[j, k], axis=j), axis=k)
                          + nf.min(a[i, k] * 2.0, axis=k))

    def theirs(a):
        return (a * a.max(0).values[None, :]).sum(1) + (a * 2).min(1).values
    check_torch(ours, theirs, [Spec((3, 5))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_over_several_axes_with_a_condition(dtype):
    def ours(a):
        k, j = _reduce_axis(4, "k"), _reduce_axis(3, "j")
        return nf.compute((2,), lambda i: nf.max(a[i, j, k], axis=[j, k], where=k + j < 5))

    def theirs(a):
        mask = torch.tensor([[k + j < 5 for k in range(4)] for j in range(3)])
        return a.masked_fill(~mask, float("-inf")).flatten(1).max(1).values
    check_torch(ours, theirs, [Spec((2, 3, 4))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_capsule_convolution(dtype):
    """A capsule conv: every input capsule (C_in of dim D) votes for every output
    capsule through a DxE matrix per (kernel position, capsule pair)."""
    N, C, D, H, K, CO, E = 1, 2, 3, 5, 3, 2, 2

    def ours(x, w):
        kh, kw = _reduce_axis(K, "kh"), _reduce_axis(K, "kw")
        c, d = _reduce_axis(C, "c"), _reduce_axis(D, "d")
        O = H - K + 1
        return nf.compute((N, CO, E, O, O), lambda n, o, e, y, z: nf.sum(
            x[n, c, d, y + kh, z + kw] * w[o, c, kh, kw, d, e], axis=[c, kh, kw, d]))

    def theirs(x, w):
        patches = x.unfold(3, K, 1).unfold(4, K, 1)        # n c d y z kh kw
        return torch.einsum("ncdyzhw,ochwde->noeyz", patches, w)
    check_torch(ours, theirs, [Spec((N, C, D, H, H)), Spec((CO, C, K, K, D, E))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_by_floordiv_and_mod_and_upsampling(dtype):
    def ours(a):
        flat = nf.compute((12,), lambda i: a[i // 4, i % 4])
        up = nf.compute((24,), lambda i: flat[i // 2])
        return nf.compute((6, 4), lambda i, j: up[i * 4 + j] * flat[(i * 4 + j) % 12])

    def theirs(a):
        flat = a.reshape(12)
        up = flat.repeat_interleave(2)
        return (up * flat[torch.arange(24) % 12]).reshape(6, 4)
    check_torch(ours, theirs, [Spec((3, 4))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lltm_cell(dtype):
    def ours(x, h, c, w, b):
        xh = nf.nn.concat([x, h], dim=1)
        gates = nf.nn.dense(xh, w, b)
        B, S = c.shape
        ig = nf.compute((B, S), lambda i, j: nf.sigmoid(gates[i, j]))
        og = nf.compute((B, S), lambda i, j: nf.sigmoid(gates[i, S + j]))
        cg = nf.compute((B, S), lambda i, j: nf.tanh(gates[i, 2 * S + j]))
        c2 = nf.compute((B, S), lambda i, j: c[i, j] + ig[i, j] * cg[i, j])
        return nf.compute((B, S), lambda i, j: nf.tanh(c2[i, j]) * og[i, j])

    def theirs(x, h, c, w, b):
        gates = F.linear(torch.cat([x, h], 1), w, b)
        ig, og, cg = gates.chunk(3, dim=1)
        c2 = c + torch.sigmoid(ig) * torch.tanh(cg)
        return torch.tanh(c2) * torch.sigmoid(og)
    check_torch(ours, theirs, [Spec((2, 3)), Spec((2, 4)), Spec((2, 4)), Spec((12, 7)),
                               Spec((12,))], dtype)


def test_ops_torch_lacks_against_finite_differences():
    def tropical_conv(x, w):
        """max-plus convolution: y[i] = max_k x[2i + k - 1] + w[k] (padding -inf)."""
        k = _reduce_axis(3, "k")
        return nf.compute((5,), lambda i: nf.max(x[2 * i + k - 1] + w[k], axis=k,
                                                 where=(2 * i + k - 1 >= 0)
                                                 & (2 * i + k - 1 < 10)))

    def soft_window(x, w):
        """A reduction inside a guarded body, read through // and %."""
        k = _reduce_axis(4, "k")
        return nf.compute((3, 4), lambda i, j: nf.where(
            (i + j) % 2 == 0, nf.log(nf.sum(nf.exp(x[(i * 4 + j + k) // 2] * w[k]), axis=k)),
            x[(i * 4 + j) % 10] * w[j]))
    check_fd(tropical_conv, [Spec((10,)), Spec((3,))], native=True)
    check_fd(soft_window, [Spec((10,)), Spec((4,))], native=True)
