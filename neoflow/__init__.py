"""NeoFlow: write a new operator as a tensor expression; get its gradient and
fast native code for the whole training step.

>>> import neoflow as nf
>>> A = nf.placeholder((4, 3), name="A")
>>> B = nf.compute((3, 4), lambda i, j: A[j, i] * 2.0, name="B")
"""
from .errors import NeoFlowError
from .te import (Expr, Tensor, abs, cast, compute, const, erf, evaluate, exp, floor, log, max,
                 maximum, min, minimum, parameter, placeholder, pow, reduce_axis, rsqrt,
                 sigmoid, sqrt, sum, tanh, where)
from .te import ceil, clamp, cos, expm1, log1p, round, sign, sin
from .te import random_uniform
from .te.scan import scan
from .api import build
from .autodiff import grad
from .te.flops import flops
from . import nn
from . import optim
from .runtime import Trainer, TuningOptions
from .graph.explain import explain
from .tune import tune  # the function; the stage's other names: neoflow.tune.<module>
from .tune.ray_runner import RayRunner

__version__ = "0.1.0"


def __getattr__(name):
    """`nf.torch`, the PyTorch frontend, imported on first use (so that
    importing neoflow never imports torch)."""
    if name == "torch":
        import importlib
        from .errors import require
        require("torch", "pip install torch", "nf.torch (the PyTorch frontend)")
        module = importlib.import_module(".frontends.torch", __name__)
        globals()["torch"] = module
        return module
    raise AttributeError(f"module 'neoflow' has no attribute {name!r}")
