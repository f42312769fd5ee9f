"""zoo/alternating: training a network of several phases (a GAN's
discriminator and generator steps) with NeoFlow, and its PyTorch form.

NeoFlow side: one nf.Trainer per phase. Each phase's Model trains its own
parameters and holds the other phases' as requires_grad=False parameters of
the same names (API.md: each Trainer keeps its own copy). After a phase's
step, the values it changed -- its trainable parameters and the state it
updates (batch-norm running statistics) -- are loaded into every other
trainer that holds them (Trainer.parameters / load_parameters); at the
start the same exchange makes every copy equal to the trainer that trains it.

PyTorch side: the twin holds each parameter once, and one torch optimizer
per phase steps that phase's parameters; a round is, per phase, zero_grad,
the phase's loss, backward, step -- the PyTorch DCGAN example's loop.

Hands on: per-round losses (one float per phase) to the tests and the
benchmark (zoo.benchmark).
"""
from ..nn import state_updates
from ..runtime import Trainer


class AlternatingTrainers:
    """One nf.Trainer per phase Model, stepped in turn on one batch
    (`make_trainer(loss, optimizer=..., **trainer_options)` makes each).

    >>> models = zoo.get("dcgan").build_phases("small")
    >>> with AlternatingTrainers(models, nf.optim.SGD(lr=0.01)) as gan:
    ...     d_loss, g_loss = gan.step(models[0].make_batch(rng))
    """

    def __init__(self, models, optimizer, make_trainer=Trainer, **trainer_options):
        self.models = list(models)
        self.trainers = []
        try:
            for model in self.models:
                self.trainers.append(make_trainer(model.loss, optimizer=optimizer,
                                                  **trainer_options))
        except BaseException:
            self.close()
            raise
        self._held = [set(t.parameters()) for t in self.trainers]
        self._owned = [set(m.trainable) | {p.name for p, _ in state_updates(m.loss)}
                       for m in self.models]
        for n in range(len(self.trainers)):
            self._share(n)

    def _share(self, n):
        """Load what phase n trains and updates into the other trainers."""
        targets = [(trainer, self._owned[n] & self._held[k])
                   for k, trainer in enumerate(self.trainers) if k != n]
        targets = [(trainer, names) for trainer, names in targets if names]
        if not targets:
            return      # one phase: nothing to copy
        values = self.trainers[n].parameters()
        for trainer, names in targets:
            trainer.load_parameters({name: values[name] for name in names})

    def step(self, batch):
        """One round: each phase's step on `batch` ({input name: ndarray};
        each phase takes the inputs it has), then its exchange; returns the
        phases' losses (before their updates).

        >>> d_loss, g_loss = gan.step(batch)
        """
        losses = []
        for n, (model, trainer) in enumerate(zip(self.models, self.trainers)):
            losses.append(trainer.step({k: batch[k] for k in model.inputs}))
            self._share(n)
        return tuple(losses)

    def parameters(self):
        """{name: ndarray}: every parameter, from the trainer that trains or
        updates it.

        >>> gan.parameters()["G.convt0.weight"].shape
        """
        out = {}
        for owned, trainer in zip(self._owned, self.trainers):
            values = trainer.parameters()
            out.update({k: v for k, v in values.items() if k in owned})
        return out

    def stats(self):
        """Trainer.stats() of each phase, in order."""
        return [t.stats() for t in self.trainers]

    def close(self):
        for t in self.trainers:
            t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def torch_alternating(models, values, backend=None, make_optimizer=None):
    """The PyTorch twin of `AlternatingTrainers`: a function running one round
    on a batch of torch tensors and returning the phases' losses, and the
    twin module (its `values()` compare with `AlternatingTrainers.parameters()`).
    `make_optimizer(params)` makes each phase's torch optimizer; `backend`:
    None runs the twin eagerly, a torch.compile backend ("inductor",
    "neoflow") compiles it (dynamic=False); `round_.module` is what the
    phases call.

    >>> round_, twin = torch_alternating(models, gan.parameters(),
    ...                                  make_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.01))
    >>> d_loss, g_loss = round_(batch)
    """
    import functools

    import torch

    from .twin import TorchTwin
    net, sizes = models[0].network, models[0].sizes
    trainable = [n for m in models for n in m.trainable]
    if models[0].phase is None:        # one loss (a network without phases)
        fns = functools.partial(net._torch_loss, **sizes)
    else:
        fns = {m.phase: functools.partial(net._torch_loss, phase=m.phase, **sizes)
               for m in models}
    twin = TorchTwin(fns, values, trainable)
    forward = twin if backend is None else torch.compile(twin, backend=backend, dynamic=False)
    tensors = twin.tensors()
    opts = [make_optimizer([tensors[n] for n in m.trainable]) for m in models]

    def round_(batch):
        losses = []
        for model, opt in zip(models, opts):
            opt.zero_grad()
            loss = forward({k: batch[k] for k in model.inputs}, model.phase)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return tuple(losses)
    round_.module = forward
    return round_, twin
