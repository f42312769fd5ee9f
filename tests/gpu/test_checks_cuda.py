# Static checks of generated Triton kernels, the hardware model, and what
# target="cuda" says when triton or a GPU is missing.
import re
import sys

import numpy as np
import pytest

from gpu_suite import require_triton

require_triton()
import torch  # noqa: E402

import neoflow as nf  # noqa: E402
from neoflow.codegen.triton import check_triton, generate_triton  # noqa: E402
from neoflow.codegen.triton.check import KernelCheckError  # noqa: E402
from neoflow.codegen.triton.printer import TritonProgram  # noqa: E402
from neoflow.graph.plan import plan_kernels  # noqa: E402
from neoflow.schedule import Config, default_config  # noqa: E402
from neoflow.schedule.config import ConfigError, GpuParams, validate_gpu  # noqa: E402
from neoflow.tune.gpu_hardware import H200, detect_gpu, prune_report, rank_gpu_configs  # noqa

LOAD_STORE = re.compile(r"tl\.(load|store)\(")


def _ops():
    A = nf.placeholder((7, 33), name="A")
    B = nf.placeholder((33, 5), name="B")
    idx = nf.placeholder((4,), "int64", name="idx")
    x = nf.placeholder((2, 3, 7, 7), name="x")
    w = nf.placeholder((4, 3, 3, 3), name="w")
    return [(nf.nn.matmul(A, B), [A, B]), (nf.nn.softmax(A, 1), [A]),
            (nf.compute((4, 33), lambda i, j: A[idx[i], j], name="rows"), [A, idx]),
            (nf.nn.conv2d(x, w, padding=1), [x, w]),
            (nf.nn.max_pool2d(x, 3, stride=2, padding=1), [x])]


@pytest.mark.parametrize("n", range(5))
def test_every_access_is_masked_and_blocks_are_powers_of_two(n):
    out, inputs = _ops()[n]
    f = nf.build(out, inputs, target="cuda")
    calls = LOAD_STORE.findall(f.source)
    assert calls
    for line in f.source.splitlines():
        if LOAD_STORE.search(line):
            assert "mask=" in line, line
    for launch in f.launches:
        assert all(v & (v - 1) == 0 for v in launch.blocks.values()), launch
    assert "tl.dot" not in f.source


def test_gather_is_checked_in_the_kernel():
    out, inputs = _ops()[2]
    f = nf.build(out, inputs, target="cuda")
    assert "tl.store(err" in f.source
    a = np.random.default_rng(0).standard_normal((7, 33)).astype(np.float32)
    np.testing.assert_array_equal(f(a, np.array([6, 0, 3, 3])).numpy(), a[[6, 0, 3, 3]])
    with pytest.raises(nf.errors.OutOfBoundsError, match="reads tensor 'A' at index -1 in dimension 0"):
        f(a, np.array([1, -1, 2, 0]))


def test_checker_rejects_an_unmasked_access():
    out, inputs = _ops()[0]
    f = nf.build(out, inputs, target="cuda")
    bad = re.sub(r", mask=m\d+, other=0\)", ")", f.source, count=1)
    assert bad != f.source
    with pytest.raises(KernelCheckError, match="without a mask"):
        check_triton(TritonProgram(bad, f.launches))
    with pytest.raises(KernelCheckError, match="tl.dot"):
        check_triton(TritonProgram(f.source + "\nx = tl.dot(a, b)\n", f.launches))


def test_checker_limits_shared_memory_and_register_tiles():
    out, inputs = _ops()[1]
    (kernel,), _ = plan_kernels(out, inputs)
    from neoflow.schedule import lower_program
    cfg = Config(default_config(kernel, "cuda").stages, GpuParams(xblock=8, rblock=64,
                                                                   num_warps=32))
    program = lower_program([kernel], [cfg], inputs, [out])
    tp = generate_triton(program, [cfg.gpu])
    est = check_triton(tp)
    smem = max(e["smem"] for e in est.values())
    assert smem > 0
    with pytest.raises(ConfigError, match="shared memory"):
        check_triton(tp, smem_per_block=smem - 1)
    X = nf.placeholder((64, 300), name="X")
    wide = nf.nn.softmax(X, 1)
    (kernel,), _ = plan_kernels(wide, [X])
    big = Config(default_config(kernel, "cuda").stages, GpuParams(xblock=64, rblock=512,
                                                                   num_warps=1))
    tp = generate_triton(lower_program([kernel], [big], [X], [wide]), [big.gpu])
    with pytest.raises(ConfigError, match="register tile"):
        check_triton(tp)


def test_hardware_model_prunes_and_ranks():
    assert detect_gpu() == H200 if not torch.cuda.is_available() else detect_gpu().sm_count > 0
    M = nf.placeholder((512, 256), name="M")
    N = nf.placeholder((256, 384), name="N")
    (kernel,), _ = plan_kernels(nf.nn.matmul(M, N), [M, N])
    report = prune_report(kernel, top=16)
    assert report["space"] >= report["candidates"] > report["valid"] > 0
    assert report["rejected"] == sum(report["rejected_by"].values()) > 0
    assert set(report["rejected_by"]) <= {"threads per block", "register tile", "shared memory",
                                          "registers", "occupancy"}
    assert report["pruned_share"] > 0.9
    ranked, _ = rank_gpu_configs(kernel)
    times = [s for _, s in ranked]
    assert times == sorted(times) and times[0] > 0
    validate_gpu(ranked[0][0], kernel)
    from neoflow.tune.gpu_hardware import estimate
    fits = estimate(kernel, GpuParams(xblock=32, rblock=256, num_warps=8), H200)
    spills = estimate(kernel, GpuParams(xblock=512, rblock=256, num_warps=8), H200)
    assert fits[1] is None and 0 < fits[0] < float("inf")
    assert spills == (float("inf"), "register tile")


def test_missing_gpu_without_interpreter(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: target='cuda' runs natively")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    out, inputs = _ops()[0]
    with pytest.raises(nf.NeoFlowError, match="needs an NVIDIA GPU.*TRITON_INTERPRET=1"):
        nf.build(out, inputs, target="cuda")


def test_missing_triton(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    out, inputs = _ops()[0]
    with pytest.raises(nf.NeoFlowError, match=r"neoflow\[gpu\]"):
        nf.build(out, inputs, target="cuda")


def test_unknown_target():
    out, inputs = _ops()[0]
    with pytest.raises(nf.NeoFlowError, match="expected one of"):
        nf.build(out, inputs, target="rocm")


def test_inputs_on_the_device_and_wrong_inputs():
    out, inputs = _ops()[0]
    f = nf.build(out, inputs, target="cuda")
    a, b = torch.randn(7, 33), torch.randn(33, 5)
    y = f(a, b)
    assert isinstance(y, torch.Tensor) and y.device == a.device
    torch.testing.assert_close(y, a @ b, rtol=1e-4, atol=1e-5)
    with pytest.raises(nf.errors.InputError, match="input 'B': expected shape"):
        f(a, torch.randn(5, 33))
    with pytest.raises(nf.errors.InputError, match="input 'A': expected dtype float32"):
        f(a.double(), b)


def test_tune_on_cuda_records_under_the_gpu_fingerprint(tmp_path):
    from neoflow.tune.database import Database
    A = nf.placeholder((8, 20), name="A")
    B = nf.placeholder((20, 4), name="B")
    C = nf.nn.matmul(A, B)
    db = Database(tmp_path / "t.sqlite")
    rec = nf.tune(C, [A, B], target="cuda", trials=3, database=db, progress=False)
    assert rec.target == "cuda" and rec.hardware == detect_gpu().fingerprint
    assert rec.trials == 3 and rec.median_s > 0 and rec.config.gpu is not None
    f = nf.build(C, [A, B], target="cuda", database=db)
    assert f.configs[0] == rec.config
    a, b = torch.randn(8, 20), torch.randn(20, 4)
    torch.testing.assert_close(f(a, b), a @ b, rtol=1e-4, atol=1e-5)
