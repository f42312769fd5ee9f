"""Convolutions (F.conv1d, F.conv2d): stride, padding (int, tuple, 'same',
'valid'), dilation, groups (depthwise included) and bias, batched or not.

Padding is a guarded read (nf.where with the read inside), emitted only on
the sides where a read can fall outside the input. Size-1 reduce dimensions
(depthwise channels, 1-wide kernels) get no reduce axis.

Hands on: one compute Tensor per convolution.
"""
from .. import te
from ..errors import NeoFlowError, ShapeError
from .common import affine, check_float, check_same_dtype, conjunction, int_tuple, is_int

__all__ = ["conv1d", "conv2d"]

_SPATIAL = {1: ("length",), 2: ("height", "width")}


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv1d: input (N, C_in, L) or (C_in, L), weight (C_out, C_in/groups, K).

    >>> x = nf.placeholder((2, 4, 33), name="x"); w = nf.parameter((8, 4, 3), name="w")
    >>> nf.nn.conv1d(x, w, padding="same").shape
    (2, 8, 33)
    """
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv2d: input (N, C_in, H, W) or (C_in, H, W), weight
    (C_out, C_in/groups, kH, kW), bias (C_out,).

    >>> x = nf.placeholder((2, 3, 7, 7), name="x"); w = nf.parameter((6, 3, 3, 3), name="w")
    >>> nf.nn.conv2d(x, w, stride=2, padding=1).shape
    (2, 6, 4, 4)
    """
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def _conv(op, nd, x, w, b, stride, padding, dilation, groups):
    check_float(x, op, "input")
    check_same_dtype(op, "input", x, weight=w, bias=b)
    spatial_names = _SPATIAL[nd]
    if x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{op}: input '{x.name}' must be {nd + 2}-d (N, C, "
                         f"{', '.join(spatial_names)}) or {nd + 1}-d without the batch "
                         f"dimension, got shape {x.shape}")
    if w.ndim != nd + 2:
        raise ShapeError(f"{op}: weight '{w.name}' must be {nd + 2}-d (C_out, C_in/groups, "
                         f"{', '.join('k' + s[0] for s in spatial_names)}), got shape {w.shape}")
    if not is_int(groups) or groups < 1:
        raise NeoFlowError(f"{op}: groups must be a positive int, got {groups!r}")
    cdim = x.ndim - nd - 1
    cin, cout, cin_g, ks = x.shape[cdim], w.shape[0], w.shape[1], w.shape[2:]
    if cin != cin_g * groups:
        raise ShapeError(f"{op}: input has {cin} channels (input.shape[{cdim}]) but weight "
                         f"expects {cin_g * groups} (weight.shape[1] * groups = {cin_g} * "
                         f"{groups})")
    if cout % groups:
        raise ShapeError(f"{op}: weight has {cout} output channels (weight.shape[0]), not "
                         f"divisible by groups={groups}")
    if b is not None and b.shape != (cout,):
        raise ShapeError(f"{op}: bias '{b.name}' has shape {b.shape}, expected ({cout},) "
                         "(weight.shape[0])")
    stride = int_tuple(stride, nd, op, "stride", 1)
    dilation = int_tuple(dilation, nd, op, "dilation", 1)
    if isinstance(padding, str):
        if padding == "valid":
            lo = hi = (0,) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise NeoFlowError(f"{op}: padding='same' is not supported for strided "
                                   f"convolutions (stride={stride}), as in torch")
            total = [d * (k - 1) for d, k in zip(dilation, ks)]
            lo = tuple(t // 2 for t in total)          # torch puts the odd one on the right
            hi = tuple(t - t // 2 for t in total)
        else:
            raise NeoFlowError(f"{op}: padding must be an int, a tuple, 'same' or 'valid', "
                               f"got {padding!r}")
    else:
        lo = hi = int_tuple(padding, nd, op, "padding", 0)

    sizes = x.shape[-nd:]
    out = []
    for d in range(nd):
        span = dilation[d] * (ks[d] - 1) + 1
        n = (sizes[d] + lo[d] + hi[d] - span) // stride[d] + 1
        if n < 1:
            raise ShapeError(
                f"{op}: input {spatial_names[d]} is {sizes[d]} (input.shape[{cdim + 1 + d}]), "
                f"{sizes[d] + lo[d] + hi[d]} after padding, smaller than the dilated kernel "
                f"({span}); expected at least {span}")
        out.append(n)

    cout_g = cout // groups
    rc = te.reduce_axis(cin_g, name="rc") if cin_g > 1 else None
    rk = [te.reduce_axis(k, name=f"r{s[0]}") if k > 1 else None
          for k, s in zip(ks, spatial_names)]

    def body(*idx):
        batch, oc, o = idx[:cdim], idx[cdim], idx[cdim + 1:]
        group = None if groups == 1 else (oc if cout_g == 1 else oc // cout_g)
        channel = affine((group, cin_g), (rc, 1))
        pos, conds = [], []
        for d in range(nd):
            p = affine((o[d], stride[d]), (rk[d], dilation[d]), const=-lo[d])
            last = (out[d] - 1) * stride[d] - lo[d] + (ks[d] - 1) * dilation[d]
            if lo[d] > 0:
                conds.append(p >= 0)
            if last >= sizes[d]:
                conds.append(p < sizes[d])
            pos.append(p)
        value = x[batch + (channel,) + tuple(pos)]
        cond = conjunction(conds)
        if cond is not None:
            value = te.where(cond, value, 0)
        prod = value * w[(oc, rc if rc is not None else 0) +
                         tuple(r if r is not None else 0 for r in rk)]
        axes = [a for a in [rc] + rk if a is not None]
        acc = te.sum(prod, axis=axes) if axes else prod
        return acc + b[oc] if b is not None else acc

    return te.compute(x.shape[:cdim] + (cout,) + tuple(out), body, name=op)
