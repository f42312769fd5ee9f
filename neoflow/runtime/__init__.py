"""The runtime: buffers planned once, kernels run in order, the Trainer.

>>> trainer = nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1))    # doctest: +SKIP
"""
from .trainer import NonFiniteLossError, NonFiniteLossWarning, Trainer

__all__ = ["Trainer", "NonFiniteLossError", "NonFiniteLossWarning"]
