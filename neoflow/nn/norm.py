"""Normalisation: batch_norm (training statistics or running statistics),
its running-statistics update for the trainer, layer_norm, group_norm,
instance_norm and rms_norm.

Each is several computes — mean, variance (two-pass, biased), normalise —
that the partitioner later fuses.

Hands on: compute Tensors; a training batch_norm output carries
`state_updates`, pairs (state parameter, tensor of its new value), which
`state_updates(outputs)` collects for the trainer to write back in place.
"""
import numbers

import numpy as np

from .. import te
from ..errors import NeoFlowError, ShapeError
from ..te import dtype as dt
from ..te.visit import topo_tensors
from .common import check_float, check_same_dtype, is_int, reject
from .reduce import count, moments, reduce_over

__all__ = ["batch_norm", "batch_norm_stats", "batch_norm_running_stats", "layer_norm",
           "state_updates", "group_norm", "instance_norm", "rms_norm"]


def batch_norm_stats(input):
    """Per-channel (mean, biased variance) of input (N, C, *) over every dim
    but 1 — the statistics a training batch_norm normalises with.

    >>> x = nf.placeholder((8, 3, 5, 5), name="x")
    >>> mean, var = nf.nn.batch_norm_stats(x); mean.shape
    (3,)
    """
    x = check_float(input, "batch_norm", "input")
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: input '{x.name}' must have at least 2 dimensions "
                         f"(N, C, ...), got shape {x.shape}")
    dims = (0,) + tuple(range(2, x.ndim))
    if count(x, dims) < 2:
        raise ShapeError(f"batch_norm: training needs more than 1 value per channel; input "
                         f"'{x.name}' has shape {x.shape}")
    return moments(x, dims, False, 0, "batch_norm")


def batch_norm_running_stats(input, running_mean, running_var, momentum=0.1, stats=None):
    """The running statistics after one training step, as torch updates them:
    (1 - momentum) * running + momentum * batch, with the batch variance
    unbiased (n / (n - 1)). `stats` reuses (mean, var) from batch_norm_stats.

    >>> rm = nf.parameter((3,), init="zeros", name="rm", requires_grad=False)
    >>> rv = nf.parameter((3,), init="ones", name="rv", requires_grad=False)
    >>> new_rm, new_rv = nf.nn.batch_norm_running_stats(x, rm, rv)
    """
    op = "batch_norm"
    x = check_float(input, op, "input")
    if momentum is None:
        raise NeoFlowError("batch_norm: momentum=None (a cumulative moving average) is not "
                           "supported; give a float momentum")
    if not isinstance(momentum, numbers.Real):
        raise NeoFlowError(f"batch_norm: momentum must be a float, got {momentum!r}")
    _check_channel_vectors(x, running_mean=running_mean, running_var=running_var)
    mean, var = stats if stats is not None else batch_norm_stats(x)
    n = count(x, (0,) + tuple(range(2, x.ndim)))
    m = float(momentum)
    new_mean = te.compute(mean.shape, lambda c: running_mean[c] * (1.0 - m) + mean[c] * m,
                          name="batch_norm_running_mean")
    new_var = te.compute(var.shape,
                         lambda c: running_var[c] * (1.0 - m) + var[c] * (m * n / (n - 1)),
                         name="batch_norm_running_var")
    return new_mean, new_var


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=True,
               momentum=0.1, eps=1e-5):
    """F.batch_norm over input (N, C, *): normalises each channel with the
    batch statistics (training=True, biased variance) or the running ones.
    In training, given running statistics (nf.parameter(..., requires_grad=False))
    are updated by the trainer: see `state_updates`.
    Note: training defaults to True here (NeoFlow trains); torch's default is False.

    >>> y = nf.nn.batch_norm(x, rm, rv, weight=g, bias=b)
    """
    op = "batch_norm"
    check_float(x, op, "input")
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: input '{x.name}' must have at least 2 dimensions "
                         f"(N, C, ...), got shape {x.shape}")
    _check_channel_vectors(x, running_mean=running_mean, running_var=running_var,
                           weight=weight, bias=bias)
    if not isinstance(eps, numbers.Real):
        raise NeoFlowError(f"batch_norm: eps must be a float, got {eps!r}")
    if (running_mean is None) != (running_var is None):
        raise NeoFlowError("batch_norm: give both running_mean and running_var, or neither")
    updates = ()
    if training:
        mean, var = batch_norm_stats(x)
        if running_mean is not None:
            new = batch_norm_running_stats(x, running_mean, running_var, momentum,
                                           stats=(mean, var))
            updates = ((running_mean, new[0]), (running_var, new[1]))
    else:
        if running_mean is None:
            raise NeoFlowError("batch_norm: training=False needs running_mean and running_var")
        mean, var = running_mean, running_var
    out = _normalise(x, lambda i: (i[1],), mean, var, weight, bias, lambda i: (i[1],), eps,
                     "batch_norm")
    out.state_updates = updates
    return out


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """F.layer_norm: normalises over the trailing `normalized_shape` dims
    (biased variance); weight and bias are shaped `normalized_shape`.

    >>> x = nf.placeholder((4, 7, 16), name="x")
    >>> nf.nn.layer_norm(x, 16).shape
    (4, 7, 16)
    """
    op = "layer_norm"
    x = check_float(input, op, "input")
    shape = _normalized_shape(op, x, normalized_shape)
    nd = len(shape)
    _check_affine(op, x, shape, "normalized_shape", weight=weight, bias=bias)
    lead = x.ndim - nd
    mean, var = moments(x, tuple(range(lead, x.ndim)), False, 0, "layer_norm")
    return _normalise(x, lambda i: i[:lead], mean, var, weight, bias, lambda i: i[lead:], eps,
                      "layer_norm")


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """F.group_norm: input (N, C, *) normalised per sample over each group of
    C / num_groups channels (and every spatial position), biased variance;
    weight and bias are per channel (C,).

    >>> x = nf.placeholder((2, 6, 5, 5), name="x")
    >>> nf.nn.group_norm(x, 3).shape
    (2, 6, 5, 5)
    """
    op = "group_norm"
    x = check_float(input, op, "input")
    if x.ndim < 2:
        raise ShapeError(f"group_norm: input '{x.name}' must have at least 2 dimensions "
                         f"(N, C, ...), got shape {x.shape}")
    c = x.shape[1]
    if not is_int(num_groups) or num_groups < 1 or c % num_groups:
        raise ShapeError(f"group_norm: num_groups={num_groups!r} must be a positive int "
                         f"dividing the {c} channels of input '{x.name}' (input.shape[1])")
    _check_eps(op, eps)
    _check_affine(op, x, (c,), "(C,) = input.shape[1:2]", weight=weight, bias=bias)
    per = c // num_groups
    # statistics over a grouped index space (N, G, C/G, *): dims 2.. reduced
    shape = (x.shape[0], num_groups, per) + x.shape[2:]
    dims = tuple(range(2, len(shape)))
    n = per * count(x, tuple(range(2, x.ndim)))

    def read(f, o):
        return x[(f[0], f[1] * per + f[2] if per > 1 else f[1]) + f[3:]]

    mean = reduce_over(shape, dims, False, read, "group_norm_mean",
                       post=lambda acc, o: acc * (1.0 / n))

    def sq(f, o):
        diff = read(f, o) - mean[o]
        return diff * diff

    var = reduce_over(shape, dims, False, sq, "group_norm_var",
                      post=lambda acc, o: acc * (1.0 / n))
    group = (lambda i: (i[0], i[1] // per)) if per > 1 else (lambda i: (i[0], i[1]))
    return _normalise(x, group, mean, var, weight, bias, lambda i: (i[1],), eps, op)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """F.instance_norm: input (N, C, *) normalised per sample and channel over
    the spatial positions (biased variance); weight and bias per channel.
    Running statistics are not supported (NeoFlowError).

    >>> nf.nn.instance_norm(x).shape
    (2, 6, 5, 5)
    """
    op = "instance_norm"
    x = check_float(input, op, "input")
    reject(op, running_mean=(running_mean, None), running_var=(running_var, None),
           use_input_stats=(use_input_stats, True))
    if x.ndim < 3:
        raise ShapeError(f"instance_norm: input '{x.name}' must have at least 3 dimensions "
                         f"(N, C, spatial...), got shape {x.shape}")
    if count(x, tuple(range(2, x.ndim))) < 2:
        raise ShapeError(f"instance_norm: input '{x.name}' {x.shape} has 1 spatial element; "
                         "expected more than 1 (as torch in training)")
    return group_norm(x, x.shape[1], weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """F.rms_norm: x / sqrt(mean(x**2 over the trailing normalized_shape dims)
    + eps) [* weight]; eps=None is the dtype's machine epsilon, as in torch.

    >>> x = nf.placeholder((4, 7, 16), name="x")
    >>> nf.nn.rms_norm(x, (16,)).shape
    (4, 7, 16)
    """
    op = "rms_norm"
    x = check_float(input, op, "input")
    shape = _normalized_shape(op, x, normalized_shape)
    _check_affine(op, x, shape, "normalized_shape", weight=weight)
    if eps is None:
        eps = float(np.finfo(dt.to_numpy(x.dtype)).eps)
    _check_eps(op, eps)
    lead = x.ndim - len(shape)
    dims = tuple(range(lead, x.ndim))
    n = count(x, dims)
    ms = reduce_over(x.shape, dims, False, lambda f, o: x[f] * x[f], "rms_norm_meansq",
                     post=lambda acc, o: acc * (1.0 / n))

    def body(*i):
        y = x[i] * te.rsqrt(ms[i[:lead]] + eps)
        return y * weight[i[lead:]] if weight is not None else y
    return te.compute(x.shape, body, name=op)


def _normalized_shape(op, x, normalized_shape):
    shape = (normalized_shape,) if is_int(normalized_shape) else normalized_shape
    if not isinstance(shape, (tuple, list)) or not shape or not all(is_int(s) for s in shape):
        raise NeoFlowError(f"{op}: normalized_shape must be an int or a non-empty tuple of "
                           f"ints, got {normalized_shape!r}")
    shape = tuple(int(s) for s in shape)
    nd = len(shape)
    if x.ndim < nd or x.shape[x.ndim - nd:] != shape:
        raise ShapeError(f"{op}: input '{x.name}' has shape {x.shape}, whose last {nd} "
                         f"dimension(s) should be normalized_shape {shape}")
    return shape


def _check_affine(op, x, shape, expected, **tensors):
    check_same_dtype(op, "input", x, **tensors)
    for what, t in tensors.items():
        if t is not None and t.shape != shape:
            raise ShapeError(f"{op}: {what} '{t.name}' has shape {t.shape}, expected "
                             f"{shape} ({expected})")


def _check_eps(op, eps):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise NeoFlowError(f"{op}: eps must be a float, got {eps!r}")


def state_updates(outputs):
    """Every (state parameter, new value tensor) pair that the computation of
    `outputs` asks to write back after a step (e.g. batch_norm's running
    statistics), in DAG order.

    >>> loss = nf.nn.mean(nf.nn.batch_norm(x, rm, rv))
    >>> [(p.name, t.shape) for p, t in nf.nn.state_updates(loss)]
    [('rm', (3,)), ('rv', (3,))]
    """
    outs = [outputs] if isinstance(outputs, te.Tensor) else list(outputs)
    pairs = []
    for t in topo_tensors(outs):
        pairs.extend(getattr(t, "state_updates", ()))
    return pairs


def _normalise(x, stat_index, mean, var, weight, bias, affine_index, eps, name):
    """(x - mean) * rsqrt(var + eps) [* weight] [+ bias], elementwise."""
    def body(*i):
        s = stat_index(i)
        y = (x[i] - mean[s]) * te.rsqrt(var[s] + eps)
        if weight is not None:
            y = y * weight[affine_index(i)]
        if bias is not None:
            y = y + bias[affine_index(i)]
        return y
    return te.compute(x.shape, body, name=name)


def _check_channel_vectors(x, **vectors):
    check_same_dtype("batch_norm", "input", x, **vectors)
    for what, t in vectors.items():
        if t is not None and t.shape != (x.shape[1],):
            raise ShapeError(f"batch_norm: {what} '{t.name}' has shape {t.shape} but input has "
                             f"{x.shape[1]} channels (input.shape[1]); expected "
                             f"({x.shape[1]},)")
