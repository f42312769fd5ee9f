# nf.Trainer on target="cuda": the zoo's novel cells (small presets; LeNet's
# convolutions and pools too, marked slow) train 5 SGD steps with the CPU
# backend's losses and parameters; the step's
# buffers are device tensors planned once; feeds may be device tensors.
import os

import numpy as np
import pytest

from gpu_suite import require_triton

require_triton()
import torch  # noqa: E402

import neoflow as nf  # noqa: E402
from neoflow import zoo  # noqa: E402

NOVEL = ["lltm", "milstm", "scrnn", "sublstm"]


def _train(model, batches, target, feed=lambda b: b):
    with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.05, momentum=0.9), tuning="off",
                    seed=3, target=target) as trainer:
        losses = [trainer.step(feed(b)) for b in batches]
        ex = trainer._executor
        buffers = [ex.arena] + list(ex.views.values())
        return losses, trainer.parameters(), buffers


@pytest.mark.parametrize("name", NOVEL + [pytest.param("lenet", marks=pytest.mark.slow)])
def test_novel_cell_trains_like_the_cpu_backend(name):
    model = zoo.get(name).build("small")
    rng = np.random.default_rng(2)
    batches = [model.make_batch(rng) for _ in range(5)]
    cpu_losses, cpu_params, _ = _train(model, batches, "cpu")
    losses, params, buffers = _train(model, batches, "cuda",
                                     lambda b: {k: torch.from_numpy(v) for k, v in b.items()})
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-4)
    for key, value in cpu_params.items():
        np.testing.assert_allclose(params[key], value, rtol=1e-4, atol=1e-5, err_msg=key)
    device = "cpu" if os.environ["TRITON_INTERPRET"] == "1" else "cuda"
    assert all(isinstance(b, torch.Tensor) and b.device.type == device for b in buffers)


def test_run_on_cuda_returns_device_tensors():
    model = zoo.get("lltm").build("small")
    batch = model.make_batch(np.random.default_rng(0))
    with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.1), target="cuda") as trainer:
        (loss,) = trainer.run([model.loss], batch)
        assert isinstance(loss, torch.Tensor)
        assert float(loss) == pytest.approx(trainer.step(batch), rel=1e-6)


def test_run_on_cuda_groups_its_computes_as_build_does():
    """Trainer.run's function (CudaBackend.function) groups the fused graph's
    computes into multi-stage kernels, as the CPU backend and nf.build do."""
    model = zoo.get("lltm").build("small")
    batch = model.make_batch(np.random.default_rng(0))
    kernels, losses = {}, {}
    for target in ("cpu", "cuda"):
        with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.1), tuning="off",
                        target=target) as trainer:
            (loss,) = trainer.run([model.loss], batch)
            kernels[target] = [[s.name for s in k.stages]
                               for _, function, _, _ in trainer._forward.values()
                               for k in function.kernels]
            losses[target] = float(loss)
    assert kernels["cuda"] == kernels["cpu"]
    assert any(len(stages) > 1 for stages in kernels["cuda"]), kernels["cuda"]
    assert losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-5)


def test_bf16_on_cpu_and_unknown_precision_are_errors():
    model = zoo.get("lltm").build("small")
    with pytest.raises(nf.NeoFlowError, match="bf16.*needs target='cuda'"):
        nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.1), precision="bf16")
    with pytest.raises(nf.NeoFlowError, match="precision='fp16'"):
        nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.1), target="cuda", precision="fp16")
