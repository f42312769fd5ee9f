# The gradient suite (tests/autodiff/test_grad_ops.py: operators and
# hand-written expressions against torch.autograd in float64 and float32)
# with its native build on target="cuda": forward and gradient kernels as
# Triton, run in the interpreter, against nf.evaluate (which the suite
# checks against torch).
import pytest

from gpu_suite import calling, cuda_build, load_tests, require_triton

require_triton()
import neoflow as nf  # noqa: E402

grads = load_tests("autodiff/test_grad_ops.py", "nf_cpu_grad_suite")
check = load_tests("autodiff/grad_check.py", "grad_check")


@pytest.fixture(autouse=True)
def _on_cuda(monkeypatch):
    assert check.HAS_BUILD
    monkeypatch.setattr(nf, "build", cuda_build)


globals().update(calling(grads, "check_torch"))
