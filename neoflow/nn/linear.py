"""Linear algebra operators: dense (F.linear), matmul (torch.matmul, with
vector and broadcast-batch cases) and batch_matmul (torch.bmm).

Hands on: compute Tensors with one sum reduction over the inner dimension.
"""
from .. import te
from ..errors import ShapeError
from ..te.tensor import broadcast_shapes
from .common import check_float, check_same_dtype

__all__ = ["dense", "matmul", "batch_matmul"]


def dense(x, w, b=None):
    """F.linear: x @ w.T + b, with w shaped (out_features, in_features) and
    any number of leading dims on x (a 1-d w gives one output per row).

    >>> x = nf.placeholder((32, 8), name="x")
    >>> w = nf.parameter((4, 8), name="w")
    >>> nf.nn.dense(x, w).shape
    (32, 4)
    """
    op = "dense"
    check_float(x, op, "x")
    check_same_dtype(op, "x", x, w=w, b=b)
    if x.ndim < 1:
        raise ShapeError(f"dense: x '{x.name}' must have at least 1 dimension (features "
                         "last), got a 0-d tensor")
    if w.ndim not in (1, 2):
        raise ShapeError(f"dense: w '{w.name}' must be 2-d (out_features, in_features) or "
                         f"1-d, got shape {w.shape}")
    n_in = x.shape[-1]
    if w.shape[-1] != n_in:
        raise ShapeError(f"dense: x has {n_in} features in its last dimension but w expects "
                         f"{w.shape[-1]} (w.shape[{w.ndim - 1}])")
    if b is not None and w.ndim == 1:
        raise ShapeError(f"dense: a bias with a 1-d w '{w.name}' is not supported (torch "
                         "rejects it too); add it afterwards")
    if b is not None and b.shape != w.shape[:-1]:
        raise ShapeError(f"dense: b '{b.name}' has shape {b.shape} but w has "
                         f"{w.shape[0] if w.ndim == 2 else 'no'} output features; expected "
                         f"b.shape == {w.shape[:-1]}")
    lead = x.ndim - 1
    k = te.reduce_axis(n_in, name="k")

    def body(*i):
        acc = te.sum(x[i[:lead] + (k,)] * w[i[lead:] + (k,)], axis=k)
        return acc + b[i[lead:]] if b is not None else acc

    return te.compute(x.shape[:-1] + w.shape[:-1], body, name="dense")


def matmul(input, other):
    """torch.matmul: dot (1-d, 1-d), matrix-vector, vector-matrix, matrix
    product, and batched products with broadcast batch dimensions.

    >>> a = nf.placeholder((5, 1, 3, 4), name="a")
    >>> b = nf.placeholder((6, 4, 2), name="b")
    >>> nf.nn.matmul(a, b).shape
    (5, 6, 3, 2)
    """
    op = "matmul"
    a, b = input, other
    check_float(a, op, "input")
    check_same_dtype(op, "input", a, other=b)
    for what, t in (("input", a), ("other", b)):
        if t.ndim == 0:
            raise ShapeError(f"matmul: {what} '{t.name}' is 0-d; both arguments need at "
                             "least 1 dimension")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    a_shape = (1,) + a.shape if a_vec else a.shape
    b_shape = b.shape + (1,) if b_vec else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(
            f"matmul: input has {a_shape[-1]} columns (input.shape[-1]) but other has "
            f"{b_shape[-2]} rows (other.shape[{-1 if b_vec else -2}]); they must be equal")
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2],
                             what=f"matmul: batch dimensions of input {a.shape} and other "
                                  f"{b.shape}")
    nb = len(batch)
    k = te.reduce_axis(a_shape[-1], name="k")

    def batch_index(idx, shape):
        lead = nb - len(shape)
        return tuple(0 if s == 1 else idx[lead + d] for d, s in enumerate(shape))

    def body(*idx):
        rest = list(idx[nb:])
        a_idx = batch_index(idx[:nb], a_shape[:-2]) + (() if a_vec else (rest.pop(0),)) + (k,)
        b_idx = batch_index(idx[:nb], b_shape[:-2]) + (k,) + (() if b_vec else (rest.pop(0),))
        return te.sum(a[a_idx] * b[b_idx], axis=k)

    shape = batch + (() if a_vec else (a_shape[-2],)) + (() if b_vec else (b_shape[-1],))
    return te.compute(shape, body, name="matmul")


def batch_matmul(input, mat2):
    """torch.bmm: (B, n, k) @ (B, k, m) -> (B, n, m); no broadcasting.

    >>> a = nf.placeholder((8, 3, 4), name="a"); b = nf.placeholder((8, 4, 5), name="b")
    >>> nf.nn.batch_matmul(a, b).shape
    (8, 3, 5)
    """
    op = "batch_matmul"
    check_float(input, op, "input")
    check_same_dtype(op, "input", input, mat2=mat2)
    for what, t in (("input", input), ("mat2", mat2)):
        if t.ndim != 3:
            raise ShapeError(f"batch_matmul: {what} '{t.name}' must be 3-d (batch, rows, "
                             f"cols), got shape {t.shape}")
    if mat2.shape[0] != input.shape[0]:
        raise ShapeError(f"batch_matmul: input has batch size {input.shape[0]} "
                         f"(input.shape[0]) but mat2 has {mat2.shape[0]} (mat2.shape[0])")
    if mat2.shape[1] != input.shape[2]:
        raise ShapeError(f"batch_matmul: input has {input.shape[2]} columns (input.shape[2]) "
                         f"but mat2 has {mat2.shape[1]} rows (mat2.shape[1])")
    k = te.reduce_axis(input.shape[2], name="k")
    return te.compute((input.shape[0], input.shape[1], mat2.shape[2]),
                      lambda bb, i, j: te.sum(input[bb, i, k] * mat2[bb, k, j], axis=k),
                      name="batch_matmul")
