"""Data movement: reshape/flatten (index arithmetic with // and %),
transpose/permute, concat (torch.cat, written with where), split, narrow,
slice, pad (constant mode, written with where) and pixel_shuffle.

Hands on: compute Tensors that only move (or pad) values.
"""
import builtins
import math
import numbers

from .. import te
from ..errors import NeoFlowError, ShapeError
from .common import affine, check_tensor, conjunction, is_int, norm_dim

__all__ = ["reshape", "flatten", "transpose", "permute", "concat", "split", "narrow", "slice",
           "pad", "pixel_shuffle"]


def _infer_shape(x, shape, op):
    shape = (shape,) if is_int(shape) else tuple(shape)
    if not all(is_int(s) for s in shape):
        raise NeoFlowError(f"{op}: shape must be a tuple of ints, got {shape!r}")
    total = math.prod(x.shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {shape}")
    if any(s < -1 or s == 0 for s in shape):
        raise ShapeError(f"{op}: invalid size in shape {shape}; sizes must be positive or "
                         "one -1 (NeoFlow has no zero-size tensors)")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if total % known:
            raise ShapeError(f"{op}: shape {shape} is invalid for input '{x.name}' of size "
                             f"{total} {x.shape}")
        shape = tuple(total // known if s == -1 else s for s in shape)
    if math.prod(shape) != total:
        raise ShapeError(f"{op}: shape {shape} has {math.prod(shape)} elements but input "
                         f"'{x.name}' {x.shape} has {total}")
    return shape


def reshape(input, shape):
    """torch.reshape (one -1 allowed): the same elements in row-major order.
    Dims are matched in groups with equal products (a kept dim is a group of
    one); within a group the output index is flattened and split again with
    // and %.

    >>> x = nf.placeholder((4, 6), name="x")
    >>> nf.nn.reshape(x, (2, -1, 3)).shape
    (2, 4, 3)
    """
    x = check_tensor(input, "reshape", "input")
    shape = _infer_shape(x, shape, "reshape")
    groups = _equal_product_groups(x.shape, shape)

    def body(*i):
        idx = []
        for (s0, s1), (d0, d1) in groups:
            src, dst = x.shape[s0:s1], shape[d0:d1]
            flat = affine(*((i[d0 + d], math.prod(dst[d + 1:])) for d in range(len(dst))))
            for d, n in enumerate(src):
                inner = math.prod(src[d + 1:])
                e = flat // inner if inner > 1 and not is_int(flat) else flat
                if math.prod(src[:d]) > 1 and n > 1 and not is_int(e):
                    e = e % n   # the group's leading dim needs no wrap-around
                idx.append(0 if n == 1 else e)
        return x[tuple(idx)]

    return te.compute(shape, body, name="reshape")


def _equal_product_groups(src, dst):
    """Split two shapes of equal size into the smallest consecutive groups of
    dims with equal products: [((src_lo, src_hi), (dst_lo, dst_hi)), ...]."""
    groups, a, b = [], 0, 0
    while a < len(src) or b < len(dst):
        a1, b1, pa, pb = a, b, 1, 1
        if a1 < len(src):
            pa, a1 = src[a1], a1 + 1
        if b1 < len(dst):
            pb, b1 = dst[b1], b1 + 1
        while pa != pb:   # the smaller side has dims left: the totals are equal
            if pa < pb:
                pa, a1 = pa * src[a1], a1 + 1
            else:
                pb, b1 = pb * dst[b1], b1 + 1
        groups.append(((a, a1), (b, b1)))
        a, b = a1, b1
    return groups


def flatten(input, start_dim=0, end_dim=-1):
    """torch.flatten: merge dims start_dim..end_dim into one.

    >>> nf.nn.flatten(nf.placeholder((2, 3, 4, 5), name="x"), 1).shape
    (2, 60)
    """
    x = check_tensor(input, "flatten", "input")
    s, e = norm_dim(start_dim, x.ndim, "flatten", "start_dim"), \
        norm_dim(end_dim, x.ndim, "flatten", "end_dim")
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    if x.ndim == 0:
        return reshape(x, (1,))
    return reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


def permute(input, dims):
    """torch.permute: output dim d is input dim dims[d].

    >>> x = nf.placeholder((2, 3, 4), name="x")
    >>> nf.nn.permute(x, (2, 0, 1)).shape
    (4, 2, 3)
    """
    x = check_tensor(input, "permute", "input")
    if is_int(dims) or not isinstance(dims, (tuple, list)):
        raise NeoFlowError(f"permute: dims must be a tuple of ints, got {dims!r}")
    perm = [norm_dim(d, x.ndim, "permute", "dims") for d in dims]
    if len(perm) != x.ndim or sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"permute: dims {tuple(dims)} is not a permutation of the "
                         f"{x.ndim} dimensions of input '{x.name}' {x.shape}")
    inverse = [perm.index(d) for d in range(x.ndim)]
    return te.compute(tuple(x.shape[p] for p in perm),
                      lambda *i: x[tuple(i[inverse[d]] for d in range(x.ndim))],
                      name="permute")


def transpose(input, dim0, dim1):
    """torch.transpose: swap two dims.

    >>> nf.nn.transpose(x, 0, -1).shape
    (4, 3, 2)
    """
    x = check_tensor(input, "transpose", "input")
    a, b = norm_dim(dim0, x.ndim, "transpose", "dim0"), norm_dim(dim1, x.ndim, "transpose", "dim1")
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm) if x.ndim else te.compute((), lambda: x[()], name="transpose")


def concat(tensors, dim=0):
    """torch.cat: join tensors along `dim`; each output element reads the one
    input that holds it (a chain of where on the position along dim).

    >>> a = nf.placeholder((2, 3), name="a"); b = nf.placeholder((5, 3), name="b")
    >>> nf.nn.concat([a, b]).shape
    (7, 3)
    """
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise NeoFlowError("concat: tensors must be a non-empty list or tuple of Tensors")
    for n, t in enumerate(tensors):
        check_tensor(t, "concat", f"tensors[{n}]")
    first = tensors[0]
    if first.ndim == 0:
        raise ShapeError(f"concat: tensors[0] '{first.name}' is 0-d; zero-dimensional "
                         "tensors cannot be concatenated")
    d = norm_dim(dim, first.ndim, "concat")
    for n, t in enumerate(tensors[1:], 1):
        if t.dtype != first.dtype:
            raise NeoFlowError(f"concat: tensors[{n}] '{t.name}' is {t.dtype} but tensors[0] "
                               f"is {first.dtype}; torch would promote, NeoFlow needs one "
                               "dtype (cast first)")
        if t.ndim != first.ndim:
            raise ShapeError(f"concat: tensors[{n}] '{t.name}' has {t.ndim} dimensions but "
                             f"tensors[0] has {first.ndim}")
        for k in range(first.ndim):
            if k != d and t.shape[k] != first.shape[k]:
                raise ShapeError(f"concat: tensors[{n}] '{t.name}' has size {t.shape[k]} in "
                                 f"dimension {k} but tensors[0] has {first.shape[k]}; expected "
                                 f"{first.shape[k]}")
    offsets = [0]
    for t in tensors:
        offsets.append(offsets[-1] + t.shape[d])

    def body(*i):
        def read(n):
            return tensors[n][i[:d] + (affine((i[d], 1), const=-offsets[n]),) + i[d + 1:]]
        value = read(len(tensors) - 1)
        for n in range(len(tensors) - 2, -1, -1):
            value = te.where(i[d] < offsets[n + 1], read(n), value)
        return value

    shape = first.shape[:d] + (offsets[-1],) + first.shape[d + 1:]
    return te.compute(shape, body, name="concat")


def narrow(input, dim, start, length):
    """torch.narrow: `length` elements of `dim` from `start` (negative: from the end).

    >>> nf.nn.narrow(nf.placeholder((7, 3), name="x"), 0, 2, 4).shape
    (4, 3)
    """
    x = check_tensor(input, "narrow", "input")
    if x.ndim == 0:
        raise ShapeError(f"narrow: input '{x.name}' is 0-d; it has no dimension to narrow")
    d = norm_dim(dim, x.ndim, "narrow")
    n = x.shape[d]
    if not is_int(start) or not -n <= start <= n:
        raise ShapeError(f"narrow: start {start!r} is out of range for dimension {d} of "
                         f"input '{x.name}' (size {n}); expected {-n}..{n}")
    start = start % n if start < 0 else start
    if not is_int(length) or length < 1 or start + length > n:
        raise ShapeError(f"narrow: start {start} + length {length!r} exceeds dimension {d} "
                         f"of input '{x.name}' (size {n}); expected a length in 1..{n - start}")
    return _strided(x, d, start, length, 1, "narrow")


def slice(input, dim=0, start=None, end=None, step=1):  # noqa: A001 (torch/aten name)
    """x[..., start:end:step, ...] along `dim` (Python slice rules, step > 0).

    >>> nf.nn.slice(nf.placeholder((7, 3), name="x"), 0, 1, None, 2).shape
    (3, 3)
    """
    x = check_tensor(input, "slice", "input")
    if x.ndim == 0:
        raise ShapeError(f"slice: input '{x.name}' is 0-d; it has no dimension to slice")
    d = norm_dim(dim, x.ndim, "slice")
    if not is_int(step) or step < 1:
        raise NeoFlowError(f"slice: step must be a positive int, got {step!r}")
    for what, v in (("start", start), ("end", end)):
        if v is not None and not is_int(v):
            raise NeoFlowError(f"slice: {what} must be an int or None, got {v!r}")
    lo, hi, _ = builtins.slice(start, end, step).indices(x.shape[d])
    length = max(0, -(-(hi - lo) // step))
    if length < 1:
        raise ShapeError(f"slice: {start}:{end}:{step} selects nothing from dimension {d} of "
                         f"input '{x.name}' (size {x.shape[d]}); NeoFlow has no zero-size "
                         "tensors")
    return _strided(x, d, lo, length, step, "slice")


def _strided(x, d, start, length, step, name):
    return te.compute(x.shape[:d] + (length,) + x.shape[d + 1:],
                      lambda *i: x[i[:d] + (affine((i[d], step), const=start),) + i[d + 1:]],
                      name=name)


def split(tensor, split_size_or_sections, dim=0):
    """torch.split: a tuple of pieces along `dim`, each of the given size (the
    last one may be smaller) or of the listed sizes.

    >>> [p.shape for p in nf.nn.split(nf.placeholder((7, 2), name="x"), 3)]
    [(3, 2), (3, 2), (1, 2)]
    """
    x = check_tensor(tensor, "split", "tensor")
    if x.ndim == 0:
        raise ShapeError(f"split: tensor '{x.name}' is 0-d; it has no dimension to split")
    d = norm_dim(dim, x.ndim, "split")
    n = x.shape[d]
    if is_int(split_size_or_sections):
        size = split_size_or_sections
        if size < 1:
            raise ShapeError(f"split: split_size must be a positive int, got {size}")
        sizes = [min(size, n - s) for s in range(0, n, size)]
    elif isinstance(split_size_or_sections, (list, tuple)) and \
            all(is_int(s) for s in split_size_or_sections):
        sizes = list(split_size_or_sections)
        if any(s < 1 for s in sizes):
            raise ShapeError(f"split: sections {tuple(sizes)} must be positive (NeoFlow has no "
                             "zero-size tensors)")
        if sum(sizes) != n:
            raise ShapeError(f"split: sections {tuple(sizes)} sum to {sum(sizes)} but "
                             f"dimension {d} of tensor '{x.name}' has size {n}")
    else:
        raise NeoFlowError(f"split: split_size_or_sections must be an int or a list of ints, "
                           f"got {split_size_or_sections!r}")
    pieces, start = [], 0
    for s in sizes:
        pieces.append(_strided(x, d, start, s, 1, "split"))
        start += s
    return tuple(pieces)


def pad(input, pad, mode="constant", value=None):
    """F.pad in constant mode: `pad` lists (left, right) amounts for the last
    dim first, then the one before, ...; negative amounts crop.

    >>> x = nf.placeholder((2, 3, 4), name="x")
    >>> nf.nn.pad(x, (1, 2, 0, 1), value=-1.0).shape
    (2, 4, 7)
    """
    x = check_tensor(input, "pad", "input")
    if mode != "constant":
        raise NeoFlowError(f"pad: mode={mode!r} is not supported; NeoFlow pads in 'constant' "
                           "mode only")
    if not isinstance(pad, (list, tuple)) or len(pad) % 2 or not all(is_int(p) for p in pad):
        raise NeoFlowError(f"pad: pad must be a list of ints of even length, got {pad!r}")
    if len(pad) // 2 > x.ndim:
        raise ShapeError(f"pad: pad {tuple(pad)} pads {len(pad) // 2} dimensions but input "
                         f"'{x.name}' has only {x.ndim}")
    if value is None:
        value = 0
    if not isinstance(value, numbers.Real):
        raise NeoFlowError(f"pad: value must be a number, got {value!r}")
    lo, hi = [0] * x.ndim, [0] * x.ndim
    for k in range(len(pad) // 2):
        lo[x.ndim - 1 - k], hi[x.ndim - 1 - k] = pad[2 * k], pad[2 * k + 1]
    shape = []
    for d in range(x.ndim):
        s = x.shape[d] + lo[d] + hi[d]
        if s < 1:
            raise ShapeError(f"pad: dimension {d} of input '{x.name}' has size {x.shape[d]}, "
                             f"{s} after padding ({lo[d]}, {hi[d]}); expected a positive size")
        shape.append(s)

    def body(*i):
        idx = tuple(affine((i[d], 1), const=-lo[d]) for d in range(x.ndim))
        conds = [c for d in range(x.ndim) for c in
                 ((i[d] >= lo[d]) if lo[d] > 0 else None,
                  (i[d] < lo[d] + x.shape[d]) if hi[d] > 0 else None) if c is not None]
        cond = conjunction(conds)
        return x[idx] if cond is None else te.where(cond, x[idx], value)

    return te.compute(tuple(shape), body, name="pad")


def pixel_shuffle(input, upscale_factor):
    """F.pixel_shuffle: (*, C*r*r, H, W) -> (*, C, H*r, W*r).

    >>> nf.nn.pixel_shuffle(nf.placeholder((1, 8, 3, 3), name="x"), 2).shape
    (1, 2, 6, 6)
    """
    x = check_tensor(input, "pixel_shuffle", "input")
    r = upscale_factor
    if not is_int(r) or r < 1:
        raise NeoFlowError(f"pixel_shuffle: upscale_factor must be a positive int, got {r!r}")
    if x.ndim < 3:
        raise ShapeError(f"pixel_shuffle: input '{x.name}' must have at least 3 dimensions "
                         f"(*, C, H, W), got shape {x.shape}")
    c = x.shape[-3]
    if c % (r * r):
        raise ShapeError(f"pixel_shuffle: input has {c} channels (input.shape[-3]), not "
                         f"divisible by upscale_factor**2 = {r * r}")
    lead = x.shape[:-3]

    def body(*i):
        ch, h, w = i[-3:]
        if r == 1:
            return x[i]
        return x[i[:-3] + (affine((ch, r * r), (h % r, r), (w % r, 1)), h // r, w // r)]

    return te.compute(lead + (c // (r * r), x.shape[-2] * r, x.shape[-1] * r), body,
                      name="pixel_shuffle")
