"""Train LeNet-5 on scikit-learn's digits (8x8 upsampled to 16x16) with
NeoFlow and report the test accuracy.

    python examples/lenet_digits.py [--steps 400] [--batch 32] [--lr 0.02]
"""
from data import train_digits
from models import build_lenet
from progress import arguments


def main():
    args = arguments(__doc__.splitlines()[0], steps=400, batch=32, lr=0.02)
    train_digits(build_lenet, 16, args, "lenet")


if __name__ == "__main__":
    main()
