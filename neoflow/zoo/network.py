"""The common interface of the zoo: a `Network` (one architecture, its size
presets, its NeoFlow builder, its PyTorch twin and its synthetic data) and
the `Model` it builds (the loss, data placeholders and parameters of one
size and dtype).

A network module hands three functions over the same keyword sizes to its
`Network` record (users reach them through `Network.build` and `Model`):

    _build(ps, dtype, **sizes) -> (loss, {input name: placeholder})
        ps is a `ParamSet`: every nf.parameter is made through it; a third
        item {output name: tensor} may name tensors besides the loss that a
        user reads (a classifier's "logits", to score a test set)
    _torch_loss(p, data, **sizes) -> 0-d torch tensor
        p: {parameter name: torch tensor}, data: {input name: torch tensor}
    _make_batch(rng, dtype, **sizes) -> {input name: ndarray}

A network trained in alternating phases (a GAN: discriminator, then
generator) names them in `phases`; _build and _torch_loss then also take
`phase=` (_make_batch does not: one batch over every phase's inputs serves
a whole round), and each phase is built as a `Model` of its own (its loss,
its trainable parameters, the other phases' parameters as requires_grad=False
copies of the same names; zoo.alternating trains them in turn).

Hands on: `Model`s, which the tests, the benchmark (zoo.benchmark) and users train.
"""
import functools

import numpy as np

from ..te import parameter


class ParamSet:
    """The parameters of one network, made and kept under their names.

    >>> ps = ParamSet("float32")
    >>> w = ps("fc.weight", (10, 64), init="kaiming")
    >>> list(ps.tensors), ps.trainable
    (['fc.weight'], ['fc.weight'])
    """

    def __init__(self, dtype):
        self.dtype, self.tensors, self.trainable = dtype, {}, []

    def __call__(self, name, shape, init="xavier", requires_grad=True):
        if name in self.tensors:
            raise ValueError(f"parameter '{name}' is made twice")
        t = parameter(shape, init=init, dtype=self.dtype, name=name,
                         requires_grad=requires_grad)
        self.tensors[name] = t
        if requires_grad:
            self.trainable.append(name)
        return t


class Network:
    """One architecture of the zoo: `kind` is "novel", "cnn", "transformer" or "mlp";
    `defaults` are the benchmark's sizes, `small` a tiny preset for tests;
    `lr` the SGD learning rate it trains stably at where the tests' and the
    benchmark's own would diverge (None: theirs); `phases` the names of its
    alternating training phases (None: one loss).

    >>> net = zoo.get("lltm")
    >>> model = net.build("small", dtype="float64")
    >>> model.loss.shape
    ()
    """

    def __init__(self, name, kind, summary, build, torch_loss, make_batch, defaults, small,
                 lr=None, phases=None):
        self.name, self.kind, self.summary = name, kind, summary
        self._build, self._torch_loss, self._make_batch = build, torch_loss, make_batch
        self.defaults, self.small = dict(defaults), dict(small)
        self.lr, self.phases = lr, tuple(phases) if phases else None

    def __repr__(self):
        return f"<Network {self.name} ({self.kind})>"

    def sizes(self, preset="default", **overrides):
        """The sizes of `preset` ("default" or "small") with `overrides` applied.

        >>> zoo.get("lltm").sizes("small", batch=3)["batch"]
        3
        """
        presets = {"default": self.defaults, "small": self.small}
        if preset not in presets:
            raise ValueError(f"{self.name}: preset must be 'default' or 'small', got {preset!r}")
        unknown = sorted(set(overrides) - set(self.defaults))
        if unknown:
            raise ValueError(f"{self.name}: unknown size(s) {unknown}; sizes are "
                             f"{sorted(self.defaults)}")
        return {**presets[preset], **overrides}

    def build(self, preset="default", dtype="float32", phase=None, **overrides):
        """A fresh `Model` of this network (new placeholders and parameters);
        for a network with `phases`, of one phase (default: the first).

        >>> model = zoo.get("lenet").build("small", batch=2)
        >>> sorted(model.inputs)
        ['x', 'y']
        """
        sizes = self.sizes(preset, **overrides)
        if self.phases is None:
            if phase is not None:
                raise ValueError(f"{self.name}: has no training phases, got phase={phase!r}")
            extra = {}
        else:
            phase = self.phases[0] if phase is None else phase
            if phase not in self.phases:
                raise ValueError(f"{self.name}: phase must be one of {self.phases}, got "
                                 f"{phase!r}")
            extra = {"phase": phase}
        ps = ParamSet(dtype)
        loss, inputs, *outputs = self._build(ps, dtype, **extra, **sizes)
        return Model(self, sizes, dtype, loss, inputs, ps, phase, *outputs)

    def build_phases(self, preset="default", dtype="float32", **overrides):
        """One `Model` per training phase (one for a network without phases).

        >>> [m.phase for m in zoo.get("dcgan").build_phases("small")]
        ['discriminator', 'generator']
        """
        return [self.build(preset, dtype, phase, **overrides) for phase in self.phases or (None,)]


class Model:
    """A built network: `loss` (0-d), `inputs` {name: placeholder}, `params`
    {name: nf.parameter}, `trainable` (names of the requires_grad ones),
    `outputs` {name: tensor} (what the network names besides the loss, e.g.
    "logits"; often empty), and the matching PyTorch twin and data.

    >>> model = zoo.get("lenet").build("small")
    >>> batch = model.make_batch(np.random.default_rng(0))
    >>> with nf.Trainer(model.loss, nf.optim.SGD(lr=0.1)) as trainer:
    ...     loss = trainer.step(batch)
    """

    def __init__(self, network, sizes, dtype, loss, inputs, ps, phase=None, outputs=None):
        self.network, self.sizes, self.dtype, self.phase = network, sizes, dtype, phase
        self.loss, self.inputs, self.outputs = loss, inputs, dict(outputs or {})
        self.params, self.trainable = ps.tensors, list(ps.trainable)

    def __repr__(self):
        return f"<Model {self.network.name} {self.sizes} {self.dtype}>"

    def make_batch(self, rng):
        """Synthetic data {input name: ndarray} of this model's shapes and dtype.

        >>> model.make_batch(np.random.default_rng(0))["x"].shape
        (2, 1, 16, 16)
        """
        return self.network._make_batch(rng, self.dtype, **self.sizes)

    def perturbed_values(self, seed=1):
        """{name: ndarray} for every parameter: its initial draw under `seed`,
        plus N(0, 0.1^2) noise on the trainable ones (so that no batch-norm
        scale is exactly 1 and no bias exactly 0: parity tests see every term).

        >>> model.perturbed_values()["conv1.weight"].shape      # lenet, "small"
        (2, 1, 5, 5)
        """
        from ..runtime.init import initial_value
        rng = np.random.default_rng(seed)
        values = {}
        for name, p in self.params.items():
            v = initial_value(p, seed)
            if name in self.trainable:
                v = (v + 0.1 * rng.standard_normal(p.shape)).astype(v.dtype)
            values[name] = v
        return values

    def _phase_kw(self):
        return {} if self.phase is None else {"phase": self.phase}

    def torch_model(self, values):
        """The PyTorch twin as a torch.nn.Module holding `values` ({name:
        ndarray}, e.g. `trainer.parameters()`); `module(data)` is the loss, for
        `data` {input name: torch tensor}.

        >>> twin = model.torch_model(trainer.parameters())
        >>> twin({k: torch.from_numpy(v) for k, v in batch.items()}).backward()
        """
        from .twin import TorchTwin
        return TorchTwin(functools.partial(self.network._torch_loss, **self._phase_kw(),
                                           **self.sizes), values, self.trainable)
