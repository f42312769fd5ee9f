"""The PyTorch twin of a zoo model as a torch.nn.Module: the network's
torch loss function over parameters held by the module (trainable ones as
nn.Parameters, state such as batch-norm running statistics as buffers), so
torch.optim and torch.compile take it as they take any module.

Imported only when a twin is asked for: NeoFlow itself does not need torch.

Hands on: `TorchTwin` modules for the parity tests and the benchmark (zoo.benchmark).
"""
import torch


class TorchTwin(torch.nn.Module):
    """`loss_fn(params, data)` with `params` the module's tensors by NeoFlow
    name; `trainable` names the ones that get gradients. For a network of
    several phases `loss_fn` is {phase: function}, and `module(data, phase)`
    the loss of one.

    >>> twin = TorchTwin(loss_fn, {"w": np.ones((2, 3))}, trainable=["w"])
    >>> loss = twin({"x": torch.ones(4, 3)})
    """

    def __init__(self, loss_fn, values, trainable):
        super().__init__()
        self.loss_fn = loss_fn
        self.names = list(values)
        self.weights = torch.nn.ParameterList()
        self._slots = []    # per name: ("param", index in weights) or ("buffer", buffer name)
        for n, name in enumerate(self.names):
            value = torch.tensor(values[name])
            if name in trainable:
                self._slots.append(("param", len(self.weights)))
                self.weights.append(torch.nn.Parameter(value))
            else:
                self._slots.append(("buffer", f"state{n}"))
                self.register_buffer(f"state{n}", value)

    def tensors(self):
        """{NeoFlow name: the module's tensor} (parameters and buffers).

        >>> twin.tensors()["w"].grad
        """
        return {name: self.weights[slot] if kind == "param" else getattr(self, slot)
                for name, (kind, slot) in zip(self.names, self._slots)}

    def values(self):
        """{NeoFlow name: ndarray copy}, comparable with `trainer.parameters()`.

        >>> twin.values()["w"].shape
        (2, 3)
        """
        return {name: t.detach().numpy().copy() for name, t in self.tensors().items()}

    def forward(self, data, phase=None):
        fn = self.loss_fn if phase is None else self.loss_fn[phase]
        return fn(self.tensors(), data)
