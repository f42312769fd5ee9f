"""Train an MLP (neoflow.zoo's, 64-128-10, relu) on scikit-learn's 8x8 digits
with NeoFlow and report the test accuracy (>= 95% with the defaults).

    python examples/mlp_digits.py [--steps 600] [--batch 64] [--lr 0.05]
"""
from data import train_digits
from progress import arguments


def main():
    args = arguments(__doc__.splitlines()[0], steps=600, batch=64, lr=0.05)
    train_digits("mlp", None, args)


if __name__ == "__main__":
    main()
