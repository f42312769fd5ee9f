"""The runtime: buffers planned once, kernels run in order, the Trainer and
its background tuner (hot-swapped kernels between steps).

>>> trainer = nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1))    # doctest: +SKIP
"""
from .background import TuningOptions, TuningOptionsError
from .trainer import NonFiniteLossError, NonFiniteLossWarning, Trainer

__all__ = ["Trainer", "TuningOptions", "TuningOptionsError", "NonFiniteLossError",
           "NonFiniteLossWarning"]
