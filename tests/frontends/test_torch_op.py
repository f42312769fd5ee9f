"""nf.torch.op: tensor-expression functions as torch custom operators --
opcheck (several shapes, non-contiguous inputs), gradcheck and gradgradcheck
in float64, agreement with nf.evaluate, nn.Module training under
torch.compile(fullgraph=True) with eager's losses, grad modes, threads and
bad-input errors."""
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neoflow as nf  # noqa: E402
from neoflow.errors import NeoFlowError  # noqa: E402


@nf.torch.op("nftest::soft_max_plus")
def soft_max_plus(x, w):
    k = nf.reduce_axis(x.shape[1], name="k")
    return nf.compute((x.shape[0], w.shape[1]),
                      lambda i, j: nf.log(nf.sum(nf.exp(x[i, k] + w[k, j]), axis=k)), name="smp")


@nf.torch.op("nftest::scaled_gate", outputs=2)
def scaled_gate(x, g, alpha: float = 0.5, square: bool = False):
    y = nf.compute(x.shape, lambda i, j: x[i, j] * nf.sigmoid(g[i, j]) * alpha, name="gate")
    z = nf.compute(x.shape, lambda i, j: y[i, j] * y[i, j] if square else nf.tanh(y[i, j]),
                   name="act")
    return y, z


def _smp_reference(x, w):
    return torch.logsumexp(x[:, :, None] + w[None], dim=1)


def _rand(*shape, dtype=torch.float64, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(grad)


@pytest.mark.parametrize("shape", [(3, 4, 5), (1, 7, 2), (6, 1, 3)])
def test_opcheck_several_shapes(shape):
    m, k, n = shape
    torch.library.opcheck(soft_max_plus, (_rand(m, k, grad=True), _rand(k, n, grad=True)))


def test_opcheck_non_contiguous_and_scalars():
    x = _rand(5, 3, grad=True).detach().t().requires_grad_()     # (3, 5), not contiguous
    w = _rand(6, 5).t()[:5, ::2].contiguous().t().t()            # odd strides
    assert not x.is_contiguous()
    torch.library.opcheck(soft_max_plus, (x, w.contiguous().requires_grad_()))
    a = _rand(4, 3, grad=True)
    torch.library.opcheck(scaled_gate, (a, _rand(3, 4, grad=True).t(), 1.5, True))
    np.testing.assert_allclose(soft_max_plus(x, w).detach().numpy(),
                               _smp_reference(x, w).detach().numpy(), rtol=1e-12)


def test_gradcheck_and_double_backward_float64():
    x, w = _rand(3, 4, grad=True), _rand(4, 5, grad=True)
    assert torch.autograd.gradcheck(soft_max_plus, (x, w))
    assert torch.autograd.gradgradcheck(soft_max_plus, (x, w))
    a, g = _rand(2, 3, grad=True), _rand(2, 3, grad=True)
    assert torch.autograd.gradcheck(lambda a, g: scaled_gate(a, g, 0.7, False), (a, g))
    assert torch.autograd.gradcheck(lambda a, g: scaled_gate(a, g, 0.7, True)[1], (a, g))


def test_matches_torch_and_nf_evaluate():
    x, w = _rand(4, 6, grad=True), _rand(6, 3, grad=True)
    y = soft_max_plus(x, w)
    xp = nf.placeholder((4, 6), "float64", name="x")
    wp = nf.placeholder((6, 3), "float64", name="w")
    k = nf.reduce_axis(6, name="k")
    ref = nf.compute((4, 3), lambda i, j: nf.log(nf.sum(nf.exp(xp[i, k] + wp[k, j]), axis=k)))
    np.testing.assert_allclose(y.detach().numpy(),
                               nf.evaluate(ref, {xp: x.detach().numpy(), wp: w.detach().numpy()}),
                               rtol=1e-12)
    gy = _rand(4, 3, seed=5)
    y.backward(gy)
    xt, wt = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    _smp_reference(xt, wt).backward(gy)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-10)


def test_results_are_torch_tensors_and_inputs_zero_copy():
    x, w = _rand(3, 4, dtype=torch.float32), _rand(4, 2, dtype=torch.float32)
    before = x.clone()
    y = soft_max_plus(x, w)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (3, 2)
    assert torch.equal(x, before)
    assert torch.ops.nftest.soft_max_plus(x, w).shape == (3, 2)


def test_no_grad_and_inference_mode():
    x, w = _rand(3, 4, grad=True), _rand(4, 2, grad=True)
    with torch.no_grad():
        y = soft_max_plus(x, w)
    assert not y.requires_grad
    with torch.inference_mode():
        z = soft_max_plus(x, w)
    assert z.is_inference()
    np.testing.assert_allclose(y.numpy(), z.numpy())


def test_threads_agree():
    xs = [_rand(5, 4, seed=s) for s in range(8)]
    w = _rand(4, 3)
    want = [_smp_reference(x, w) for x in xs]
    got = [None] * len(xs)

    def run(n):
        for _ in range(5):
            got[n] = soft_max_plus(xs[n], w)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, r in zip(got, want):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-12)


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.lin = torch.nn.Linear(5, 6)
        self.w = torch.nn.Parameter(torch.randn(6, 3, generator=g) * 0.3)

    def forward(self, x):
        return soft_max_plus(torch.tanh(self.lin(x)), self.w)


def test_module_trains_under_compile_fullgraph_with_eager_losses():
    torch.manual_seed(0)
    eager, compiled = _Model(), _Model()
    compiled.load_state_dict(eager.state_dict())
    step = torch.compile(compiled, fullgraph=True, backend="aot_eager")
    x, y = torch.randn(8, 5), torch.randn(8, 3)
    losses = []
    for model, fn in ((eager, eager), (compiled, step)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        run = []
        for _ in range(5):
            loss = torch.nn.functional.mse_loss(fn(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    assert losses[0][-1] < losses[0][0]


def test_compile_has_no_graph_break():
    explanation = torch._dynamo.explain(_Model())(torch.randn(4, 5))
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


@pytest.mark.parametrize("make, what", [
    (lambda: (_rand(3, 4).to(torch.float16), _rand(4, 2)), "'x'"),
    (lambda: (_rand(3, 4), _rand(4, 2).to(torch.bfloat16)), "'w'"),
    (lambda: (_rand(3, 4, 1), _rand(4, 2)), "x"),
    (lambda: (_rand(3, 4), _rand(3, 2)), "'w'"),
    (lambda: (_rand(3, 4).to("meta"), _rand(4, 2)), "'x'"),
])
def test_bad_inputs_raise_neoflow_errors(make, what):
    x, w = make()
    with pytest.raises(NeoFlowError) as err:
        soft_max_plus(x, w)
    assert "nftest::soft_max_plus" in str(err.value) and what in str(err.value)


def test_bad_declarations():
    with pytest.raises(NeoFlowError, match="namespace::opname"):
        nf.torch.op("no_namespace")
    with pytest.raises(NeoFlowError, match="annotated"):
        @nf.torch.op("nftest::bad_annotation")
        def bad(x, n: str):
            return x
    with pytest.raises(NeoFlowError, match="must return 2"):
        @nf.torch.op("nftest::wrong_count", outputs=2)
        def wrong(x):
            return nf.compute(x.shape, lambda i: x[i])
        wrong(torch.ones(3))


@nf.torch.op("nftest::count_and_scale", outputs=2)
def count_and_scale(x, alpha: float = 3.0):
    n = nf.reduce_axis(x.shape[0], name="n")
    pos = nf.compute((1,), lambda i: nf.sum(nf.cast(x[n] > 0.0, "int64"), axis=n), name="pos")
    return pos, nf.compute(x.shape, lambda i: x[i] * alpha, name="scaled")


def test_eager_calls_skip_the_dispatcher_and_agree_with_it():
    x = _rand(7, dtype=torch.float64, grad=True)
    seen = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    pos, y = count_and_scale(x)                       # eager: no registered op runs
    with Record():
        pos_r, y_r = count_and_scale(x)               # a dispatch mode: the registered op
    assert "nftest.count_and_scale.default" in seen
    assert torch.equal(pos, pos_r) and torch.equal(y.detach(), y_r.detach())
    assert pos.dtype == torch.int64 and not pos.requires_grad and y.requires_grad
    assert type(y.grad_fn).__name__ == "_AutogradBackward"      # neoflow's own Function
    assert type(y_r.grad_fn).__name__ != "_AutogradBackward"    # torch.library's
    assert int(pos) == int((x > 0).sum())
    (y * torch.arange(7.0, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * np.arange(7.0))
    # keyword and default arguments: the same values either way
    a, b = count_and_scale(x.detach(), alpha=0.5), count_and_scale(x.detach(), 0.5)
    assert torch.equal(a[1], b[1]) and torch.equal(a[1], x.detach() * 0.5)
    assert torch.autograd.gradcheck(lambda t: count_and_scale(t, 0.25)[1], (x,))


def test_eager_fast_path_checks_new_shapes_and_dtypes():
    x, w = _rand(3, 4), _rand(4, 2)
    soft_max_plus(x, w)                                # cached for these shapes
    with pytest.raises(NeoFlowError, match="'w'"):
        soft_max_plus(x, _rand(3, 2))                  # a new key: checked
    with pytest.raises(NeoFlowError, match="'x'"):
        soft_max_plus(x.to(torch.float16), w)
    p = torch.nn.Parameter(_rand(3, 4))               # a Parameter is a plain tensor here
    np.testing.assert_allclose(soft_max_plus(p, w).detach().numpy(),
                               _smp_reference(x, w).numpy(), rtol=1e-12)
