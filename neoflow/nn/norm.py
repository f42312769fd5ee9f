"""Normalisation: batch_norm (training statistics or running statistics),
its running-statistics update for the trainer, and layer_norm.

Each is several computes — mean, variance (two-pass, biased), normalise —
that the partitioner later fuses.

Hands on: compute Tensors; a training batch_norm output carries
`state_updates`, pairs (state parameter, tensor of its new value), which
`state_updates(outputs)` collects for the trainer to write back in place.
"""
import numbers

from .. import te
from ..errors import NeoFlowError, ShapeError
from ..te.visit import topo_tensors
from .common import check_float, check_same_dtype
from .reduce import count, moments

__all__ = ["batch_norm", "batch_norm_stats", "batch_norm_running_stats", "layer_norm",
           "state_updates"]


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
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    if not isinstance(shape, (tuple, list)) or not shape \
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise NeoFlowError(f"layer_norm: normalized_shape must be an int or a non-empty "
                           f"tuple of ints, got {normalized_shape!r}")
    shape = tuple(shape)
    nd = len(shape)
    if x.ndim < nd or x.shape[x.ndim - nd:] != shape:
        raise ShapeError(f"layer_norm: input '{x.name}' has shape {x.shape}, whose last {nd} "
                         f"dimension(s) should be normalized_shape {shape}")
    check_same_dtype(op, "input", x, weight=weight, bias=bias)
    for what, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != shape:
            raise ShapeError(f"layer_norm: {what} '{t.name}' has shape {t.shape}, expected "
                             f"normalized_shape {shape}")
    lead = x.ndim - nd
    mean, var = moments(x, tuple(range(lead, x.ndim)), False, 0, "layer_norm")
    return _normalise(x, lambda i: i[:lead], mean, var, weight, bias, lambda i: i[lead:], eps,
                      "layer_norm")


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
