"""The training loop of the examples: steps a trainer over batches with a
tqdm progress bar showing the loss and steps/s.

>>> losses = fit(trainer, batches, steps=100, desc="mlp")
"""
import argparse

from tqdm import tqdm


def fit(trainer, batches, steps, desc):
    """Run `steps` trainer steps on batches from the iterator `batches`; returns the losses."""
    losses = []
    with tqdm(total=steps, desc=desc, unit="step") as bar:
        for _ in range(steps):
            losses.append(trainer.step(next(batches)))
            bar.update()
            if len(losses) % 10 == 0 or len(losses) == steps:
                bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.4f}")
    return losses


def arguments(description, steps, batch, lr):
    """Parse the examples' common options: --steps, --batch, --lr, --seed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps, help="training steps")
    parser.add_argument("--batch", type=int, default=batch, help="batch size")
    parser.add_argument("--lr", type=float, default=lr, help="learning rate")
    parser.add_argument("--seed", type=int, default=0, help="parameter and data seed")
    return parser.parse_args()
