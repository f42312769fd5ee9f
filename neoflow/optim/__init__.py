"""Optimizers as update expressions: each builds te computes of the new
parameter and state, so the update fuses into the training step like any
other op.

>>> opt = nf.optim.Adam(lr=1e-3)
"""
from .adam import Adam
from .adamw import AdamW
from .base import Optimizer, Update
from .rmsprop import RMSprop
from .schedule import CosineAnnealingLR, LinearLR, LRSchedule, OneCycleLR, StepLR
from .sgd import SGD

__all__ = ["Optimizer", "Update", "SGD", "Adam", "AdamW", "RMSprop", "LRSchedule", "StepLR",
           "CosineAnnealingLR", "LinearLR", "OneCycleLR"]
