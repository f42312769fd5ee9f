"""Initial values of parameters: the `init` of nf.parameter made concrete.

Each parameter draws from its own stream, seeded by the trainer's seed and
the parameter's name, so adding a parameter leaves the others unchanged.

    "zeros", "ones"   constant
    "normal"          N(0, 1)                       torch.nn.init.normal_
    "uniform"         U(0, 1)                       torch.nn.init.uniform_
    "xavier"          U(-a, a), a = sqrt(6 / (fan_in + fan_out))
                                                    torch.nn.init.xavier_uniform_
    "kaiming"         U(-b, b), b = sqrt(6 / fan_in)
                                                    torch.nn.init.kaiming_uniform_
                                                    (its defaults: a=0, fan_in, gain sqrt(2))
    ndarray           that array (copied)

Fans follow torch: for a weight shaped (out, in, *kernel), fan_in =
in * prod(kernel) and fan_out = out * prod(kernel) (nn.dense and nn.conv2d
take torch's layout). For a 0-d or 1-d tensor (torch refuses these) both
fans are the element count. Integer and bool parameters take the value
cast from the float draw.

Hands on: NumPy arrays of the parameter's shape and dtype.
"""
import math
import zlib

import numpy as np

from ..te import dtype as dt


def fans(shape):
    """(fan_in, fan_out) of a tensor shaped `shape`, torch's rule.

    >>> fans((16, 8, 3, 3))
    (72, 144)
    """
    if len(shape) < 2:
        n = math.prod(shape)
        return n, n
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def initial_value(param, seed=0):
    """A fresh array for nf.parameter `param` under `seed`.

    >>> w = nf.parameter((4, 3), init="xavier", name="w")
    >>> initial_value(w, seed=0).shape
    (4, 3)
    """
    init, shape = param.op.init, param.shape
    out_dtype = dt.to_numpy(param.dtype)
    if isinstance(init, np.ndarray):
        return init.astype(out_dtype, copy=True)
    if init in ("zeros", "ones"):
        return np.full(shape, 1 if init == "ones" else 0, out_dtype)
    rng = np.random.default_rng([seed, zlib.crc32(param.name.encode())])
    fan_in, fan_out = fans(shape)
    if init == "normal":
        value = rng.standard_normal(shape)
    elif init == "uniform":
        value = rng.uniform(0.0, 1.0, shape)
    else:
        bound = math.sqrt(6.0 / (fan_in + fan_out)) if init == "xavier" \
            else math.sqrt(6.0 / fan_in)
        value = rng.uniform(-bound, bound, shape)
    return np.asarray(value).astype(out_dtype)
