"""The reference execution backend: every kernel evaluated by te's NumPy
interpreter (nf.evaluate) on the planned buffers.

Slow but exact; it is the oracle the native backend is tested against, and
it checks the buffer plan itself (reuse and in-place updates) without any
generated code. A kernel is cut loose from the rest of the graph: its reads
of input tensors become reads of placeholders fed with their buffers.

Hands on: a step program (a callable that runs every kernel in order) and
forward functions for the executor.
"""
import numpy as np

from ..te import evaluate, placeholder
from ..te.expr import Read
from ..te.tensor import ComputeOp, Tensor
from ..te.visit import transform


def detach(kernel):
    """`kernel`'s stages rebuilt to read placeholders in place of its inputs.

    Returns ([rebuilt output per kernel output], [placeholder per kernel input]).

    >>> outs, inputs = detach(Kernel([C]))                  # doctest: +SKIP
    """
    new = {id(t): placeholder(t.shape, t.dtype, name=t.name) for t in kernel.inputs}
    inputs = [new[id(t)] for t in kernel.inputs]
    for t in kernel.stages:
        body = transform(t.op.body, lambda n: Read(new[id(n.tensor)], n.indices)
                         if isinstance(n, Read) else n)
        new[id(t)] = Tensor(t.shape, t.dtype, t.name, ComputeOp(t.op.axes, body))
    return [new[id(t)] for t in kernel.outputs], inputs


class ReferenceBackend:
    """Runs kernels with nf.evaluate.

    >>> step = ReferenceBackend().program(kernels, views)    # doctest: +SKIP
    >>> step()                                               # doctest: +SKIP
    """

    name = "reference"

    def program(self, kernels, views, apart=()):
        """A callable running `kernels` in order over `views` ({id(tensor): ndarray})
        (`apart`: how native code would group them; nothing here)."""
        calls = []
        for kernel in kernels:
            outs, inputs = detach(kernel)
            calls.append((outs, list(zip(inputs, (views[id(t)] for t in kernel.inputs))),
                          [views[id(t)] for t in kernel.outputs]))

        def run():
            for outs, inputs, targets in calls:
                values = evaluate(outs, dict(inputs))
                for target, value in zip(targets, values):
                    np.copyto(target, value)
        return run

    def function(self, outputs, inputs):
        """A callable(*arrays) -> tuple of fresh arrays computing `outputs`."""
        def run(*arrays):
            return evaluate(list(outputs), dict(zip(inputs, arrays)))
        return run
