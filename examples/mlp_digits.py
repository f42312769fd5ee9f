"""Train an MLP (64-128-10, relu) on scikit-learn's 8x8 digits with NeoFlow
and report the test accuracy (>= 95% with the defaults).

    python examples/mlp_digits.py [--steps 600] [--batch 64] [--lr 0.05]
"""
import numpy as np

import neoflow as nf
from data import digits, minibatches
from models import build_mlp
from progress import arguments, fit


def main():
    args = arguments(__doc__.splitlines()[0], steps=600, batch=64, lr=0.05)
    train, test = digits(image_size=None)
    net = build_mlp(args.batch)
    test_net = build_mlp(len(test["y"]))   # same parameter names: runs the trained values
    optimizer = nf.optim.SGD(lr=args.lr, momentum=0.9)
    with nf.Trainer(net.loss, optimizer=optimizer, tuning="off", seed=args.seed) as trainer:
        fit(trainer, minibatches(train, args.batch, args.seed), args.steps, "mlp")
        logits = trainer.run(test_net.output, {"x": test["x"]})
        print(f"test accuracy: {np.mean(logits.argmax(axis=1) == test['y']):.4f}  "
              f"({trainer.stats()['step_ms']:.2f} ms/step, "
              f"{trainer.stats()['kernels']} kernels/step)")


if __name__ == "__main__":
    main()
