"""Train LeNet-5 (neoflow.zoo's) on scikit-learn's digits (8x8 upsampled to
16x16) with NeoFlow and report the test accuracy.

    python examples/lenet_digits.py [--steps 400] [--batch 32] [--lr 0.02]
"""
from data import train_digits
from progress import arguments


def main():
    args = arguments(__doc__.splitlines()[0], steps=400, batch=32, lr=0.02)
    train_digits("lenet", 16, args)


if __name__ == "__main__":
    main()
