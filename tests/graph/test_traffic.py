"""graph/traffic: bytes a kernel reads and writes (inputs and outputs once,
kernel-local stages free), summed over a step; nf.explain reports the same."""
import neoflow as nf
from neoflow.graph import fuse, kernels_of
from neoflow.graph.kernel import Kernel, kernels_for
from neoflow.graph.traffic import kernel_bytes, step_bytes


def chain():
    A = nf.placeholder((4, 3), name="A")
    B = nf.compute((4, 3), lambda i, j: A[i, j] * 2, name="B")
    C = nf.compute((4, 3), lambda i, j: nf.exp(B[i, j]) + A[i, j], name="C")
    return A, B, C


def test_kernel_bytes_counts_inputs_and_outputs_once():
    A, B, C = chain()
    assert kernel_bytes(Kernel([B])) == 2 * 48                 # A read, B written
    assert kernel_bytes(Kernel([C])) == 3 * 48                 # A, B read, C written
    assert kernel_bytes(Kernel([B, C], outputs=[C])) == 2 * 48  # B stays local
    assert kernel_bytes(Kernel([B, C], outputs=[B, C])) == 3 * 48


def test_step_bytes_sums_kernels_and_fusion_moves_less():
    A, B, C = chain()
    unfused = kernels_for([C])
    assert step_bytes(unfused) == 5 * 48
    fused = kernels_of(fuse([C]), True)
    assert len(fused) == 1 and step_bytes(fused) == 2 * 48
    assert step_bytes([]) == 0


def test_explain_total_is_step_bytes():
    x = nf.placeholder((8, 5), name="x")
    w = nf.parameter((5,), name="w")
    h = nf.compute((8, 5), lambda i, j: nf.tanh(x[i, j] * w[j]), name="h")
    loss = nf.nn.sum(h)
    with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), backend="reference") as tr:
        total = [line for line in nf.explain(tr).splitlines() if line.startswith("total:")]
        assert f", {step_bytes(tr.kernels)} bytes moved" in total[0]
