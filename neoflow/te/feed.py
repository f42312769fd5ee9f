"""Checking and converting values fed for placeholders and parameters.

One place for the rules every entry point applies (the evaluator, built
functions, the trainer): NumPy arrays or torch CPU tensors in, exact shape,
exact dtype (Python scalars are converted for 0-d inputs).

Hands on: a C-contiguous NumPy array per fed tensor.
"""
import numbers

import numpy as np

from ..errors import InputError
from . import dtype as dt


def as_input_array(tensor, value):
    """`value` as a contiguous ndarray fit for `tensor`, or InputError naming it.

    >>> as_input_array(nf.placeholder((2,), name="x"), np.zeros(2, np.float32))
    array([0., 0.], dtype=float32)
    """
    if type(value) is np.ndarray and value.shape == tensor.shape and \
            value.dtype == dt.to_numpy(tensor.dtype) and value.flags.c_contiguous:
        return value                              # the common case, checked in a microsecond
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        if getattr(value, "device", None) is not None and str(value.device) != "cpu":
            raise InputError(f"input '{tensor.name}': torch tensor on {value.device}; "
                             "move it to the CPU first (.cpu())")
        value = value.detach().numpy()
    if isinstance(value, (numbers.Number, np.bool_)) and not isinstance(value, np.generic) \
            and tensor.ndim == 0:
        return np.asarray(value, dtype=dt.to_numpy(tensor.dtype))
    if not isinstance(value, (np.ndarray, np.generic)):
        raise InputError(f"input '{tensor.name}': expected a NumPy array of shape "
                         f"{tensor.shape} and dtype {tensor.dtype}, got {type(value).__name__}")
    value = np.asarray(value)
    if value.shape != tensor.shape:
        raise InputError(f"input '{tensor.name}': expected shape {tensor.shape}, got "
                         f"{value.shape}")
    if value.dtype.name != tensor.dtype:
        raise InputError(f"input '{tensor.name}': expected dtype {tensor.dtype}, got "
                         f"{value.dtype.name} (convert with .astype(np.{tensor.dtype}))")
    return np.ascontiguousarray(value).reshape(tensor.shape)  # keeps 0-d as 0-d


def resolve_feed(feed, tensors):
    """Map a feed dict keyed by Tensor or by name onto `tensors` (leaf tensors).

    Returns {id(tensor): ndarray}. Keys the computation does not read are
    ignored; a missing value raises InputError; parameters with an ndarray
    init need no feed.
    """
    by_name = {t.name: t for t in tensors}
    known = {id(t) for t in tensors}
    out = {}
    for key, value in (feed or {}).items():
        if isinstance(key, str):
            key = by_name.get(key)
        if key is None or id(key) not in known:
            continue  # an input the outputs do not read is allowed and ignored
        out[id(key)] = as_input_array(key, value)
    for t in tensors:
        if id(t) not in out:
            init = getattr(t.op, "init", None)
            if isinstance(init, np.ndarray):
                out[id(t)] = init
            else:
                raise InputError(f"no value fed for '{t.name}' {t.shape} {t.dtype}")
    return out
