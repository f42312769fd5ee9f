"""The synthetic-task loop shared by lltm.py and milstm.py: fresh random
sequences every step, and a report of how far the loss fell.

>>> train_sequence_model("lltm", build_lltm, lltm_batch, nf.optim.Adam(lr=1e-2), args)
"""
import numpy as np

import neoflow as nf
from progress import fit


def train_sequence_model(name, build, draw, optimizer, args, **sizes):
    """Train `build(batch, **sizes)` on batches from `draw`; print first and last losses."""
    net = build(args.batch, **sizes)
    rng = np.random.default_rng(args.seed)
    batches = iter(lambda: draw(rng, args.batch, **sizes), None)
    with nf.Trainer(net.loss, optimizer=optimizer, tuning="off", seed=args.seed) as trainer:
        losses = fit(trainer, batches, args.steps, name)
        window = max(1, min(20, len(losses) // 5))
        first, last = np.mean(losses[:window]), np.mean(losses[-window:])
        print(f"{name}: loss {losses[0]:.4f} at step 1; mean of the first {window} steps "
              f"{first:.4f} -> of the last {window} {last:.4f} ("
              f"{trainer.stats()['step_ms']:.2f} ms/step, "
              f"{trainer.stats()['kernels']} kernels/step)")
    return losses
