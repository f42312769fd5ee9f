"""`nf.torch`: NeoFlow's PyTorch frontend. `op` turns a tensor-expression
function into a torch custom operator (its gradient derived by nf.grad);
`backend` is what `torch.compile(model, backend="neoflow")` runs (found
through the `torch_dynamo_backends` entry point); `report(model)` says what
ran natively. Loaded on first use of `nf.torch`: importing neoflow does not
import torch.

>>> import neoflow as nf
>>> @nf.torch.op("mylib::double")
... def double(x):
...     return nf.compute(x.shape, lambda *i: x[i] * 2)
"""
from .backend import neoflow_backend as backend
from .op import op
from .report import report

__all__ = ["op", "backend", "report"]
