"""The graph stage: tensor DAGs cut into kernels (ordered groups of compute
stages), the unit the schedule stage tiles and codegen generates.

>>> from neoflow.graph import kernels_for
"""
from .kernel import Kernel, kernels_for

__all__ = ["Kernel", "kernels_for"]
