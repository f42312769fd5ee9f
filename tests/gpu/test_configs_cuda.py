# GPU schedules are data: random valid GpuParams (drawn from the hardware
# model's kept candidates) for a matmul, a conv and a fused reduction with an
# epilogue all give nf.evaluate's result; invalid ones are ConfigErrors.
import numpy as np
import pytest

from gpu_suite import require_triton

require_triton()
import neoflow as nf  # noqa: E402
from neoflow.graph.plan import plan_kernels  # noqa: E402
from neoflow.schedule import Config, Stage, default_config  # noqa: E402
from neoflow.schedule.config import ConfigError, GpuParams  # noqa: E402
from neoflow.tune.gpu_hardware import rank_gpu_configs  # noqa: E402

rng = np.random.default_rng(0)


def _matmul():
    a, b = rng.standard_normal((9, 37)).astype(np.float32), \
        rng.standard_normal((37, 6)).astype(np.float32)
    A, B = nf.placeholder(a.shape, name="A"), nf.placeholder(b.shape, name="B")
    return nf.nn.matmul(A, B), [A, B], [a, b]


def _conv():
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    X, W = nf.placeholder(x.shape, name="x"), nf.placeholder(w.shape, name="w")
    return nf.nn.conv2d(X, W, stride=2, padding=1), [X, W], [x, w]


def _reduction_epilogue():
    x = rng.standard_normal((5, 300)).astype(np.float32)
    b = rng.standard_normal((5,)).astype(np.float32)
    X, Bv = nf.placeholder(x.shape, name="x"), nf.placeholder(b.shape, name="b")
    k = nf.reduce_axis(300, name="k")
    out = nf.compute((5,), lambda i: nf.tanh(nf.sum(X[i, k] * X[i, k], axis=k) * 0.01 + Bv[i]),
                     name="sq_tanh")
    return out, [X, Bv], [x, b]


@pytest.mark.parametrize("make", [_matmul, _conv, _reduction_epilogue])
def test_random_valid_gpu_configs_agree(make):
    out, inputs, arrays = make()
    want = nf.evaluate(out, dict(zip(inputs, arrays)))
    (kernel,), _ = plan_kernels(out, inputs)
    ranked, _ = rank_gpu_configs(kernel)
    lanes = max(int(np.prod(t.shape)) for t in kernel.stages)
    reduce = max((Stage(t).reduce_axes[-1].extent for t in kernel.stages
                  if Stage(t).reduce_axes), default=1)
    # the interpreter pays per operation and program: few programs and passes
    cheap = [c for c, _ in ranked if c.gpu.xblock * 8 >= lanes and c.gpu.rblock * 8 >= reduce]
    picks = np.random.default_rng(1).choice(len(cheap), size=4, replace=False)
    configs = [cheap[0]] + [cheap[int(n)] for n in picks]
    configs.append(Config(default_config(kernel, "cuda").stages,
                          GpuParams(xblock=16, rblock=64, num_warps=1, reduction="looped")))
    for cfg in configs:
        f = nf.build(out, inputs, target="cuda", configs=cfg)
        np.testing.assert_allclose(f(*arrays).numpy(), want, rtol=1e-4, atol=1e-5,
                                   err_msg=cfg.to_json())
        assert f.configs[0].gpu == cfg.gpu


def test_gpu_config_round_trips_json():
    out, inputs, _ = _matmul()
    (kernel,), _ = plan_kernels(out, inputs)
    cfg = default_config(kernel, "cuda")
    assert Config.from_json(cfg.to_json()) == cfg
    assert '"gpu"' in cfg.to_json() and '"gpu"' not in default_config(kernel).to_json()


@pytest.mark.parametrize("params,match", [
    (GpuParams(xblock=48), "xblock must be a power of two"),
    (GpuParams(rblock=1 << 13), "rblock must be a power of two"),
    (GpuParams(num_warps=3), "num_warps"),
    (GpuParams(reduction="split"), "reduction"),
])
def test_invalid_gpu_params_are_config_errors(params, match):
    out, inputs, arrays = _matmul()
    (kernel,), _ = plan_kernels(out, inputs)
    cfg = Config(default_config(kernel, "cuda").stages, params)
    with pytest.raises(ConfigError, match=match):
        nf.build(out, inputs, target="cuda", configs=cfg)


def test_cpu_schedule_on_cuda_is_a_config_error():
    out, inputs, _ = _matmul()
    (kernel,), _ = plan_kernels(out, inputs)
    with pytest.raises(ConfigError, match="launch knobs"):
        nf.build(out, inputs, target="cuda", configs=default_config(kernel))
    cpu = default_config(kernel)
    with pytest.raises(ConfigError, match="a GPU stage schedule"):
        nf.build(out, inputs, target="cuda", configs=Config(cpu.stages, GpuParams()))
