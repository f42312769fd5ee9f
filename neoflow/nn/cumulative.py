"""Cumulative sums and products along a dimension (torch.cumsum, torch.cumprod),
each one `nf.scan` over that dimension: the state is a slice of the input
without it, so compiled code runs one loop over the dimension and the
gradient is the derived reverse scan (cumprod's exact with zeros in the
input: nothing divides by the input).

Hands on: compute Tensors shaped like the input.
"""
from .. import te
from ..errors import DTypeError
from ..te import dtype as dt
from ..te.scan import scan
from .common import check_tensor, norm_dim

__all__ = ["cumsum", "cumprod"]

_COMBINE = {"cumsum": (0, lambda a, b: a + b), "cumprod": (1, lambda a, b: a * b)}


def _cumulative(op, x, dim):
    check_tensor(x, op, "input")
    if x.dtype == dt.BOOL:
        raise DTypeError(f"{op}: input '{x.name}' is bool; cast it to a number first")
    d = norm_dim(dim, x.ndim, op)
    if x.ndim == 0:
        return te.compute((), lambda: x[()], name=f"{op}_{x.name}")
    identity, combine = _COMBINE[op]
    rest = x.shape[:d] + x.shape[d + 1:]
    init = te.compute(rest, lambda *i: te.const(identity, x.dtype), name=f"{op}_{x.name}_init")

    def step(t, prev):
        return te.compute(rest, lambda *i: combine(prev[i], x[i[:d] + (t,) + i[d:]]),
                          name=f"{op}_{x.name}_step")

    states = scan(init, step, x.shape[d], name=f"{op}_{x.name}_scan")
    return te.compute(x.shape, lambda *i: states[(i[d],) + i[:d] + i[d + 1:]],
                      name=f"{op}_{x.name}")


def cumsum(input, dim):  # noqa: A002 (torch's argument name)
    """torch.cumsum: out[..., k, ...] = sum of input[..., :k+1, ...] along `dim`.

    >>> y = nf.nn.cumsum(x, dim=-1)
    """
    return _cumulative("cumsum", input, dim)


def cumprod(input, dim):  # noqa: A002 (torch's argument name)
    """torch.cumprod: out[..., k, ...] = product of input[..., :k+1, ...] along `dim`.

    >>> y = nf.nn.cumprod(x, dim=1)
    """
    return _cumulative("cumprod", input, dim)
