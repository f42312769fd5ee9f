"""The tuner's proposals (pruned and unpruned samples, mutations) for conv3d
and conv_transpose2d compute what the reference evaluator computes (the
method of test_space_property.py)."""
import neoflow as nf
from neoflow.te.visit import topo_tensors
from test_space_property import check, randn


def test_conv3d_tuner_proposals():
    x, w = nf.placeholder((2, 3, 5, 6, 7), name="x"), nf.placeholder((8, 3, 3, 3, 3), name="w")
    check(lambda: [nf.nn.conv3d(x, w, stride=(1, 2, 2), padding=1)], [x, w],
          [randn(2, 3, 5, 6, 7), randn(8, 3, 3, 3, 3)], seed=31)


def test_conv_transpose2d_tuner_proposals():
    """Strided, it is three stages: the weight by phase, the phases and
    their gather (nn/polyphase.py), one kernel as the partition fuses them."""
    x, w = nf.placeholder((2, 6, 5, 7), name="x"), nf.placeholder((6, 4, 4, 4), name="w")

    def stages():
        y = nf.nn.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)
        order = [t for t in topo_tensors([y]) if t.is_compute]
        assert [t.name for t in order] == ["w_phases", "dconv_transpose2d_phases",
                                           "conv_transpose2d"]
        return order
    check(stages, [x, w], [randn(2, 6, 5, 7), randn(6, 4, 4, 4)], seed=32)
