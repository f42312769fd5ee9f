"""The operator library: standard deep-learning operators written as tensor
expressions — the same language a user writes — with PyTorch's argument
names, defaults, shapes and semantics. Unsupported torch options raise
NeoFlowError; nothing falls back to NumPy or PyTorch.

>>> import neoflow as nf
>>> x = nf.placeholder((8, 3, 7, 7), name="x")
>>> w = nf.parameter((4, 3, 3, 3), name="w")
>>> y = nf.nn.relu(nf.nn.conv2d(x, w, padding="same"))
>>> y.shape
(8, 4, 7, 7)
"""
from .activation import elu, gelu, log_softmax, relu, sigmoid, softmax, tanh
from .activation import (celu, hardsigmoid, hardswish, hardtanh, leaky_relu, logsigmoid, mish,
                         prelu, relu6, selu, silu, softplus)
from .einsum import einsum
from .dropout import dropout
from .cumulative import cumprod, cumsum
from .conv import conv1d, conv2d, conv3d, conv_transpose2d
from .embedding import embedding
from .linear import batch_matmul, dense, matmul
from .loss import cross_entropy, mse_loss
from .loss import (binary_cross_entropy, binary_cross_entropy_with_logits, huber_loss, kl_div,
                   l1_loss, nll_loss, smooth_l1_loss)
from .norm import (batch_norm, batch_norm_running_stats, batch_norm_stats, layer_norm,
                   state_updates)
from .pool import (adaptive_avg_pool2d, adaptive_avg_pool3d, adaptive_max_pool2d, avg_pool2d,
                   avg_pool3d, max_pool2d, max_pool3d)
from .reduce import amax, amin, mean, sum, var
from .reduce import logsumexp
from .norm import group_norm, instance_norm, rms_norm
from .shape import (concat, flatten, narrow, pad, permute, pixel_shuffle, reshape, slice,
                    split, transpose)

__all__ = ["dense", "matmul", "batch_matmul", "conv1d", "conv2d", "max_pool2d", "avg_pool2d",
           "batch_norm", "batch_norm_stats", "batch_norm_running_stats", "state_updates",
           "layer_norm", "softmax", "log_softmax", "relu", "gelu", "elu", "sigmoid", "tanh",
           "embedding", "reshape", "flatten", "transpose", "permute", "concat", "split",
           "narrow", "slice", "pad", "pixel_shuffle", "sum", "mean", "var", "amax", "amin",
           "cross_entropy", "mse_loss"]
__all__ += ["silu", "mish", "softplus", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish",
            "logsigmoid", "relu6", "selu", "celu", "prelu", "group_norm", "rms_norm",
            "instance_norm", "nll_loss", "binary_cross_entropy",
            "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss", "l1_loss",
            "kl_div", "logsumexp", "einsum"]
__all__ += ["dropout"]
__all__ += ["cumsum", "cumprod"]
__all__ += ["conv3d", "conv_transpose2d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool2d",
            "adaptive_avg_pool3d", "adaptive_max_pool2d"]
