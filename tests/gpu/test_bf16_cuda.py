# bf16 mixed precision (precision="bf16", torch.autocast's policy): which
# values are rounded to bf16 (contraction operands only, to nearest even),
# what stays fp32 (parameters, optimizer state, exp/log/softmax/losses,
# accumulators), and parity with torch.autocast(bfloat16) training on CPU.
import re

import numpy as np
import pytest

from gpu_suite import require_triton

require_triton()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import neoflow as nf  # noqa: E402
from neoflow.codegen.triton.printer import PRELUDE  # noqa: E402
from neoflow.runtime.cuda import CudaBackend, load_module  # noqa: E402

ROUND_KERNEL = PRELUDE + '''

@triton.jit
def round_bf16(x, y, n, B: tl.constexpr):
    o = tl.arange(0, B)
    m = o < n
    tl.store(y + o, _nf_bf16(tl.load(x + o, mask=m, other=0)), mask=m)
'''


def test_rounding_is_round_to_nearest_even_like_torch():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32)
    bits[:64] = (bits[:64] & 0xFFFF0000) | 0x8000          # exact ties
    bits[64:128] = (bits[64:128] & 0xFFFF0000) | 0x7FFF
    x = bits.view(np.float32)
    x = np.concatenate([x, np.float32([np.inf, -np.inf, 0.0, -0.0, 3.3895314e38])])
    x = x[np.isfinite(x) | np.isinf(x)]
    xt = torch.from_numpy(x.copy())
    y = torch.empty_like(xt)
    load_module(ROUND_KERNEL).round_bf16[(1,)](xt, y, len(x), B=8192)
    want = xt.to(torch.bfloat16).float()
    finite = torch.isfinite(want)
    assert torch.equal(y[finite], want[finite])
    assert torch.equal(torch.isinf(y), torch.isinf(want))


def _mm_and_softmax(precision):
    A = nf.placeholder((9, 40), name="A")
    B = nf.placeholder((40, 7), name="B")
    outs = [nf.nn.matmul(A, B), nf.nn.softmax(A, 1)]
    return CudaBackend(precision=precision).function(outs, [A, B])


def test_contractions_read_bf16_and_accumulate_fp32_the_rest_stays_fp32():
    rng = np.random.default_rng(1)
    a = torch.from_numpy(rng.standard_normal((9, 40)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((40, 7)).astype(np.float32))
    f16, f32 = _mm_and_softmax("bf16"), _mm_and_softmax("fp32")
    mm, sm = f16(a, b)
    mm32, sm32 = f32(a, b)
    emulated = a.bfloat16().double() @ b.bfloat16().double()   # bf16 operands, wide sums
    assert mm.dtype == torch.float32                            # fp32 accumulator and output
    torch.testing.assert_close(mm.double(), emulated, rtol=1e-6, atol=1e-5)
    assert (mm - mm32).abs().max() > 1e-3                       # the operands were rounded
    assert torch.equal(sm, sm32)                                # softmax untouched
    rounded = re.findall(r"_nf_bf16\(tl\.load", f16.source)
    assert len(rounded) == 2 and "_nf_bf16(tl.load" not in f32.source
    for line in f16.source.splitlines():                        # no bf16 value feeds exp/log
        if "tl.exp(" in line or "tl.log(" in line:
            assert "_nf_bf16" not in line


def _mlp(batch=8, n_in=33, hidden=17, classes=5):
    x = nf.placeholder((batch, n_in), name="x")
    y = nf.placeholder((batch,), "int64", name="y")
    w1 = nf.parameter((hidden, n_in), name="w1")
    b1 = nf.parameter((hidden,), init="zeros", name="b1")
    w2 = nf.parameter((classes, hidden), name="w2")
    h = nf.nn.relu(nf.nn.dense(x, w1, b1))
    return nf.nn.cross_entropy(nf.nn.dense(h, w2), y), x, y


def test_bf16_training_matches_torch_autocast():
    loss, x, y = _mlp()
    rng = np.random.default_rng(2)
    batches = [(rng.standard_normal((8, 33)).astype(np.float32), rng.integers(0, 5, 8))
               for _ in range(5)]

    def run(precision):
        with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), target="cuda", seed=4,
                        precision=precision) as tr:
            start = tr.parameters()
            ex = tr._executor
            for p in tr.graph.params:              # master weights stay fp32
                assert ex.buffer(p).dtype == torch.float32
            return start, [tr.step({x: xb, y: yb}) for xb, yb in batches]

    start, ours = run("bf16")
    _, fp32 = run("fp32")
    w1 = torch.tensor(start["w1"], requires_grad=True)
    b1 = torch.tensor(start["b1"], requires_grad=True)
    w2 = torch.tensor(start["w2"], requires_grad=True)
    opt = torch.optim.SGD([w1, b1, w2], lr=0.1)
    theirs = []
    for xb, yb in batches:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.relu(F.linear(torch.from_numpy(xb), w1, b1))
            out = F.cross_entropy(F.linear(h, w2), torch.from_numpy(yb))
        out.backward()
        opt.step()
        theirs.append(out.item())
    np.testing.assert_allclose(ours, theirs, rtol=2e-2)
    assert max(abs(a - b) for a, b in zip(ours, fp32)) > 1e-6   # bf16 made a difference
