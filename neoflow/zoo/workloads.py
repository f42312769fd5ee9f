"""tune/workloads: named computations to tune from the command line and to
benchmark -- GEMM, the ResNet-18 3x3 convolutions, three novel operators
(LLTM cell forward and backward, MI-LSTM gates, capsule convolution) and
the training step of any zoo network.

Hands on: lists of `Workload`s (a label, output tensors, input tensors).
"""
from dataclasses import dataclass

from .. import nn, te
from ..autodiff import grad
from ..errors import NeoFlowError

# (channels, spatial size) of ResNet-18's stride-1 3x3 convolutions, one per stage
RESNET18_3X3 = ((64, 56), (128, 28), (256, 14), (512, 7))


@dataclass
class Workload:
    """A computation to tune: `outputs` as a function of `inputs`."""
    label: str
    outputs: list
    inputs: list


def matmul(m=1024, n=1024, k=1024):
    """C = A @ B with A (m, k) and B (k, n).

    >>> [w] = matmul(64, 64, 64); w.label
    'matmul 64x64x64'
    """
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [Workload(f"matmul {m}x{n}x{k}", [C], [A, B])]


def conv2d_resnet18(batch=8):
    """The stride-1 3x3 convolutions of ResNet-18's four stages (padding 1).

    >>> [w.label for w in conv2d_resnet18()][0]
    'conv2d 8x64x56x56 k3'
    """
    out = []
    for channels, size in RESNET18_3X3:
        x = te.placeholder((batch, channels, size, size), name="x")
        w = te.placeholder((channels, channels, 3, 3), name="w")
        out.append(Workload(f"conv2d {batch}x{channels}x{size}x{size} k3",
                            [nn.conv2d(x, w, padding=1)], [x, w]))
    return out


def lltm_cell(batch=64, n_in=32, state=128):
    """One LLTM cell (zoo/lltm.py) forward, and its backward for a given dh:
    outputs h, c and the gradients of h with respect to W, b, h_prev, c_prev, x.

    >>> [w] = lltm_cell(4, 3, 5); len(w.outputs)
    7
    """
    x = te.placeholder((batch, n_in), name="x")
    h = te.placeholder((batch, state), name="h")
    c = te.placeholder((batch, state), name="c")
    W = te.placeholder((3 * state, state + n_in), name="W")
    b = te.placeholder((3 * state,), name="b")
    dh = te.placeholder((batch, state), name="dh")
    k, f = te.reduce_axis(state, name="k"), te.reduce_axis(n_in, name="f")
    gates = te.compute((batch, 3 * state), lambda i, g: te.sum(W[g, k] * h[i, k], axis=k)
                       + te.sum(W[g, state + f] * x[i, f], axis=f) + b[g], name="gates")
    c_new = te.compute((batch, state), lambda i, s: c[i, s] + te.where(
        gates[i, 2 * state + s] > 0, gates[i, 2 * state + s],
        te.exp(gates[i, 2 * state + s]) - 1) * te.sigmoid(gates[i, s]), name="c_new")
    h_new = te.compute((batch, state), lambda i, s: te.tanh(c_new[i, s])
                       * te.sigmoid(gates[i, state + s]), name="h_new")
    grads = grad(h_new, [W, b, h, c, x], head=dh)
    return [Workload(f"lltm cell fwd+bwd b{batch} in{n_in} state{state}",
                     [h_new, c_new] + list(grads), [x, h, c, W, b, dh])]


def milstm_gates(batch=64, n_in=64, hidden=256):
    """One MI-LSTM step (zoo/milstm.py): Wx and Uh, the multiplicative
    integration of all four gates, the cell and hidden updates.

    >>> [w] = milstm_gates(2, 3, 4); [t.name for t in w.outputs]
    ['mi_c', 'mi_h']
    """
    x = te.placeholder((batch, n_in), name="x")
    h = te.placeholder((batch, hidden), name="h")
    c = te.placeholder((batch, hidden), name="c")
    W = te.placeholder((4 * hidden, n_in), name="W")
    U = te.placeholder((4 * hidden, hidden), name="U")
    alpha, beta1, beta2, bias = (te.placeholder((4 * hidden,), name=n)
                                 for n in ("alpha", "beta1", "beta2", "bias"))
    wx, uh = nn.dense(x, W), nn.dense(h, U)
    pre = te.compute((batch, 4 * hidden), lambda i, j: alpha[j] * wx[i, j] * uh[i, j]
                     + beta1[j] * uh[i, j] + beta2[j] * wx[i, j] + bias[j], name="mi_pre")
    c_new = te.compute((batch, hidden), lambda i, s: te.sigmoid(pre[i, hidden + s]) * c[i, s]
                       + te.sigmoid(pre[i, s]) * te.tanh(pre[i, 3 * hidden + s]), name="mi_c")
    h_new = te.compute((batch, hidden), lambda i, s: te.sigmoid(pre[i, 2 * hidden + s])
                       * te.tanh(c_new[i, s]), name="mi_h")
    return [Workload(f"milstm gates b{batch} in{n_in} hidden{hidden}", [c_new, h_new],
                     [x, h, c, W, U, alpha, beta1, beta2, bias])]


def capsule_conv(batch=8, channels=16, size=14, caps=4, kernel=3):
    """Capsule convolution: every element a caps x caps matrix, products of
    input and weight capsules summed over input channels and the window
    (padding kernel // 2).

        out[n, o, y, x, i, j] = sum_{c, r, s, k} in[n, c, y + r, x + s, i, k] * W[o, c, r, s, k, j]

    >>> [w] = capsule_conv(1, 2, 5, 2, 3); w.outputs[0].shape
    (1, 2, 5, 5, 2, 2)
    """
    p = kernel // 2
    X = te.placeholder((batch, channels, size, size, caps, caps), name="capsules")
    W = te.placeholder((channels, channels, kernel, kernel, caps, caps), name="W")
    c, r, s, k = (te.reduce_axis(n, name=a) for n, a in
                  ((channels, "c"), (kernel, "r"), (kernel, "s"), (caps, "kk")))

    def body(n, o, y, x, i, j):
        yy, xx = y + r - p, x + s - p
        inside = (yy >= 0) & (yy < size) & (xx >= 0) & (xx < size)
        return te.sum(te.where(inside, X[n, c, yy, xx, i, k], 0.0) * W[o, c, r, s, k, j],
                      axis=[c, r, s, k])
    out = te.compute((batch, channels, size, size, caps, caps), body, name="capsule_conv")
    return [Workload(f"capsule conv b{batch} c{channels} {size}x{size} caps{caps}",
                     [out], [X, W])]


def zoo_step(name, preset="default"):
    """The training step (forward, backward, SGD update) of a zoo network.

    >>> [w] = zoo_step("lltm", "small"); w.label
    'zoo lltm (small) training step'
    """
    from ..graph.training import training_graph
    from ..optim import SGD
    from . import get as get_network
    net = get_network(name)
    model = net.build(preset)
    g = training_graph(model.loss, SGD(lr=0.01))
    return [Workload(f"zoo {name} ({preset}) training step", g.outputs, g.leaves)]


WORKLOADS = {"matmul": matmul, "conv2d-resnet18": conv2d_resnet18, "lltm-cell": lltm_cell,
             "milstm-gates": milstm_gates, "capsule-conv": capsule_conv}


def get(spec):
    """The workloads a name stands for: a key of WORKLOADS, optionally with
    sizes ("matmul:2048,1024,1024"), or "zoo:<network>[:small]".

    >>> [w.label for w in get("matmul:64,32,16")]
    ['matmul 64x32x16']
    """
    name, _, args = spec.partition(":")
    if name == "zoo":
        net, _, preset = args.partition(":")
        return zoo_step(net, preset or "default")
    if name not in WORKLOADS:
        raise NeoFlowError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}, "
                           "zoo:<network>")
    try:
        sizes = [int(a) for a in args.split(",")] if args else []
    except ValueError:
        raise NeoFlowError(f"workload sizes must be integers separated by commas: {spec!r}") \
            from None
    return WORKLOADS[name](*sizes)
