"""Tensor expressions: placeholders, parameters, computes, reductions, math,
and the reference evaluator. Imports nothing of NeoFlow beyond `errors`."""
from .evaluate import evaluate
from .expr import Expr, IterVar
from .ops import (abs, cast, const, erf, exp, floor, log, max, maximum, min, minimum, pow,
                  rsqrt, sigmoid, sqrt, sum, tanh, where)
from .ops import ceil, clamp, cos, expm1, log1p, round, sign, sin
from .tensor import Tensor, compute, parameter, placeholder, reduce_axis
from .random import random_uniform
from .scan import scan

__all__ = ["Tensor", "Expr", "IterVar", "placeholder", "parameter", "compute", "reduce_axis",
           "evaluate", "exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "abs", "erf", "floor",
           "pow", "maximum", "minimum", "where", "cast", "const", "sum", "max", "min",
           "ceil", "clamp", "cos", "expm1", "log1p", "round", "sign", "sin"]
__all__ += ["random_uniform"]
__all__ += ["scan"]
