"""Train an MI-LSTM (multiplicative-integration LSTM; neoflow.zoo's, written
with custom tensor-expression operators) to classify the sign of the sum of
a sequence's first feature.

    python examples/milstm.py [--steps 300] [--batch 32] [--lr 0.01]
"""
import neoflow as nf
from progress import arguments
from sequence import milstm_task, train_sequence_model


def main():
    args = arguments(__doc__.splitlines()[0], steps=300, batch=32, lr=0.01)
    train_sequence_model("milstm", milstm_task, nf.optim.Adam(lr=args.lr), args,
                         steps=8, n_in=4, hidden=16, classes=2)


if __name__ == "__main__":
    main()
