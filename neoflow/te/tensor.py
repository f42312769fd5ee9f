"""Tensors: placeholders, parameters and computes, and the checks made when
an expression reads one.

A `Tensor` is a node of the tensor DAG. Its `op` says how it is made:
`PlaceholderOp` (data fed in), `ParameterOp` (trainable or state), or
`ComputeOp` (one index variable per output axis and a scalar body).

Hands on: the `Tensor` DAG every later stage consumes.
"""
import itertools
import weakref
import numbers

import numpy as np

from ..errors import DTypeError, ExpressionError, ShapeError
from . import dtype as dt
from . import methods
from .expr import Const, Expr, IterVar, Read, as_expr

_ids = itertools.count()
_live_computes = weakref.WeakSet()   # every compute still alive (graph/training: forgotten branches)


def live_computes():
    """The computes made so far that are still referenced (in no order)."""
    return list(_live_computes)
INITS = ("zeros", "ones", "normal", "uniform", "xavier", "kaiming")


class PlaceholderOp:
    """Data fed in at run time."""


class ParameterOp:
    """A trainable tensor (or, with requires_grad=False, state such as running stats)."""

    def __init__(self, init, requires_grad):
        self.init, self.requires_grad = init, requires_grad


class ComputeOp:
    """`out[axes] = body`: `axes` are spatial IterVars, one per output dimension."""

    def __init__(self, axes, body):
        self.axes, self.body = tuple(axes), body


class Tensor:
    """A node of the tensor DAG with a static shape and dtype.

    >>> A = placeholder((4, 3), name="A")
    >>> A.shape, A.dtype, A.ndim
    ((4, 3), 'float32', 2)
    """

    def __init__(self, shape, dtype, name, op):
        self.shape, self.dtype, self.op = shape, dtype, op
        self.id = next(_ids)
        self.name = name if name is not None else f"t{self.id}"
        self.auto_named = name is None    # a parameter may be renamed stably (graph/training)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def is_compute(self):
        return isinstance(self.op, ComputeOp)

    def __repr__(self):
        kind = type(self.op).__name__.replace("Op", "").lower()
        return f"<{kind} {self.name} {self.shape} {self.dtype}>"

    def __getitem__(self, indices):
        if not isinstance(indices, tuple):
            indices = (indices,)
        if methods.is_view_index(indices, self.ndim):
            return methods.view(self, indices)
        if len(indices) != self.ndim:
            raise ShapeError(
                f"tensor '{self.name}' has {self.ndim} dimension(s) {self.shape} but was "
                f"indexed with {len(indices)} index(es)")
        checked = []
        for d, index in enumerate(indices):
            if isinstance(index, slice) or index is Ellipsis or index is None:
                raise ExpressionError(
                    f"index {d} of tensor '{self.name}' is {index!r} next to index "
                    "expressions: a read takes one integer expression per dimension, a view "
                    "(slices, None, ...) only Python ints besides them")
            if isinstance(index, (bool, np.bool_)):
                raise ExpressionError(
                    f"index {d} of tensor '{self.name}': expected an integer expression, "
                    f"got {index!r}")
            if isinstance(index, numbers.Integral):
                index = Const(int(index), dt.INDEX)
            elif not isinstance(index, Expr):
                raise DTypeError(
                    f"index {d} of tensor '{self.name}' must be an integer expression; "
                    f"got {index!r} ({type(index).__name__})")
            if not dt.is_int(index.dtype):
                raise DTypeError(
                    f"index {d} of tensor '{self.name}' is {index.dtype} ({index!r}); "
                    "indices must be integers (int32/int64): use // or nf.cast")
            if isinstance(index, Const) and not 0 <= index.value < self.shape[d]:
                raise ShapeError(
                    f"constant index {index.value} is out of range for dimension {d} of "
                    f"tensor '{self.name}' (size {self.shape[d]})")
            checked.append(index)
        return Read(self, checked)

    # elementwise arithmetic between whole tensors (NumPy broadcasting)
    def __add__(self, o): return _elementwise("add", self, o)
    def __radd__(self, o): return _elementwise("add", o, self)
    def __sub__(self, o): return _elementwise("sub", self, o)
    def __rsub__(self, o): return _elementwise("sub", o, self)
    def __mul__(self, o): return _elementwise("mul", self, o)
    def __rmul__(self, o): return _elementwise("mul", o, self)
    def __truediv__(self, o): return _elementwise("div", self, o)
    def __rtruediv__(self, o): return _elementwise("div", o, self)
    def __neg__(self):
        return compute(self.shape, lambda *i: -_read_broadcast(self, i, self.shape),
                       name=f"neg_{self.name}")
    def __pow__(self, o): return _elementwise("pow", self, o)
    def __rpow__(self, o): return _elementwise("pow", o, self)
    # comparisons make bool Tensors (masks for nf.where); == and != stay identity,
    # as tensors are dict keys
    def __lt__(self, o): return _elementwise("lt", self, o)
    def __le__(self, o): return _elementwise("le", self, o)
    def __gt__(self, o): return _elementwise("gt", self, o)
    def __ge__(self, o): return _elementwise("ge", self, o)

    # torch-style methods (te/methods.py)
    def __matmul__(self, o): return methods.matmul(self, o)
    def __rmatmul__(self, o): return methods.rmatmul(self, o)

    def sum(self, dim=None, keepdim=False, dtype=None):
        """torch's t.sum (nf.nn.sum). >>> x.sum(dim=-1, keepdim=True)"""
        return methods.tensor_sum(self, dim, keepdim, dtype)

    def mean(self, dim=None, keepdim=False, dtype=None):
        """torch's t.mean (nf.nn.mean). >>> x.mean(dim=(0, 1))"""
        return methods.tensor_mean(self, dim, keepdim, dtype)

    def max(self, dim=None, keepdim=False):
        """torch's t.max(dim), values only; t.max() over everything. >>> x.max(1)"""
        return methods.tensor_max(self, dim, keepdim)

    def reshape(self, *shape):
        """torch's t.reshape (one -1 allowed). >>> x.reshape(2, -1)"""
        return methods.reshape(self, shape)

    def permute(self, *dims):
        """torch's t.permute. >>> x.permute(1, 0)"""
        return methods.permute(self, dims)

    def transpose(self, dim0, dim1):
        """torch's t.transpose. >>> x.transpose(0, -1)"""
        return methods.transpose(self, dim0, dim1)

    @property
    def T(self):  # noqa: N802 (torch's name)
        """The transpose of a 2-d tensor. >>> w.T"""
        return methods.matrix_t(self)

    def float(self):
        """t as float32 (t itself if it is). >>> n.float()"""
        return methods.to_dtype(self, "float32")

    def double(self):
        """t as float64 (t itself if it is). >>> x.double()"""
        return methods.to_dtype(self, "float64")


def _check_shape(shape, what):
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"{what}: shape must be a tuple of positive ints, got {shape!r}")
    out = []
    for d, s in enumerate(shape):
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s <= 0:
            raise ShapeError(
                f"{what}: dimension {d} of shape {tuple(shape)!r} must be a positive int, got {s!r}")
        out.append(int(s))
    return tuple(out)


def placeholder(shape, dtype="float32", name=None):
    """A data input fed at run time.

    >>> x = placeholder((8, 16), name="x")
    """
    what = f"placeholder '{name}'" if name else "placeholder"
    return Tensor(_check_shape(shape, what), dt.canonical(dtype, what), name, PlaceholderOp())


def parameter(shape, init="xavier", dtype="float32", name=None, requires_grad=True):
    """A trainable tensor; `init` names an initialiser or gives an ndarray.

    >>> W = parameter((16, 4), init="zeros", name="W")
    """
    what = f"parameter '{name}'" if name else "parameter"
    shape = _check_shape(shape, what)
    dtype = dt.canonical(dtype, what)
    if isinstance(init, str):
        if init not in INITS:
            raise ExpressionError(f"{what}: unknown init {init!r}; expected one of {INITS} "
                                  "or an ndarray")
    else:
        init = np.asarray(init)
        if init.shape != shape:
            raise ShapeError(f"{what}: init array has shape {init.shape}, expected {shape}")
        init = init.astype(dt.to_numpy(dtype), copy=True)
    return Tensor(shape, dtype, name, ParameterOp(init, bool(requires_grad)))


def reduce_axis(dom, name=None):
    """A reduction axis over range(dom) or [lo, hi).

    >>> k = reduce_axis(16, name="k"); k.extent
    16
    """
    lo, hi = (0, dom) if isinstance(dom, numbers.Integral) else tuple(dom)
    name = name or "r"
    if not (isinstance(lo, numbers.Integral) and isinstance(hi, numbers.Integral)) or hi <= lo:
        raise ShapeError(f"reduce axis '{name}': range must be a positive int or (lo, hi) "
                         f"ints with lo < hi, got {dom!r}")
    return IterVar(name, lo, hi, "reduce")


def compute(shape, fcompute, name=None):
    """A tensor whose element at each index is `fcompute(*indices)`.

    >>> A = placeholder((4, 3), name="A")
    >>> B = compute((3, 4), lambda i, j: A[j, i] * 2, name="B")
    """
    what = f"compute '{name}'" if name else "compute"
    shape = _check_shape(shape, what)
    letters = "ijlmnopqstuvw"
    axes = [IterVar(letters[d] if d < len(letters) else f"i{d}", 0, s, "spatial")
            for d, s in enumerate(shape)]
    try:
        body = fcompute(*axes)
    except TypeError as e:
        if "positional argument" in str(e):
            raise ShapeError(f"{what}: fcompute must take {len(shape)} index argument(s) "
                             f"for shape {shape}: {e}") from None
        raise
    body = as_expr(body)
    from .verify import check_body, check_reads
    check_body(body, axes, what)
    check_reads(body, what)
    out = Tensor(shape, body.dtype, name, ComputeOp(axes, body))
    _live_computes.add(out)
    return out


def _read_broadcast(t, idx, out_shape):
    """Read `t` at output index `idx` under NumPy broadcasting to `out_shape`."""
    if not isinstance(t, Tensor):
        return t
    lead = len(out_shape) - t.ndim
    return t[tuple(0 if s == 1 and out_shape[lead + d] != 1 else idx[lead + d]
                   for d, s in enumerate(t.shape))] if t.ndim else t[()]


def broadcast_shapes(*shapes, what="broadcast"):
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"{what}: shapes {', '.join(map(str, shapes))} do not broadcast") from None


def _elementwise(op, a, b):
    from .expr import binary
    return elementwise_map(lambda x, y: binary(op, x, y), (a, b), op)


def elementwise_map(fn, args, op):
    """The Tensor whose element is `fn(*scalars)`: each Tensor of `args` is read
    under NumPy broadcasting, Python numbers (and None) pass through as they are.

    >>> elementwise_map(lambda a, b: nf.maximum(a, b), (x, 0.0), "maximum").shape == x.shape
    True
    """
    tensors = [a for a in args if isinstance(a, Tensor)]
    for a in args:
        if not isinstance(a, (Tensor, numbers.Number)) and a is not None:
            raise ExpressionError(
                f"'{op}' of whole tensors combines tensors and Python numbers; got "
                f"{type(a).__name__} ({a!r}) next to tensor '{tensors[0].name}': index the "
                "tensor to build a scalar expression instead")
    shape = broadcast_shapes(*(t.shape for t in tensors),
                             what=f"'{op}' of {', '.join(map(repr, args))}")
    names = "_".join(t.name for t in tensors)
    return compute(shape, lambda *i: fn(*(_read_broadcast(a, i, shape) for a in args)),
                   name=f"{op}_{names}")
