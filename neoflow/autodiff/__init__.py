"""Expression-based automatic differentiation: `grad` derives gradients as
new tensor expressions by reverse mode over the tensor DAG, solving each
read's integer index map exactly (see docs/autodiff.md).

>>> import neoflow as nf
>>> x = nf.placeholder((3,), name="x")
>>> k = nf.reduce_axis(3, name="k")
>>> loss = nf.compute((), lambda: nf.sum(x[k] * x[k], axis=k))
>>> (dx,) = nf.grad(loss, [x])
"""
from .reverse import grad

__all__ = ["grad"]
