"""Train LeNet-5 on scikit-learn's digits (8x8 upsampled to 16x16) with
NeoFlow and report the test accuracy.

    python examples/lenet_digits.py [--steps 400] [--batch 32] [--lr 0.02]
"""
import numpy as np

import neoflow as nf
from data import digits, minibatches
from models import build_lenet
from progress import arguments, fit


def main():
    args = arguments(__doc__.splitlines()[0], steps=400, batch=32, lr=0.02)
    train, test = digits(image_size=16)
    net = build_lenet(args.batch)
    test_net = build_lenet(len(test["y"]))
    optimizer = nf.optim.SGD(lr=args.lr, momentum=0.9)
    with nf.Trainer(net.loss, optimizer=optimizer, tuning="off", seed=args.seed) as trainer:
        fit(trainer, minibatches(train, args.batch, args.seed), args.steps, "lenet")
        logits = trainer.run(test_net.output, {"x": test["x"]})
        print(f"test accuracy: {np.mean(logits.argmax(axis=1) == test['y']):.4f}  "
              f"({trainer.stats()['step_ms']:.2f} ms/step, "
              f"{trainer.stats()['kernels']} kernels/step)")


if __name__ == "__main__":
    main()
