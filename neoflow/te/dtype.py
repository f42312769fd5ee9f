"""The scalar types of the expression language and the rules that combine them.

Hands on: canonical dtype names ("float32", ...), their NumPy and C spellings.
"""
import numpy as np

from ..errors import DTypeError

FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int32", "int64")
BOOL = "bool"
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (BOOL,)
INDEX = "int64"  # the dtype of index variables

C_TYPES = {"float32": "float", "float64": "double", "int32": "int32_t",
           "int64": "int64_t", "bool": "uint8_t"}
_NUMPY = {name: np.dtype(name) for name in ALL_DTYPES}


def canonical(dtype, what="dtype"):
    """Return the canonical name of `dtype` (a string, NumPy dtype or type).

    >>> canonical(np.float32)
    'float32'
    """
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in ALL_DTYPES:
        raise DTypeError(f"{what}: unsupported dtype {dtype!r}; "
                         f"expected one of {', '.join(ALL_DTYPES)}")
    return name


def is_float(dtype):
    return dtype in FLOAT_DTYPES


def is_int(dtype):
    return dtype in INT_DTYPES


def to_numpy(dtype):
    """The NumPy dtype of a canonical name, made once (every call of a built
    function checks its inputs against it).

    >>> to_numpy("float32")
    dtype('float32')
    """
    return _NUMPY[dtype]
