"""Train an MI-LSTM (multiplicative-integration LSTM) sequence model,
written with custom tensor-expression operators, to classify the sign of
the sum of a sequence's first feature.

    python examples/milstm.py [--steps 300] [--batch 32] [--lr 0.01]
"""
import neoflow as nf
from models import build_milstm, milstm_batch
from progress import arguments
from sequence import train_sequence_model


def main():
    args = arguments(__doc__.splitlines()[0], steps=300, batch=32, lr=0.01)
    train_sequence_model("milstm", build_milstm, milstm_batch, nf.optim.Adam(lr=args.lr), args,
                         steps=8, n_in=4)


if __name__ == "__main__":
    main()
