"""The graph stage: tensor DAGs cut into kernels (ordered groups of compute
stages), the unit the schedule stage tiles and codegen generates.

>>> from neoflow.graph import kernels_for
"""
from .kernel import Kernel, kernels_for
from .ops_class import op_class
from .decision import Decision
from .grouping import group_kernels
from .partition import Partition, fuse, fuse_training_graph, kernels_of

__all__ = ["Kernel", "kernels_for", "op_class", "fuse", "fuse_training_graph", "group_kernels",
           "kernels_of", "Partition", "Decision"]
