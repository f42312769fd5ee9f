"""Embedding lookup (F.embedding): a gather of weight rows by integer indices.

Hands on: one compute Tensor shaped input.shape + (embedding_dim,).
"""
from .. import te
from ..errors import DTypeError, ShapeError
from ..te import dtype as dt
from .common import check_float, check_tensor, reject

__all__ = ["embedding"]


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """F.embedding: out[..., d] = weight[input[...], d] for an int32/int64 input.
    An index outside 0..num_embeddings-1 raises when evaluated.

    >>> ids = nf.placeholder((4, 7), dtype="int64", name="ids")
    >>> table = nf.parameter((100, 16), name="table")
    >>> nf.nn.embedding(ids, table).shape
    (4, 7, 16)
    """
    op = "embedding"
    check_tensor(input, op, "input")
    check_float(weight, op, "weight")
    reject(op, padding_idx=(padding_idx, None), max_norm=(max_norm, None),
           scale_grad_by_freq=(scale_grad_by_freq, False), sparse=(sparse, False))
    if not dt.is_int(input.dtype):
        raise DTypeError(f"embedding: input '{input.name}' must hold int32 or int64 indices, "
                         f"got {input.dtype}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight '{weight.name}' must be 2-d (num_embeddings, "
                         f"embedding_dim), got shape {weight.shape}")
    n = input.ndim
    return te.compute(input.shape + (weight.shape[1],),
                      lambda *i: weight[input[i[:n]], i[n]], name="embedding")
