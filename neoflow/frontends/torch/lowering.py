"""frontends/torch/lowering: the lowering table -- one entry per ATen op,
each a function building te / nf.nn tensors that compute exactly what the
op computes (torch's semantics; float rounding aside).

An entry is called `fn(ctx, *args, **kwargs)` with the node's arguments
(te Tensors where the node had tensors, Python values elsewhere); `ctx.out`
is the node's fake result (its shape and dtype are the lowering's target)
and `ctx.meta` its arguments' fake values. An entry raises `Unsupported`
(or any NeoFlowError) for a case it does not cover; the node then runs in
PyTorch. Backward ops with no closed form here (convolution, pooling) are
lowered as `nf.grad` of the forward expression.

Hands on: `TABLE` {ATen OpOverload: lowering}, `DECOMPOSITIONS` for
aot_autograd, and `Unsupported`.
"""
import math
import operator

import torch

from ... import nn, te
from ...autodiff import grad
from ...errors import NeoFlowError
from ...nn.common import conjunction, norm_dims
from ...nn.reduce import reduce_over
from ...te.expr import Read
from ...te.tensor import ComputeOp, Tensor, _read_broadcast
from ...te.simplify import merge_sums
from ...te.visit import substitute, transform
from .convert import te_dtype

aten = torch.ops.aten


class Unsupported(NeoFlowError):
    """This case of an ATen op has no lowering (the node runs in PyTorch)."""


class Context:
    """What a lowering knows of its node: `out` (fake result), `meta` (the
    arguments' fake values, same structure as the args), a `name`, and
    `fold`: the ids of the te tensors (behind its arguments) that only this
    node reads, each element once, which an entry of FOLDING may inline."""

    def __init__(self, out, meta, name, fold=frozenset()):
        self.out, self.meta, self.name, self.fold = out, meta, name, fold

    @property
    def dtype(self):
        return te_dtype(self.out.dtype, self.name)

    @property
    def shape(self):
        return tuple(int(s) for s in self.out.shape)


# --- elementwise ---------------------------------------------------------------------------
def _value(a, idx, shape, dtype):
    """Argument `a` (Tensor or Python number) read at `idx`, as `dtype`."""
    if isinstance(a, Tensor):
        return te.cast(_read_broadcast(a, idx, shape), dtype)
    if isinstance(a, bool) and dtype != "bool":
        a = int(a)
    return te.const(a, dtype)


def elementwise(ctx, fn, *args, dtype=None):
    """A compute over the output's shape: `fn` of the (broadcast) arguments,
    each converted to `dtype` (default: the output's), the result to the
    output's dtype."""
    shape, out_dtype = ctx.shape, ctx.dtype
    dtype = dtype or out_dtype
    return te.compute(shape, lambda *i: te.cast(fn(*[_value(a, i, shape, dtype) for a in args]),
                                                out_dtype), name=ctx.name)


def _promoted(ctx):
    """The dtype torch computes a comparison in (type promotion of its args)."""
    metas = [m for m in ctx.meta if isinstance(m, (torch.Tensor, bool, int, float))]
    return te_dtype(torch.result_type(*metas[:2]) if len(metas) > 1 else
                    metas[0].dtype, ctx.name)


def _ew(fn):
    """An entry computing `fn` of the arguments in the output's dtype."""
    return lambda ctx, *args: elementwise(ctx, fn, *args)


def _compare(fn):
    """An entry computing comparison `fn` in the promoted dtype (bool result)."""
    return lambda ctx, a, b: elementwise(ctx, fn, a, b, dtype=_promoted(ctx))


def _float_only(fn):
    def entry(ctx, *args):
        if ctx.dtype not in ("float32", "float64"):
            raise Unsupported(f"{ctx.name}: only float results are lowered")
        return elementwise(ctx, fn, *args)
    return entry


def _add(ctx, a, b, alpha=1):
    out = elementwise(ctx, lambda x, y: x + y * alpha if alpha != 1 else x + y, a, b)
    return inline_folded(out, ctx.fold) if ctx.fold else out


def _sub(ctx, a, b, alpha=1):
    return elementwise(ctx, lambda x, y: x - y * alpha if alpha != 1 else x - y, a, b)


def _rsub(ctx, a, b, alpha=1):
    return _sub(ctx, b, a, alpha)


def _div(ctx, a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise Unsupported(f"{ctx.name}: rounding_mode={rounding_mode!r}")
    return elementwise(ctx, lambda x, y: x / y, a, b)


def _pow_scalar(ctx, a, e):
    if e == 2:
        return elementwise(ctx, lambda x: x * x, a)
    if e == 1:
        return elementwise(ctx, lambda x: x, a)
    if ctx.dtype not in ("float32", "float64"):
        raise Unsupported(f"{ctx.name}: integer power")
    return elementwise(ctx, lambda x: te.pow(x, te.const(float(e), ctx.dtype)), a)


def _clamp(ctx, x, min=None, max=None):  # noqa: A002 (aten names)
    def fn(v):
        if min is not None:
            v = te.maximum(v, te.const(min, ctx.dtype))
        if max is not None:
            v = te.minimum(v, te.const(max, ctx.dtype))
        return v
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        raise Unsupported(f"{ctx.name}: tensor bounds")
    return elementwise(ctx, fn, x)


def _gelu(ctx, x, approximate="none"):
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return elementwise(ctx, lambda v: 0.5 * v * (1 + te.tanh(c * (v + 0.044715 * v * v * v))),
                           x)
    return elementwise(ctx, lambda v: 0.5 * v * (1 + te.erf(v * (1 / math.sqrt(2.0)))), x)


def _elu(ctx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    return elementwise(ctx, lambda v: te.where(v > 0, v * scale,
                                               (te.exp(v * input_scale) - 1) * (alpha * scale)), x)


def _leaky_relu(ctx, x, slope=0.01):
    return elementwise(ctx, lambda v: te.where(v > 0, v, v * slope), x)


def _leaky_relu_backward(ctx, g, x, slope, self_is_result):
    return elementwise(ctx, lambda gv, xv: te.where(xv > 0, gv, gv * slope), g, x)


def _sign(ctx, x):
    def fn(v):
        zero, one = te.const(0, ctx.dtype), te.const(1, ctx.dtype)
        s = te.where(v > zero, one, te.where(v < zero, -one, zero))
        return te.where(v != v, v, s) if ctx.dtype in ("float32", "float64") else s
    return elementwise(ctx, fn, x)


def _threshold_backward(ctx, g, x, threshold):
    return elementwise(ctx, lambda gv, xv: te.where(xv <= threshold, 0.0 * gv, gv), g, x)


def _bool_op(fn):
    def entry(ctx, *args):
        if any(isinstance(a, Tensor) and a.dtype != "bool" for a in args):
            raise Unsupported(f"{ctx.name}: bitwise ops on integers")
        return elementwise(ctx, fn, *args, dtype="bool")
    return entry


def _where(ctx, cond, a, b):
    shape, dtype = ctx.shape, ctx.dtype
    return te.compute(shape, lambda *i: te.where(_value(cond, i, shape, "bool"),
                                                 _value(a, i, shape, dtype),
                                                 _value(b, i, shape, dtype)), name=ctx.name)


UNARY = {
    aten.exp.default: te.exp, aten.log.default: te.log, aten.tanh.default: te.tanh,
    aten.sigmoid.default: te.sigmoid, aten.sqrt.default: te.sqrt, aten.rsqrt.default: te.rsqrt,
    aten.erf.default: te.erf, aten.reciprocal.default: lambda v: 1 / v,
    aten.log1p.default: te.log1p, aten.expm1.default: te.expm1,
    aten.floor.default: te.floor, aten.ceil.default: te.ceil, aten.round.default: te.round,
    aten.sign.default: te.sign, aten.sin.default: te.sin, aten.cos.default: te.cos,
}
EXACT = {   # elementwise ops valid for every dtype (computed in the output's dtype)
    aten.neg.default: lambda v: -v, aten.abs.default: te.abs,
    aten.relu.default: lambda v: te.maximum(v, 0),
    aten.mul.Tensor: lambda a, b: a * b, aten.mul.Scalar: lambda a, b: a * b,
    aten.maximum.default: te.maximum, aten.minimum.default: te.minimum,
    aten.alias.default: lambda v: v, aten.lift_fresh_copy.default: lambda v: v,
}
COMPARE = {
    aten.eq.Tensor: operator.eq, aten.eq.Scalar: operator.eq,
    aten.ne.Tensor: operator.ne, aten.ne.Scalar: operator.ne,
    aten.lt.Tensor: operator.lt, aten.lt.Scalar: operator.lt,
    aten.le.Tensor: operator.le, aten.le.Scalar: operator.le,
    aten.gt.Tensor: operator.gt, aten.gt.Scalar: operator.gt,
    aten.ge.Tensor: operator.ge, aten.ge.Scalar: operator.ge,
}
BOOLEAN = {
    aten.logical_and.default: operator.and_, aten.logical_or.default: operator.or_,
    aten.bitwise_and.Tensor: operator.and_, aten.bitwise_or.Tensor: operator.or_,
    aten.bitwise_not.default: operator.invert,
}


def _clone(ctx, x, memory_format=None):
    return elementwise(ctx, lambda v: v, x)


def _logical_not(ctx, x):
    return elementwise(ctx, lambda v: ~(v != 0) if x.dtype != "bool" else ~v, x,
                       dtype=x.dtype)


def _isnan(ctx, x):
    return elementwise(ctx, lambda v: v != v, x, dtype=x.dtype)


# --- folding reductions into the sum that adds them -----------------------------------------
# aot_autograd's backward of a weight used at every step of an unrolled
# network adds one matrix product per step (add(add(mm_0, mm_1), mm_2)...),
# each written out in full; a bias adds one sum over the batch per step. An
# add whose operands are such reductions, read once (through views that
# move each element once), takes their bodies in its own: one compute
# holding sum_k ... + sum_k ..., which NeoFlow's fusion merges into one
# reduction (te.simplify.merge_sums) -- the one loop nest nf.Trainer gets
# for the same gradient.
FOLDING = frozenset({aten.add.Tensor})
REDUCTIONS = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default,
                        aten.sum.dim_IntList})
BIJECTIVE = frozenset({aten.permute.default, aten.transpose.int, aten.t.default,
                       aten.view.default, aten._unsafe_view.default, aten.reshape.default,
                       aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
                       aten.squeeze.default, aten.alias.default, aten.clone.default})


def folded_operands(node):
    """The fx nodes behind `node`'s arguments that its lowering may inline
    (node's op is in FOLDING): per argument read at the output's shape, the
    chain of single-use bijective views ending at a reduction or at a
    folding add of the same kind, with each link used once by the next."""
    out = []
    if node.target not in FOLDING or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
        return out
    shape, dtype = _meta_of(node)
    for arg in node.args:
        if not _single_use(arg, node) or _meta_of(arg) != (shape, dtype):
            continue
        chain, n = [], arg
        while n.target in BIJECTIVE and _single_use(n.args[0], n) and \
                _meta_of(n.args[0])[1] == dtype:
            chain.append(n)
            n = n.args[0]
        if n.target in REDUCTIONS or (n.target in FOLDING and folded_operands(n)):
            out += chain + [n]
    return out


def _meta_of(node):
    val = node.meta.get("val")
    return (tuple(val.shape), val.dtype) if isinstance(val, torch.Tensor) else (None, None)


def _single_use(n, user):
    """Whether fx node `n` is an op whose only reader is `user` (an op with
    flat arguments), which names it once."""
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and \
        list(n.users) == [user] and sum(a is n for a in user.args) == 1


def inline_folded(t, fold):
    """Compute `t` with each read of a tensor whose id is in `fold` replaced
    by that tensor's body (recursively), its sums over equal ranges merged."""
    def rebuild(n):
        if isinstance(n, Read) and id(n.tensor) in fold and n.tensor.is_compute:
            src = n.tensor
            return transform(substitute(src.op.body, dict(zip(src.op.axes, n.indices))), rebuild)
        return n
    body = transform(t.op.body, rebuild)
    return t if body is t.op.body else Tensor(t.shape, t.dtype, t.name,
                                               ComputeOp(t.op.axes, merge_sums(body)))


# --- reductions ----------------------------------------------------------------------------
def _reduce(ctx, x, dim, keepdim, reducer="sum", mean=False):
    if not isinstance(x, Tensor):
        raise Unsupported(f"{ctx.name}: not a tensor")
    dims = tuple(range(x.ndim)) if dim is None or dim == [] or dim == () else \
        norm_dims(dim, x.ndim, ctx.name)
    dtype, n = ctx.dtype, 1
    for d in dims:
        n *= x.shape[d]
    post = (lambda acc, o: acc * (1.0 / n)) if mean else None
    if not dims or all(x.shape[d] == 1 for d in dims):
        return te.compute(ctx.shape, lambda *o: te.cast(
            x[_unreduced(x, dims, keepdim, o)], dtype), name=ctx.name)
    return reduce_over(x.shape, dims, keepdim, lambda f, o: te.cast(x[f], dtype), ctx.name,
                       reducer, post)


def _unreduced(x, dims, keepdim, out):
    """The index of `x` for output index `out` when every reduced dim is 1."""
    it, full = iter(out), []
    for d in range(x.ndim):
        if d in dims:
            full.append(0)
            if keepdim:
                next(it)
        else:
            full.append(next(it))
    return tuple(full)


def _sum_dim(ctx, x, dim=None, keepdim=False, dtype=None):
    return _reduce(ctx, x, dim, keepdim)


def _sum_all(ctx, x, dtype=None):
    return _reduce(ctx, x, None, False)


def _mean_dim(ctx, x, dim=None, keepdim=False, dtype=None):
    return _reduce(ctx, x, dim, keepdim, mean=True)


def _mean_all(ctx, x, dtype=None):
    return _reduce(ctx, x, None, False, mean=True)


def _amax(ctx, x, dim=(), keepdim=False):
    return _reduce(ctx, x, dim, keepdim, "max")


def _amin(ctx, x, dim=(), keepdim=False):
    return _reduce(ctx, x, dim, keepdim, "min")


def _var(ctx, x, dim=None, correction=None, keepdim=False):
    return nn.var(x, dim=dim, keepdim=keepdim, correction=1 if correction is None
                  else int(correction))


def _any_dim(ctx, x, dim, keepdim=False):
    one, zero = te.const(1, "int32"), te.const(0, "int32")
    red = reduce_over(x.shape, norm_dims(dim, x.ndim, ctx.name), keepdim,
                      lambda f, o: te.where(x[f] if x.dtype == "bool" else
                                            x[f] != te.const(0, x.dtype), one, zero),
                      f"{ctx.name}_max", "max")
    return te.compute(ctx.shape, lambda *i: red[i] > 0, name=ctx.name)


# --- matrix products -----------------------------------------------------------------------
def _mm(ctx, a, b):
    return nn.matmul(a, b)


def _bmm(ctx, a, b):
    return nn.batch_matmul(a, b)


def _addmm(ctx, bias, a, b, beta=1, alpha=1):
    k = te.reduce_axis(a.shape[1], name="k")
    shape = ctx.shape

    def body(i, j):
        prod = te.sum(a[i, k] * b[k, j], axis=k)
        bval = _read_broadcast(bias, (i, j), shape)
        return (prod * alpha if alpha != 1 else prod) + (bval * beta if beta != 1 else bval)
    return te.compute(shape, body, name=ctx.name)


# --- convolution and pooling ---------------------------------------------------------------
def _conv(ndim, transposed):
    """The nf.nn convolution for an input of rank `ndim`, called as
    conv(x, w, b, stride, padding, dilation, output_padding, groups)."""
    if transposed:
        if ndim != 4:
            raise Unsupported(f"{ndim - 2}-d transposed convolution")
        return lambda x, w, b, s, p, d, op, g: nn.conv_transpose2d(
            x, w, b, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    plain = {3: nn.conv1d, 4: nn.conv2d, 5: nn.conv3d}.get(ndim)
    if plain is None:
        raise Unsupported(f"{ndim - 2}-d convolution")
    return lambda x, w, b, s, p, d, op, g: plain(x, w, b, stride=s, padding=p, dilation=d,
                                                 groups=g)


def _convolution(ctx, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    return _conv(x.ndim, transposed)(x, w, b, list(stride), list(padding), list(dilation),
                                     list(output_padding), groups)


def _convolution_backward(ctx, g, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    y = _conv(x.ndim, transposed)(x, w, None, list(stride), list(padding), list(dilation),
                                  list(output_padding), groups)
    dx, dw = grad(y, [x, w], head=g)
    db = nn.sum(g, dim=[0] + list(range(2, g.ndim))) if output_mask[2] else None
    return (dx if output_mask[0] else None, dw if output_mask[1] else None, db)


def _max_pool2d_with_indices(ctx, x, kernel_size, stride=(), padding=0, dilation=1,
                             ceil_mode=False):
    from ...nn.pool import _geometry
    values = nn.max_pool2d(x, kernel_size, list(stride) or None, padding, dilation, ceil_mode)
    geo = _geometry(ctx.name, 2, x, kernel_size, list(stride) or None, padding, dilation,
                    ceil_mode)
    axes = [te.reduce_axis(k, name=f"r{n}") for k, n in zip(geo.k, "hw")]
    width = x.shape[-1]
    big = x.shape[-1] * x.shape[-2]

    def body(*idx):
        pos, cond = geo.window(idx[-2:], axes)
        flat = pos[0] * width + pos[1]
        hit = x[idx[:-2] + pos] == values[idx]
        return te.min(te.where(hit, flat, te.const(big, "int64")), axis=axes, where=cond)
    indices = te.compute(x.shape[:-2] + geo.out, body, name=f"{ctx.name}_indices")
    return values, indices


def _max_pool2d_backward(ctx, g, x, kernel_size, stride, padding, dilation, ceil_mode,
                         indices):
    """The gradient routed by torch's saved `indices` (flat h * W + w per
    output): each input position gathers the gradients of the outputs whose
    window holds it and whose index names it -- exact (ties go where torch's
    forward sent them) and no window maximum recomputed. A window position
    (kh, kw) reaches input row h from output row (h + p - kh * d) / s where
    that divides; a non-overlapping pooling that tiles the input is one
    read per position."""
    from ...nn.pool import _geometry
    geo = _geometry(ctx.name, 2, x, kernel_size, list(stride) or None, padding, dilation,
                    ceil_mode)
    lead, sizes, width = x.shape[:-2], x.shape[-2:], x.shape[-1]
    zero = te.const(0, g.dtype)
    tiles = all(k == s and p == 0 and o * s == n
                for k, s, p, o, n in zip(geo.k, geo.s, geo.p, geo.out, sizes))
    if tiles:
        def body(*idx):
            h, w = idx[-2:]
            out = idx[:-2] + (h // geo.s[0], w // geo.s[1])
            return te.where(indices[out] == h * width + w, g[out], zero)
        return te.compute(x.shape, body, name=ctx.name)
    axes = [te.reduce_axis(k, name=f"r{n}") for k, n in zip(geo.k, "hw")]

    def gathered(*idx):
        h, w = idx[-2:]
        out, conds = [], []
        for pos, axis, k, s, p, d, o in zip((h, w), axes, geo.k, geo.s, geo.p, geo.d,
                                            geo.out):
            num = pos + p - axis * d
            conds += [num >= 0, num < o * s] + ([num % s == 0] if s > 1 else [])
            out.append(num // s if s > 1 else num)
        out = idx[:-2] + tuple(out)
        hit = indices[out] == h * width + w
        return te.sum(te.where(hit, g[out], zero), axis=axes, where=conjunction(conds))
    return te.compute(lead + tuple(sizes), gathered, name=ctx.name)


def _avg_pool2d(ctx, x, kernel_size, stride=(), padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    return nn.avg_pool2d(x, kernel_size, list(stride) or None, padding, ceil_mode,
                         count_include_pad, divisor_override)


def _avg_pool2d_backward(ctx, g, x, kernel_size, stride, padding, ceil_mode,
                         count_include_pad, divisor_override):
    return _via_grad(_avg_pool2d(ctx, x, kernel_size, stride, padding, ceil_mode,
                                 count_include_pad, divisor_override), x, g)


def _via_grad(y, x, g):
    """dL/dx for y = f(x) and dL/dy = g, as nf.grad derives it."""
    return grad(y, [x], head=g)[0]


# --- normalisation and softmax -------------------------------------------------------------
def _stats(x, dims, name):
    """(mean, biased variance) of `x` over `dims`, kept as size-1 dims."""
    from ...nn.reduce import moments
    return moments(x, dims, True, 0, name)


def _native_layer_norm(ctx, x, normalized_shape, w, b, eps):
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean, var = _stats(x, dims, ctx.name)
    rstd = te.compute(mean.shape, lambda *i: te.rsqrt(var[i] + eps), name=f"{ctx.name}_rstd")
    lead = x.ndim - len(normalized_shape)

    def body(*i):
        s = tuple(0 if d >= lead else v for d, v in enumerate(i))
        v = (x[i] - mean[s]) * rstd[s]
        if w is not None:
            v = v * w[i[lead:]]
        if b is not None:
            v = v + b[i[lead:]]
        return v
    return te.compute(x.shape, body, name=ctx.name), mean, rstd


def _native_group_norm(ctx, x, w, b, n, c, hxw, group, eps):
    cpg = c // group
    grouped = nn.reshape(x, (n, group, cpg * hxw))
    mean, var = _stats(grouped, (2,), ctx.name)
    rstd = te.compute((n, group), lambda i, g: te.rsqrt(var[i, g, 0] + eps),
                      name=f"{ctx.name}_rstd")
    mean2 = te.compute((n, group), lambda i, g: mean[i, g, 0], name=f"{ctx.name}_mean")

    def body(i, ch, *s):
        v = (x[(i, ch) + s] - mean2[i, ch // cpg]) * rstd[i, ch // cpg]
        if w is not None:
            v = v * w[ch]
        if b is not None:
            v = v + b[ch]
        return v
    return te.compute(x.shape, body, name=ctx.name), mean2, rstd


def _batch_norm_train(ctx, x, w, b, rm, rv, momentum, eps):
    dims = (0,) + tuple(range(2, x.ndim))
    mean, var = _stats(x, dims, ctx.name)
    mean1 = te.compute((x.shape[1],), lambda ch: mean[(0, ch) + (0,) * (x.ndim - 2)],
                       name=f"{ctx.name}_mean")
    var1 = te.compute((x.shape[1],), lambda ch: var[(0, ch) + (0,) * (x.ndim - 2)],
                      name=f"{ctx.name}_var")
    rstd = te.compute((x.shape[1],), lambda ch: te.rsqrt(var1[ch] + eps), name=f"{ctx.name}_rstd")
    out = _affine_channels(ctx, x, mean1, rstd, w, b)
    count = math.prod(x.shape) // x.shape[1]
    new_rm = te.compute(rm.shape, lambda ch: rm[ch] * (1 - momentum) + mean1[ch] * momentum,
                        name=f"{ctx.name}_running_mean")
    unbias = count / max(count - 1, 1)
    new_rv = te.compute(rv.shape, lambda ch: rv[ch] * (1 - momentum)
                        + var1[ch] * (momentum * unbias), name=f"{ctx.name}_running_var")
    return out, mean1, rstd, new_rm, new_rv


def _affine_channels(ctx, x, mean, rstd, w, b):
    def body(i, ch, *s):
        v = (x[(i, ch) + s] - mean[ch]) * rstd[ch]
        if w is not None:
            v = v * w[ch]
        if b is not None:
            v = v + b[ch]
        return v
    return te.compute(x.shape, body, name=ctx.name)


def _batch_norm_functional(ctx, x, w, b, rm, rv, training, momentum, eps):
    if not training:
        raise Unsupported(f"{ctx.name}: training=False")
    return _batch_norm_train(ctx, x, w, b, rm, rv, momentum, eps)


def _batch_norm_no_training(ctx, x, w, b, rm, rv, momentum, eps):
    """Eval-mode batch norm: the running statistics normalise; the saved
    mean and rstd torch returns are empty (lowered as None)."""
    rstd = te.compute(rv.shape, lambda ch: te.rsqrt(rv[ch] + eps), name=f"{ctx.name}_rstd")
    return _affine_channels(ctx, x, rm, rstd, w, b), None, None


def _softmax(ctx, x, dim, half_to_float=False):
    return nn.softmax(x, dim)


def _log_softmax(ctx, x, dim, half_to_float=False):
    return nn.log_softmax(x, dim)


def _softmax_backward(ctx, g, y, dim, input_dtype):
    dot = reduce_over(g.shape, (dim % g.ndim,), True, lambda f, o: g[f] * y[f], f"{ctx.name}_dot")
    shape = ctx.shape
    return te.compute(shape, lambda *i: y[i] * (g[i] - _read_broadcast(dot, i, shape)),
                      name=ctx.name)


def _log_softmax_backward(ctx, g, y, dim, input_dtype):
    total = reduce_over(g.shape, (dim % g.ndim,), True, lambda f, o: g[f], f"{ctx.name}_sum")
    shape = ctx.shape
    return te.compute(shape, lambda *i: g[i] - te.exp(y[i]) * _read_broadcast(total, i, shape),
                      name=ctx.name)


# --- embedding, gather, scatter ------------------------------------------------------------
def _embedding(ctx, w, idx, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return te.compute(ctx.shape, lambda *i: w[idx[i[:-1]], i[-1]], name=ctx.name)


def _embedding_backward(ctx, g, idx, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        raise Unsupported(f"{ctx.name}: scale_grad_by_freq")
    axes = [te.reduce_axis(s, name=f"n{d}") for d, s in enumerate(idx.shape)]

    def body(v, d):
        hit = idx[tuple(axes)] == v
        if padding_idx >= 0:
            hit = hit & (v != padding_idx)
        return te.sum(te.where(hit, g[tuple(axes) + (d,)], te.const(0, g.dtype)), axis=axes)
    return te.compute(ctx.shape, body, name=ctx.name)


def _gather(ctx, x, dim, index, sparse_grad=False):
    dim = dim % x.ndim
    return te.compute(ctx.shape, lambda *i: x[i[:dim] + (index[i],) + i[dim + 1:]],
                      name=ctx.name)


def _scatter_value(ctx, x, dim, index, value):
    dim = dim % x.ndim
    if any(index.shape[d] != x.shape[d] for d in range(x.ndim) if d != dim):
        raise Unsupported(f"{ctx.name}: index smaller than self outside dim")
    k = te.reduce_axis(index.shape[dim], name="k")

    def body(*i):
        hit = te.max(te.where(index[i[:dim] + (k,) + i[dim + 1:]] == i[dim],
                                te.const(1, "int32"), te.const(0, "int32")), axis=k)
        return te.where(hit > 0, te.const(value, ctx.dtype), x[i])
    return te.compute(ctx.shape, body, name=ctx.name)


def _index_layout(ctx, x, indices):
    """(first indexed dim, the index tensors, their broadcast shape) of
    x[indices] with the indexed dims adjacent (the case lowered here)."""
    dims = [d for d, t in enumerate(indices) if t is not None]
    if not dims or dims != list(range(dims[0], dims[-1] + 1)):
        raise Unsupported(f"{ctx.name}: index tensors must be adjacent")
    tensors = [indices[d] for d in dims]
    if any(t.dtype not in ("int32", "int64") for t in tensors):
        raise Unsupported(f"{ctx.name}: boolean (mask) indices")
    from ...te.tensor import broadcast_shapes
    return dims[0], tensors, broadcast_shapes(*(t.shape for t in tensors))


def _wrap(value, size):
    """A Python-style index: negative values count from the end."""
    return te.where(value < 0, value + size, value)


def _index(ctx, x, indices):
    first, tensors, bshape = _index_layout(ctx, x, indices)
    n, nb = len(tensors), len(bshape)

    def body(*i):
        pos = i[first:first + nb]
        picked = tuple(_wrap(te.cast(_read_broadcast(t, pos, bshape), "int64"),
                             x.shape[first + m]) for m, t in enumerate(tensors))
        return x[i[:first] + picked + i[first + nb:]]
    return te.compute(ctx.shape, body, name=ctx.name)


def _index_put(ctx, x, indices, values, accumulate=False):
    if not accumulate:
        raise Unsupported(f"{ctx.name}: accumulate=False (duplicate indices are undefined)")
    first, tensors, bshape = _index_layout(ctx, x, indices)
    n = len(tensors)
    axes = [te.reduce_axis(s, name=f"p{d}") for d, s in enumerate(bshape)]
    vshape = x.shape[:first] + tuple(bshape) + x.shape[first + n:]

    def body(*i):
        hit = None
        for m, t in enumerate(tensors):
            c = _wrap(te.cast(_read_broadcast(t, tuple(axes), bshape), "int64"),
                      x.shape[first + m]) == i[first + m]
            hit = c if hit is None else hit & c
        full = i[:first] + tuple(axes) + i[first + n:]
        v = _read_broadcast(values, full, vshape)
        return x[i] + te.sum(te.where(hit, v, te.const(0, ctx.dtype)), axis=axes)
    return te.compute(ctx.shape, body, name=ctx.name)


def _scatter_add(ctx, x, dim, index, src):
    dim = dim % x.ndim
    if any(index.shape[d] != x.shape[d] or src.shape[d] != x.shape[d]
           for d in range(x.ndim) if d != dim):
        raise Unsupported(f"{ctx.name}: index or src smaller than self outside dim")
    k = te.reduce_axis(index.shape[dim], name="k")

    def body(*i):
        at = i[:dim] + (k,) + i[dim + 1:]
        return x[i] + te.sum(te.where(index[at] == i[dim], src[at], te.const(0, ctx.dtype)),
                             axis=k)
    return te.compute(ctx.shape, body, name=ctx.name)


# --- cumulative sums and reversal ----------------------------------------------------------
def _cumsum(ctx, x, dim, dtype=None):
    if x.dtype != ctx.dtype:
        x = te.compute(x.shape, lambda *i: te.cast(x[i], ctx.dtype), name=f"{ctx.name}_cast")
    return nn.cumsum(x, dim)


def _flip(ctx, x, dims):
    flipped = {d % x.ndim for d in dims}
    return te.compute(ctx.shape, lambda *i: x[tuple(x.shape[d] - 1 - v if d in flipped else v
                                                    for d, v in enumerate(i))], name=ctx.name)


# --- views, shapes, constants --------------------------------------------------------------
def _reshape(ctx, x, *_):
    return nn.reshape(x, ctx.shape) if tuple(x.shape) != ctx.shape else \
        te.compute(ctx.shape, lambda *i: x[i], name=ctx.name)


def _expand(ctx, x, size, implicit=False):
    shape = ctx.shape
    return te.compute(shape, lambda *i: _read_broadcast(x, i, shape), name=ctx.name)


def _permute(ctx, x, dims):
    return nn.permute(x, list(dims))


def _transpose(ctx, x, d0, d1):
    return nn.transpose(x, d0, d1)


def _t(ctx, x):
    return nn.transpose(x, 0, 1) if x.ndim == 2 else _reshape(ctx, x)


def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = dim % x.ndim
    start, end, _ = slice(start, end, step).indices(x.shape[dim])
    return te.compute(ctx.shape, lambda *i: x[i[:dim] + (i[dim] * step + start,) + i[dim + 1:]],
                      name=ctx.name)


def _select(ctx, x, dim, index):
    dim = dim % x.ndim
    index = index % x.shape[dim]
    return te.compute(ctx.shape, lambda *i: x[i[:dim] + (index,) + i[dim:]], name=ctx.name)


def _slice_scatter(ctx, base, src, dim=0, start=None, end=None, step=1):
    dim = dim % base.ndim
    start, end, _ = slice(start, end, step).indices(base.shape[dim])

    def body(*i):
        j = i[dim] - start
        inside = (j >= 0) & (i[dim] < end) & (j % step == 0) if step != 1 else \
            (j >= 0) & (i[dim] < end)
        return te.where(inside, src[i[:dim] + (j // step if step != 1 else j,) + i[dim + 1:]],
                        base[i])
    return te.compute(ctx.shape, body, name=ctx.name)


def _select_scatter(ctx, base, src, dim, index):
    dim = dim % base.ndim
    index = index % base.shape[dim]
    return te.compute(ctx.shape, lambda *i: te.where(i[dim] == index, src[i[:dim] + i[dim + 1:]],
                                                     base[i]), name=ctx.name)


def _cat(ctx, tensors, dim=0):
    tensors = [t for t in tensors if 0 not in t.shape]
    dtype = ctx.dtype
    tensors = [t if t.dtype == dtype else te.compute(t.shape, lambda *i, t=t: te.cast(t[i], dtype))
               for t in tensors]
    return nn.concat(tensors, dim)


def _split(ctx, x, split_size, dim=0):
    return nn.split(x, split_size, dim)


def _split_with_sizes(ctx, x, sizes, dim=0):
    return nn.split(x, list(sizes), dim)


def _to_copy(ctx, x, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported(f"{ctx.name}: copy to {device}")
    return elementwise(ctx, lambda v: v, x, dtype=x.dtype)


def _full(ctx, *args, **kwargs):
    value = args[1] if len(args) > 1 else kwargs.get("fill_value")
    dtype = ctx.dtype
    return te.compute(ctx.shape, lambda *i: te.const(value, dtype), name=ctx.name)


def _scalar_tensor(ctx, value, **kwargs):
    return te.compute((), lambda: te.const(value, ctx.dtype), name=ctx.name)


def _arange(ctx, start, end=None, step=1, **kwargs):
    dtype = ctx.dtype
    return te.compute(ctx.shape, lambda i: te.cast(i, dtype) * step + start
                      if dtype not in ("int32", "int64") else te.cast(i * step + start, dtype),
                      name=ctx.name)


# --- torch.optim's foreach ops (a compiled optimizer step) --------------------------------
def _foreach(fn):
    """An entry applying elementwise `fn` to each position of the argument
    lists (a scalar or single-tensor argument is shared by every position)."""
    def entry(ctx, *args, **kwargs):
        outs = []
        for n, out in enumerate(ctx.out):
            pick = [a[n] if isinstance(a, (list, tuple)) else a for a in args]
            meta = tuple(m[n] if isinstance(m, (list, tuple)) else m for m in ctx.meta)
            outs.append(elementwise(Context(out, meta, f"{ctx.name}_{n}"),
                                    lambda *v: fn(*v, **kwargs), *pick))
        return outs
    return entry


FOREACH = {
    aten._foreach_add.List: lambda a, b, alpha=1: a + b * alpha,
    aten._foreach_add.Scalar: lambda a, b: a + b,
    aten._foreach_add.Tensor: lambda a, b, alpha=1: a + b * alpha,
    aten._foreach_sub.List: lambda a, b, alpha=1: a - b * alpha,
    aten._foreach_sub.Scalar: lambda a, b: a - b,
    aten._foreach_mul.List: lambda a, b: a * b, aten._foreach_mul.Scalar: lambda a, b: a * b,
    aten._foreach_mul.Tensor: lambda a, b: a * b,
    aten._foreach_div.List: lambda a, b: a / b, aten._foreach_div.Scalar: lambda a, b: a / b,
    aten._foreach_addcmul.Scalar: lambda a, b, c, value=1: a + b * c * value,
    aten._foreach_addcdiv.Scalar: lambda a, b, c, value=1: a + b / c * value,
    aten._foreach_lerp.Scalar: lambda a, b, weight: a + (b - a) * weight,
    aten._foreach_sqrt.default: te.sqrt, aten._foreach_neg.default: lambda a: -a,
    aten._foreach_reciprocal.default: lambda a: 1 / a, aten._foreach_exp.default: te.exp,
    aten._foreach_pow.ScalarAndTensor: lambda a, b: te.pow(a, b),
    aten._foreach_pow.Scalar: lambda a, b: te.pow(a, b),
    aten._foreach_maximum.List: te.maximum,
}

TABLE = {
    **{op: _foreach(fn) for op, fn in FOREACH.items()},
    **{op: _float_only(fn) for op, fn in UNARY.items()},
    **{op: _ew(fn) for op, fn in EXACT.items()},
    **{op: _compare(fn) for op, fn in COMPARE.items()},
    **{op: _bool_op(fn) for op, fn in BOOLEAN.items()},
    aten.clone.default: _clone, aten.logical_not.default: _logical_not, aten.isnan.default: _isnan,
    aten.add.Tensor: _add, aten.add.Scalar: _add, aten.sub.Tensor: _sub,
    aten.sub.Scalar: _sub, aten.rsub.Scalar: _rsub, aten.rsub.Tensor: _rsub,
    aten.div.Tensor: _div, aten.div.Scalar: _div, aten.div.Tensor_mode: _div,
    aten.pow.Tensor_Scalar: _pow_scalar,
    aten.pow.Tensor_Tensor: _float_only(lambda a, b: te.pow(a, b)),
    aten.clamp.default: _clamp, aten.clamp_min.default: lambda c, x, m: _clamp(c, x, m),
    aten.clamp_max.default: lambda c, x, m: _clamp(c, x, None, m),
    aten.hardtanh.default: lambda c, x, lo=-1.0, hi=1.0: _clamp(c, x, lo, hi),
    aten.leaky_relu.default: _leaky_relu, aten.leaky_relu_backward.default: _leaky_relu_backward,
    aten.sign.default: _sign, aten.scatter_add.default: _scatter_add,
    aten.gelu.default: _gelu, aten.elu.default: _elu,
    aten.silu.default: _float_only(lambda v: v * te.sigmoid(v)),
    aten.threshold_backward.default: _threshold_backward,
    aten.sigmoid_backward.default: _float_only(lambda g, y: g * (1 - y) * y),
    aten.tanh_backward.default: _float_only(lambda g, y: g * (1 - y * y)),
    aten.where.self: _where,
    aten.sum.dim_IntList: _sum_dim, aten.sum.default: _sum_all,
    aten.mean.dim: _mean_dim, aten.mean.default: _mean_all,
    aten.amax.default: _amax, aten.amin.default: _amin,
    aten.max.default: lambda c, x: _reduce(c, x, None, False, "max"),
    aten.min.default: lambda c, x: _reduce(c, x, None, False, "min"),
    aten.var.correction: _var, aten.any.dim: _any_dim,
    aten.mm.default: _mm, aten.bmm.default: _bmm, aten.addmm.default: _addmm,
    aten.convolution.default: _convolution,
    aten.convolution_backward.default: _convolution_backward,
    aten.max_pool2d_with_indices.default: _max_pool2d_with_indices,
    aten.max_pool2d_with_indices_backward.default: _max_pool2d_backward,
    aten.avg_pool2d.default: _avg_pool2d, aten.avg_pool2d_backward.default: _avg_pool2d_backward,
    aten.native_layer_norm.default: _native_layer_norm,
    aten.native_group_norm.default: _native_group_norm,
    aten._native_batch_norm_legit_functional.default: _batch_norm_functional,
    aten._native_batch_norm_legit_no_training.default: _batch_norm_no_training,
    aten.cumsum.default: _cumsum, aten.flip.default: _flip,
    aten._softmax.default: _softmax, aten._log_softmax.default: _log_softmax,
    aten._softmax_backward_data.default: _softmax_backward,
    aten._log_softmax_backward_data.default: _log_softmax_backward,
    aten.embedding.default: _embedding,
    aten.embedding_dense_backward.default: _embedding_backward,
    aten.gather.default: _gather, aten.index.Tensor: _index,
    aten.index_put.default: _index_put, aten.scatter.value: _scatter_value,
    aten.view.default: _reshape, aten._unsafe_view.default: _reshape,
    aten.reshape.default: _reshape, aten.unsqueeze.default: _reshape,
    aten.squeeze.dim: _reshape, aten.squeeze.dims: _reshape, aten.squeeze.default: _reshape,
    aten.expand.default: _expand, aten.permute.default: _permute,
    aten.transpose.int: _transpose, aten.t.default: _t,
    aten.slice.Tensor: _slice, aten.select.int: _select,
    aten.slice_scatter.default: _slice_scatter, aten.select_scatter.default: _select_scatter,
    aten.cat.default: _cat, aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split_with_sizes, aten._to_copy.default: _to_copy,
    aten.full.default: _full, aten.full_like.default: _full,
    aten.scalar_tensor.default: _scalar_tensor, aten.arange.start_step: _arange,
}

VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default,
                   aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
                   aten.squeeze.default, aten.expand.default, aten.permute.default,
                   aten.transpose.int, aten.t.default, aten.slice.Tensor, aten.select.int,
                   aten.alias.default, aten.split.Tensor, aten.split_with_sizes.default})


def _decompositions():
    """core_aten_decompositions, minus the ops lowered here directly, and
    minus the CPU flash-attention forward: its decomposition does not make
    the logsumexp the (undecomposed) flash backward expects -- the gradients
    come out wrong even with no NeoFlow kernel in the graph (torch 2.13) --
    so the pair runs in PyTorch."""
    from torch._decomp import core_aten_decompositions
    table = dict(core_aten_decompositions())
    for op in (aten.embedding_dense_backward.default, aten.gelu.default,
               aten.silu.default, aten.elu.default, aten.leaky_relu.default,
               aten._scaled_dot_product_flash_attention_for_cpu.default):
        table.pop(op, None)
    return table


DECOMPOSITIONS = _decompositions()
