"""Train an LLTM sequence model (neoflow.zoo's, written with custom
tensor-expression operators) to predict the mean of a sequence's first feature.

    python examples/lltm.py [--steps 300] [--batch 32] [--lr 0.01]
"""
import neoflow as nf
from progress import arguments
from sequence import lltm_task, train_sequence_model


def main():
    args = arguments(__doc__.splitlines()[0], steps=300, batch=32, lr=0.01)
    train_sequence_model("lltm", lltm_task, nf.optim.Adam(lr=args.lr), args,
                         steps=8, n_in=4, state=16, n_out=1)


if __name__ == "__main__":
    main()
