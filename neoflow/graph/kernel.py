"""graph/kernel: the unit that is scheduled and generated.

A `Kernel` is an ordered group of compute stages (te Tensors, producers
first) with its own inputs (leaf tensors or tensors other kernels compute)
and outputs (the stages that are read outside it or asked for). Stages that
are not outputs are kernel-local intermediates. `kernels_for(outputs)` cuts
a tensor DAG into one kernel per compute (no fusion); graph/partition.py
fuses (inlining, epilogue grouping) and builds multi-stage Kernels.

A kernel's `key` depends only on its structure -- shapes, dtypes and the
expression trees, with tensors numbered by position and axes by their role
-- never on tensor or axis names: the tuning database keys on it.

Hands on: Kernels in execution order.
"""
import hashlib

from ..te.expr import Binary, Cast, Const, IterVar, Read, Reduce, Select, Unary
from ..te.random import Random
from ..te.visit import children, post_order, tensor_inputs, topo_tensors


class Kernel:
    """An ordered group of compute stages with its own inputs and outputs.

    >>> A = nf.placeholder((4, 3), name="A")
    >>> B = nf.compute((4, 3), lambda i, j: A[i, j] * 2, name="B")
    >>> k = Kernel([B]); k.inputs, k.outputs
    ((<placeholder A (4, 3) float32>,), (<compute B (4, 3) float32>,))
    """

    def __init__(self, stages, outputs=None):
        self.stages = tuple(stages)
        if not self.stages or not all(t.is_compute for t in self.stages):
            raise ValueError("a kernel is a non-empty list of compute tensors")
        position = {id(t): n for n, t in enumerate(self.stages)}
        inputs, seen = [], set()
        for n, t in enumerate(self.stages):
            for p in tensor_inputs(t):
                if id(p) in position:
                    if position[id(p)] >= n:
                        raise ValueError(f"kernel stage '{t.name}' reads stage '{p.name}', "
                                         "which comes later; list producers first")
                elif id(p) not in seen:
                    seen.add(id(p))
                    inputs.append(p)
        self.inputs = tuple(inputs)
        outputs = self.stages[-1:] if outputs is None else tuple(outputs)
        if not all(id(t) in position for t in outputs):
            raise ValueError("kernel outputs must be stages of the kernel")
        self.outputs = tuple(outputs)
        out_ids = {id(t) for t in outputs}
        self.locals = tuple(t for t in self.stages if id(t) not in out_ids)
        self.origins = {}   # stage name -> {(tensor, dim): inlined computes} (graph/partition)
        self._key = None

    def __repr__(self):
        return f"<Kernel {', '.join(t.name for t in self.stages)}>"

    def signature(self):
        """Canonical text of the kernel's structure (no user names in it).

        >>> print(Kernel([B]).signature())      # doctest: +SKIP
        in0 float32 (4, 3)
        st0 float32 (4, 3) out
          %0 = s0
          ...
        """
        names = {id(t): f"in{n}" for n, t in enumerate(self.inputs)}
        names.update({id(t): f"st{n}" for n, t in enumerate(self.stages)})
        out_ids = {id(t) for t in self.outputs}
        lines = [f"in{n} {t.dtype} {t.shape}" for n, t in enumerate(self.inputs)]
        for n, t in enumerate(self.stages):
            lines.append(f"st{n} {t.dtype} {t.shape}{' out' if id(t) in out_ids else ''}")
            lines.extend("  " + s for s in _expr_lines(t.op.axes, t.op.body, names))
        return "\n".join(lines)

    @property
    def key(self):
        """sha256 (hex) of `signature()`: equal for kernels of equal structure."""
        if self._key is None:
            self._key = hashlib.sha256(self.signature().encode()).hexdigest()
        return self._key


def _expr_lines(axes, body, tensor_names):
    """One line per node of `body` (shared sub-trees once), children by number."""
    var_names = {id(a): f"s{d}" for d, a in enumerate(axes)}

    def name(v):  # reduce axes by first appearance (a reduction over a constant has no read)
        if id(v) not in var_names:
            var_names[id(v)] = f"r{sum(n.startswith('r') for n in var_names.values())}"
        return var_names[id(v)]

    number, lines = {}, []
    for node in post_order(body):
        args = [f"%{number[id(c)]}" for c in children(node)]
        if isinstance(node, IterVar):
            text = f"{name(node)} [{node.lo}, {node.hi})"
        elif isinstance(node, Const):
            text = f"const {node.dtype} {node.value!r}"
        elif isinstance(node, Read):
            text = f"read {tensor_names[id(node.tensor)]} {' '.join(args)}"
        elif isinstance(node, Reduce):
            over = [name(a) if id(a) in var_names else f"{name(a)} [{a.lo}, {a.hi})"
                    for a in node.axes]
            text = f"{node.op} over {' '.join(over)} of {' '.join(args)}"
        elif isinstance(node, (Unary, Binary)):
            text = f"{node.op} {node.dtype} {' '.join(args)}"
        elif isinstance(node, Cast):
            text = f"cast {node.dtype} {' '.join(args)}"
        elif isinstance(node, Select):
            text = f"select {' '.join(args)}"
        elif isinstance(node, Random):
            text = f"random {node.dtype} {' '.join(args)}"
        else:
            raise TypeError(f"unknown expression node {type(node).__name__}")
        number[id(node)] = len(number)
        lines.append(f"%{number[id(node)]} = {text}")
    return lines


def kernels_for(outputs):
    """Cut the DAG behind `outputs` into kernels, producers first.

    Every compute is a kernel of one stage (unfused); see
    graph.partition.fuse / kernels_of for the fused partition.

    >>> [k.stages[0].name for k in kernels_for([B])]
    ['B']
    """
    return [Kernel([t]) for t in topo_tensors(list(outputs)) if t.is_compute]
