"""frontends/torch/convert: the one place torch tensors meet NumPy arrays and
te dtypes -- zero-copy views in (contiguous CPU tensors), torch tensors out,
and the checks that name what was wrong (device, dtype).

Hands on: `to_array`, `to_torch`, `te_dtype`, `torch_dtype` for the op
decorator (op.py) and the backend (backend.py).
"""
import numpy as np
import torch

from ...errors import InputError

_TE = {torch.float32: "float32", torch.float64: "float64", torch.int32: "int32",
       torch.int64: "int64", torch.bool: "bool"}
_TORCH = {v: k for k, v in _TE.items()}


def te_dtype(dtype, what):
    """The te dtype name of a torch dtype, or InputError naming `what`.

    >>> te_dtype(torch.float32, "x")
    'float32'
    """
    if dtype not in _TE:
        raise InputError(f"{what}: dtype {dtype} is not supported by NeoFlow; expected one of "
                         f"{', '.join(str(d) for d in _TE)}")
    return _TE[dtype]


def torch_dtype(name):
    """The torch dtype of a te dtype name.

    >>> torch_dtype("float64")
    torch.float64
    """
    return _TORCH[name]


def check_tensor(t, what):
    """InputError unless `t` is a torch tensor on the CPU of a NeoFlow dtype.

    >>> check_tensor(torch.ones(2), "x")
    """
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise InputError(f"{what}: tensor on {t.device}; NeoFlow's target 'cpu' needs CPU "
                         "tensors (move it with .cpu())")
    te_dtype(t.dtype, what)


def to_array(t):
    """A C-contiguous NumPy view of CPU tensor `t` (a copy only when `t` is
    not contiguous).

    >>> to_array(torch.ones(2, 3).t()).flags.c_contiguous
    True
    """
    return t.detach().contiguous().numpy()


def to_torch(a):
    """A torch tensor sharing `a`'s memory.

    >>> to_torch(np.ones(2, np.float32)).dtype
    torch.float32
    """
    return torch.from_numpy(a) if a.flags.writeable else torch.from_numpy(a.copy())


__all__ = ["te_dtype", "torch_dtype", "check_tensor", "to_array", "to_torch"]
