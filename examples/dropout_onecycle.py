"""Train an MLP with dropout (64-256-10) on scikit-learn's 8x8 digits with
AdamW, a one-cycle learning-rate schedule and gradient clipping; report the
test accuracy (dropout off for the test copy; >= 95% with the defaults).

    python examples/dropout_onecycle.py [--steps 400] [--batch 64] [--lr 0.01]

The dropout mask is drawn afresh each step from the Trainer's seed (the same
--seed gives the same run); the rate changes each step without recompiling.
"""
import numpy as np

import neoflow as nf
from data import digits, minibatches
from progress import arguments, fit


def network(batch, training):
    """(x, y, logits, loss) of the MLP; parameters named so a copy shares them."""
    x = nf.placeholder((batch, 64), name="x")
    y = nf.placeholder((batch,), dtype="int64", name="y")
    w1 = nf.parameter((256, 64), init="kaiming", name="fc1.weight")
    b1 = nf.parameter((256,), init="zeros", name="fc1.bias")
    w2 = nf.parameter((10, 256), init="xavier", name="fc2.weight")
    hidden = nf.nn.dropout(nf.nn.relu(nf.nn.dense(x, w1, b1)), p=0.3, training=training)
    logits = nf.nn.dense(hidden, w2)
    return x, y, logits, nf.nn.cross_entropy(logits, y)


def main():
    args = arguments(__doc__.splitlines()[0], steps=400, batch=64, lr=0.01)
    train, test = digits()
    *_, loss = network(args.batch, training=True)
    _, _, test_logits, _ = network(len(test["y"]), training=False)
    schedule = nf.optim.OneCycleLR(max_lr=args.lr, total_steps=args.steps)
    optimizer = nf.optim.AdamW(lr=args.lr, weight_decay=0.01, clip_grad_norm=1.0,
                               lr_schedule=schedule)
    with nf.Trainer(loss, optimizer, seed=args.seed) as trainer:
        fit(trainer, minibatches(train, args.batch, args.seed), args.steps, "dropout mlp")
        logits = trainer.run(test_logits, {"x": test["x"]})
        print(f"test accuracy: {np.mean(logits.argmax(axis=1) == test['y']):.4f}  "
              f"({trainer.stats()['step_ms']:.2f} ms/step, "
              f"{trainer.stats()['kernels']} kernels/step)")


if __name__ == "__main__":
    main()
