"""Convolutions (F.conv1d, F.conv2d): stride, padding (int, tuple, 'same',
'valid'), dilation, groups (depthwise included) and bias, batched or not.

Padding is a guarded read (nf.where with the read inside), emitted only on
the sides where a read can fall outside the input. Size-1 reduce dimensions
(depthwise channels, 1-wide kernels) get no reduce axis.

conv_transpose2d is the input gradient of the convolution, derived by
autodiff (see `_conv_transpose`). A strided convolution carries its input
gradient split by phase into dense convolutions (polyphase.py) as the
adjoint rule for its input.

Hands on: one compute Tensor per convolution.
"""
from .. import te
from ..autodiff import grad
from ..errors import NeoFlowError, ShapeError
from . import polyphase
from .common import affine, check_float, check_same_dtype, conjunction, int_tuple, is_int

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose2d"]

SPATIAL = {1: ("length",), 2: ("height", "width"), 3: ("depth", "height", "width")}


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


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv3d: input (N, C_in, D, H, W) or (C_in, D, H, W), weight
    (C_out, C_in/groups, kD, kH, kW), bias (C_out,).

    >>> x = nf.placeholder((2, 3, 5, 9, 9), name="x"); w = nf.parameter((6, 3, 3, 3, 3), name="w")
    >>> nf.nn.conv3d(x, w, stride=(1, 2, 2), padding=1).shape
    (2, 6, 5, 5, 5)
    """
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _check_operands(op, nd, x, w, b, groups, layout):
    """The checks every convolution makes of its operands (dtypes, ranks,
    groups; `layout` names the weight's first two dimensions); returns the
    input's channel dimension."""
    check_float(x, op, "input")
    check_same_dtype(op, "input", x, weight=w, bias=b)
    names = SPATIAL[nd]
    if x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{op}: input '{x.name}' must be {nd + 2}-d (N, C, "
                         f"{', '.join(names)}) or {nd + 1}-d without the batch "
                         f"dimension, got shape {x.shape}")
    if w.ndim != nd + 2:
        raise ShapeError(f"{op}: weight '{w.name}' must be {nd + 2}-d ({layout}, "
                         f"{', '.join('k' + s[0] for s in names)}), got shape {w.shape}")
    if not is_int(groups) or groups < 1:
        raise NeoFlowError(f"{op}: groups must be a positive int, got {groups!r}")
    return x.ndim - nd - 1


def _conv(op, nd, x, w, b, stride, padding, dilation, groups, phase_weight=False):
    cdim = _check_operands(op, nd, x, w, b, groups, "C_out, C_in/groups")
    spatial_names = SPATIAL[nd]
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
        total.append(acc)
        return acc + b[oc] if b is not None else acc

    total = []
    y = te.compute(x.shape[:cdim] + (cout,) + tuple(out), body, name=op)
    if polyphase.eligible(stride, dilation, ks, cin_g == 1 and cout_g == 1, sizes[-1]):
        polyphase.attach(y, total[0], x, w, (cdim, stride, lo, dilation, groups, tuple(out)),
                         phase_weight)
    return y


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """F.conv_transpose2d: input (N, C_in, H, W) or (C_in, H, W), weight
    (C_in, C_out/groups, kH, kW), bias (C_out,); output size
    (H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding + 1.

    >>> x = nf.placeholder((2, 8, 4, 4), name="x"); w = nf.parameter((8, 3, 4, 4), name="w")
    >>> nf.nn.conv_transpose2d(x, w, stride=2, padding=1).shape
    (2, 3, 8, 8)
    """
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding,
                           output_padding, groups, dilation)


def _conv_transpose(op, nd, x, w, b, stride, padding, output_padding, groups, dilation):
    """The transposed convolution as what it is, the input gradient of the
    convolution with the same weight and geometry: nf.grad of `_conv` over a
    placeholder shaped like the output, with `x` as the head. The gradient
    the index solver derives is dense -- each output point sums only over the
    input points and taps that reach it (for stride s, about kernel/s taps per
    dimension), no test of divisibility in the common dilation-1 case -- and
    its own gradients are again dense convolutions."""
    cdim = _check_operands(op, nd, x, w, b, groups, "C_in, C_out/groups")
    names = SPATIAL[nd]
    cin, ks = x.shape[cdim], w.shape[2:]
    if w.shape[0] != cin:
        raise ShapeError(f"{op}: input has {cin} channels (input.shape[{cdim}]) but weight "
                         f"'{w.name}' expects {w.shape[0]} (weight.shape[0])")
    if cin % groups:
        raise ShapeError(f"{op}: input has {cin} channels (input.shape[{cdim}]), not "
                         f"divisible by groups={groups}")
    cout = w.shape[1] * groups
    if b is not None and b.shape != (cout,):
        raise ShapeError(f"{op}: bias '{b.name}' has shape {b.shape}, expected ({cout},) "
                         f"(weight.shape[1] * groups)")
    if isinstance(padding, str):
        raise NeoFlowError(f"{op}: padding must be an int or a tuple of {nd} ints "
                           f"(torch has no '{padding}' for transposed convolutions)")
    stride = int_tuple(stride, nd, op, "stride", 1)
    padding = int_tuple(padding, nd, op, "padding", 0)
    dilation = int_tuple(dilation, nd, op, "dilation", 1)
    extra = int_tuple(output_padding, nd, op, "output_padding", 0)
    sizes, out, conv_out = x.shape[-nd:], [], []
    for d in range(nd):
        if extra[d] >= max(stride[d], dilation[d]):
            raise NeoFlowError(f"{op}: output_padding {extra[d]} in the {names[d]} must be "
                               f"smaller than the stride ({stride[d]}) or the dilation "
                               f"({dilation[d]}), as in torch")
        n = (sizes[d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (ks[d] - 1) \
            + extra[d] + 1
        if n < 1:
            raise ShapeError(f"{op}: the output {names[d]} would be {n} (input.shape"
                             f"[{cdim + 1 + d}] = {sizes[d]}, stride {stride[d]}, padding "
                             f"{padding[d]}, kernel {ks[d]}); expected at least 1")
        out.append(n)
        conv_out.append((n + 2 * padding[d] - dilation[d] * (ks[d] - 1) - 1) // stride[d] + 1)
    z = te.placeholder(x.shape[:cdim] + (cout,) + tuple(out), x.dtype, name=op)
    y = _conv(op, nd, z, w, None, stride, padding, dilation, groups, phase_weight=True)
    head = x
    if tuple(conv_out) != sizes:    # output_padding >= stride: the conv has extra rows
        head = te.compute(y.shape, lambda *i: te.where(conjunction(
            [i[cdim + 1 + d] < sizes[d] for d in range(nd) if conv_out[d] > sizes[d]]),
            x[i], 0), name=f"{op}_head")
    out_t, = grad(y, [z], head=head)
    out_t.name = op
    if b is None:
        return out_t
    return te.compute(out_t.shape, lambda *i: out_t[i] + b[i[cdim]], name=f"{op}_bias")
