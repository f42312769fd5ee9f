"""Building blocks several zoo networks share, each in its NeoFlow form and
its PyTorch form side by side: convolution + batch norm (+ activation),
ReLU6 and leaky ReLU as custom operators, zero initial states and synthetic
classification data.

NeoFlow forms take a `ParamSet` and make their parameters under a name
prefix; torch forms read the same names from a dict of torch tensors.

Hands on: Tensors (NeoFlow) and torch tensors (twins).
"""
import numpy as np

from .. import nn, te


def zeros(shape, dtype, name):
    """A tensor of zeros (an initial recurrent state).

    >>> h0 = zeros((64, 128), "float32", "h0")
    """
    return te.compute(shape, lambda *i: te.const(0.0, dtype), name=name)


def relu6(x):
    """F.relu6 (hardtanh to [0, 6]) as a custom operator; like torch, the
    gradient is 0 at both ends.

    >>> y = relu6(nf.placeholder((2, 8, 4, 4), name="x"))
    """
    six, zero = te.const(6.0, x.dtype), te.const(0.0, x.dtype)
    return te.compute(x.shape, lambda *i: te.where(
        (x[i] > 0) & (x[i] < 6), x[i], te.where(x[i] >= 6, six, zero)), name="relu6")


def leaky_relu(x, slope):
    """F.leaky_relu(x, slope) as a custom operator.

    >>> y = leaky_relu(nf.placeholder((2, 8), name="x"), 0.1)
    """
    return te.compute(x.shape, lambda *i: te.where(x[i] > 0, x[i], x[i] * slope),
                      name="leaky_relu")


def batch_norm(ps, x, name):
    """Training-mode batch norm over channels with affine weight and bias and
    running statistics (requires_grad=False parameters the Trainer updates).

    >>> y = batch_norm(ps, x, "bn1")     # makes bn1.weight, bn1.bias, bn1.running_*
    """
    c = x.shape[1]
    weight = ps(f"{name}.weight", (c,), init="ones")
    bias = ps(f"{name}.bias", (c,), init="zeros")
    mean = ps(f"{name}.running_mean", (c,), init="zeros", requires_grad=False)
    var = ps(f"{name}.running_var", (c,), init="ones", requires_grad=False)
    return nn.batch_norm(x, mean, var, weight, bias, training=True)


def conv_bn(ps, x, name, out_channels, kernel, stride=1, groups=1, act=None):
    """conv2d, or conv3d for a 5-d x (no bias, 'same'-style padding kernel // 2;
    kernel an int or a tuple per spatial dim) -> batch norm -> `act` ("relu",
    "relu6" or None).

    >>> y = conv_bn(ps, x, "stem", 32, 3, stride=2, act="relu6")
    """
    ks = _kernel(kernel, x.ndim)
    w = ps(f"{name}.conv.weight", (out_channels, x.shape[1] // groups) + ks, init="kaiming")
    conv = {4: nn.conv2d, 5: nn.conv3d}[x.ndim]
    y = batch_norm(ps, conv(x, w, stride=stride, padding=tuple(k // 2 for k in ks),
                            groups=groups), f"{name}.bn")
    return {"relu": nn.relu, "relu6": relu6, None: lambda t: t}[act](y)


def torch_batch_norm(p, x, name):
    """The torch form of `batch_norm` (updates the running statistics in place).

    >>> y = torch_batch_norm(p, x, "bn1")
    """
    import torch.nn.functional as F
    return F.batch_norm(x, p[f"{name}.running_mean"], p[f"{name}.running_var"],
                        p[f"{name}.weight"], p[f"{name}.bias"], training=True)


def torch_conv_bn(p, x, name, kernel, stride=1, groups=1, act=None):
    """The torch form of `conv_bn`.

    >>> y = torch_conv_bn(p, x, "stem", 3, stride=2, act="relu6")
    """
    import torch.nn.functional as F
    conv = {4: F.conv2d, 5: F.conv3d}[x.dim()]
    y = conv(x, p[f"{name}.conv.weight"], stride=stride,
             padding=tuple(k // 2 for k in _kernel(kernel, x.dim())), groups=groups)
    y = torch_batch_norm(p, y, f"{name}.bn")
    return {"relu": F.relu, "relu6": F.relu6, None: lambda t: t}[act](y)


def _kernel(kernel, ndim):
    """A kernel size (int or tuple) as a tuple over the ndim - 2 spatial dims."""
    return (kernel,) * (ndim - 2) if isinstance(kernel, int) else tuple(kernel)


def classification_batch(rng, dtype, x_shape, classes):
    """{"x": standard-normal data of `x_shape`, "y": int64 labels in [0, classes)}.

    >>> classification_batch(np.random.default_rng(0), "float32", (8, 1, 28, 28), 10)["y"].shape
    (8,)
    """
    return {"x": rng.standard_normal(x_shape).astype(dtype),
            "y": rng.integers(0, classes, x_shape[0]).astype(np.int64)}
