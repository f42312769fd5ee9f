"""The synthetic tasks and the loop shared by lltm.py and milstm.py: a zoo
network trained on fresh random sequences every step, and a report of how
far the loss fell.

    lltm_task    regress the mean of a sequence's first feature
    milstm_task  classify the sign of the sum of a sequence's first feature

>>> train_sequence_model("lltm", lltm_task, nf.optim.Adam(lr=1e-2), args, steps=8, n_in=4)
"""
import numpy as np

import neoflow as nf
from neoflow import zoo
from progress import fit


def lltm_task(rng, batch, steps, n_in, **_):
    """{"x": (batch, steps, n_in) normal, "y": (batch, 1) mean of feature 0 over time}."""
    x = rng.standard_normal((batch, steps, n_in)).astype(np.float32)
    return {"x": x, "y": x[:, :, :1].mean(axis=1)}


def milstm_task(rng, batch, steps, n_in, **_):
    """{"x": (batch, steps, n_in) normal, "y": 1 where feature 0 sums above 0, else 0}."""
    x = rng.standard_normal((batch, steps, n_in)).astype(np.float32)
    return {"x": x, "y": (x[:, :, 0].sum(axis=1) > 0).astype(np.int64)}


def train_sequence_model(name, task, optimizer, args, **sizes):
    """Train the zoo network `name` (its `sizes`, batch `args.batch`) on
    batches from `task`; print the first and last losses."""
    model = zoo.get(name).build(batch=args.batch, **sizes)
    rng = np.random.default_rng(args.seed)
    batches = iter(lambda: task(rng, **model.sizes), None)
    with nf.Trainer(model.loss, optimizer=optimizer, tuning="off", seed=args.seed) as trainer:
        losses = fit(trainer, batches, args.steps, name)
        window = max(1, min(20, len(losses) // 5))
        first, last = np.mean(losses[:window]), np.mean(losses[-window:])
        print(f"{name}: loss {losses[0]:.4f} at step 1; mean of the first {window} steps "
              f"{first:.4f} -> of the last {window} {last:.4f} ("
              f"{trainer.stats()['step_ms']:.2f} ms/step, "
              f"{trainer.stats()['kernels']} kernels/step)")
    return losses
