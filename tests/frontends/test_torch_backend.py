"""torch.compile(backend="neoflow"): the zoo's PyTorch twins and stock
torch.nn modules train through the backend with eager's losses and
gradients (float32, 1e-4 relative); batch-norm running statistics follow
eager; an op without a lowering falls back and stays correct; options are
checked; the entry point registers "neoflow" in a fresh process; importing
neoflow does not import torch."""
import copy
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import neoflow as nf  # noqa: E402
from neoflow import zoo  # noqa: E402
from neoflow.errors import NeoFlowError  # noqa: E402
from neoflow.runtime.init import initial_value  # noqa: E402

STEPS = 10


def _compile(model, backend, **options):
    return torch.compile(model, backend=backend, options=options or None, dynamic=False,
                         fullgraph=True)


def _assert_grads_close(eager_params, our_params, what):
    """1e-4 relative; near-zero entries (e.g. a bias that a norm cancels, whose
    exact gradient is 0) are compared against the scale of all gradients."""
    scale = max(float(p.grad.abs().max()) for p in eager_params if p.grad is not None)
    for n, (a, b) in enumerate(zip(eager_params, our_params)):
        if a.grad is None:
            assert b.grad is None, f"{what}: parameter {n} has a gradient only through NeoFlow"
            continue
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-4,
                                   atol=1e-5 * scale + 1e-7, err_msg=f"{what}: parameter {n}")


def _train_pair(eager, ours, batches, loss_of, lr=0.05):
    """Train `eager` and `ours` (compiled) side by side with SGD; compare
    every step's loss and gradients."""
    opt_e = torch.optim.SGD(eager.parameters(), lr=lr, momentum=0.9)
    opt_o = torch.optim.SGD(ours.parameters(), lr=lr, momentum=0.9)
    compiled = ours.compiled
    for step, batch in enumerate(batches):
        le = loss_of(eager, batch)
        opt_e.zero_grad()
        le.backward()
        lo = loss_of(compiled, batch)
        opt_o.zero_grad()
        lo.backward()
        assert lo.item() == pytest.approx(le.item(), rel=1e-4), f"step {step}"
        _assert_grads_close(list(eager.parameters()), list(ours.parameters()), f"step {step}")
        opt_e.step()
        opt_o.step()


ZOO = ["lenet", "lltm", "milstm", "scrnn", "transformer"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_zoo_twin_trains_like_eager(name, nf_backend):
    model = zoo.get(name).build("small", dtype="float32")
    values = {k: initial_value(p, seed=1) for k, p in model.params.items()}
    eager, ours = model.torch_model(values), model.torch_model(values)
    ours.__dict__["compiled"] = _compile(ours, nf_backend)    # not a submodule
    rng = np.random.default_rng(0)
    batches = [{k: torch.from_numpy(v) for k, v in model.make_batch(rng).items()}
               for _ in range(STEPS)]
    torch._dynamo.utils.counters.clear()
    _train_pair(eager, ours, batches, lambda m, b: m(b))
    assert not torch._dynamo.utils.counters["graph_break"]
    rep = nf.torch.report(ours.compiled)
    assert {g["kind"] for g in rep.values()} == {"forward", "backward"}
    for g in rep.values():                       # every op of the twins lowers
        assert not g["fallback"], f"{name}: {g['fallback']} fell back"
        assert g["native_share"] == 1.0 and g["kernels"] > 0


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(9, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 12), torch.nn.Tanh(),
                                       torch.nn.Linear(12, 5))

    def forward(self, x):
        return self.net(x)


class _ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1),
                                        torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                        torch.nn.MaxPool2d(2))
        self.head = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.head(self.body(x).flatten(1))


class _Cell(torch.nn.Module):
    """A recurrent cell unrolled over the sequence, then a linear head."""

    def __init__(self, cell):
        super().__init__()
        self.cell, self.head = cell, torch.nn.Linear(6, 5)

    def forward(self, x):
        state = None
        for t in range(x.shape[1]):
            state = self.cell(x[:, t], state)
        h = state[0] if isinstance(state, tuple) else state
        return self.head(h)


class _Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


STOCK = {
    "mlp": (_MLP, (7, 9)),
    "conv_bn_relu": (_ConvBN, (4, 3, 6, 6)),
    "gru_cell": (lambda: _Cell(torch.nn.GRUCell(4, 6)), (5, 3, 4)),
    "lstm_cell": (lambda: _Cell(torch.nn.LSTMCell(4, 6)), (5, 3, 4)),
    "transformer_encoder_layer": (_Encoder, (3, 4, 8)),
}


@pytest.fixture(scope="module")
def stock_runs(nf_backend):
    """Per stock module: (eager, ours) after STEPS training steps compared step
    by step (each module compiled once, shared by the tests below)."""
    runs = {}

    def run(name):
        if name not in runs:
            make, shape = STOCK[name]
            torch.manual_seed(0)
            eager = make()
            ours = copy.deepcopy(eager)
            ours.__dict__["compiled"] = _compile(ours, nf_backend)    # not a submodule
            g = torch.Generator().manual_seed(1)
            batches = [(torch.randn(*shape, generator=g),
                        torch.randint(0, 5, (shape[0],), generator=g)) for _ in range(STEPS)]
            _train_pair(eager, ours, batches, lambda m, b: F.cross_entropy(m(b[0]), b[1]))
            runs[name] = (eager, ours)
        return runs[name]
    return run


@pytest.mark.parametrize("name", sorted(STOCK))
def test_stock_modules_train_like_eager(name, stock_runs):
    eager, ours = stock_runs(name)
    for (bn, be), (_, bo) in zip(eager.named_buffers(), ours.named_buffers()):
        np.testing.assert_allclose(bo.numpy(), be.numpy(), rtol=1e-4, atol=1e-6, err_msg=bn)
    rep = nf.torch.report(ours.compiled)
    assert rep and all(g["kernels"] > 0 for g in rep.values())


def test_mlp_and_conv_run_entirely_in_neoflow(stock_runs):
    for name in ("mlp", "conv_bn_relu"):
        _, ours = stock_runs(name)
        for g in nf.torch.report(ours.compiled).values():
            assert not g["fallback"], f"{name}: {g['fallback']}"
            assert g["native_share"] == 1.0


def test_batch_norm_running_stats_and_inference(stock_runs):
    eager, ours = stock_runs("conv_bn_relu")
    bn_e, bn_o = eager.body[1], ours.body[1]
    assert int(bn_o.num_batches_tracked) == STEPS
    np.testing.assert_allclose(bn_o.running_mean.numpy(), bn_e.running_mean.numpy(), rtol=1e-4,
                               atol=1e-6)
    np.testing.assert_allclose(bn_o.running_var.numpy(), bn_e.running_var.numpy(), rtol=1e-4)
    eager.eval(), ours.eval()
    x = torch.randn(4, 3, 6, 6, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        want, got = eager(x), ours.compiled(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    with torch.inference_mode():
        got = ours.compiled(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


class _Unsupported(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 4)

    def forward(self, x):
        h = self.lin(x)
        return torch.lgamma(h * h + 1).sort(dim=1).values[:, 0].sum() + h.sum()


def test_unsupported_op_falls_back_and_stays_correct(nf_backend):
    torch.manual_seed(0)
    eager = _Unsupported()
    ours = copy.deepcopy(eager)
    compiled = _compile(ours, nf_backend)
    x = torch.randn(5, 6)
    le, lo = eager(x), compiled(x)
    le.backward(), lo.backward()
    assert lo.item() == pytest.approx(le.item(), rel=1e-5)
    _assert_grads_close(list(eager.parameters()), list(ours.parameters()), "fallback")
    rep = nf.torch.report(compiled)
    fw = next(g for g in rep.values() if g["kind"] == "forward")
    assert "aten.lgamma.default" in fw["fallback"] and "aten.sort.default" in fw["fallback"]
    assert "aten.addmm.default" in fw["native"]
    assert 0 < fw["native_share"] < 1
    text = str(rep)
    assert "fell back: aten.lgamma.default" in text and "FLOPs native" in text


def test_fallback_error_lists_what_did_not_lower(nf_backend):
    compiled = _compile(_Unsupported(), nf_backend, fallback="error")
    with pytest.raises(Exception) as err:
        compiled(torch.randn(5, 6))
    assert "aten.lgamma.default" in str(err.value) and "fallback='error'" in str(err.value)


def test_bad_options_are_neoflow_errors(nf_backend):
    for options, word in (({"tuning": "sometimes"}, "tuning"), ({"fallback": "maybe"}, "fallback"),
                          ({"speed": 1}, "unknown")):
        with pytest.raises(Exception) as err:
            _compile(_MLP(), nf_backend, **options)(torch.randn(2, 9))
        assert word in str(err.value)
    with pytest.raises(NeoFlowError, match="tuning"):
        nf.torch.backend(None, [], options={"tuning": "sometimes"})


def test_new_batch_size_recompiles(nf_backend):
    model = _MLP()
    compiled = _compile(model, nf_backend)
    for batch in (3, 5):
        x = torch.randn(batch, 9)
        np.testing.assert_allclose(compiled(x).detach().numpy(), model(x).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)


def _fresh(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_list_backends_shows_neoflow_in_a_fresh_process(entry_point_installed):
    if not entry_point_installed:
        pytest.skip("neoflow is not pip-installed with its torch_dynamo_backends entry point "
                    "(pip install -e .)")
    done = _fresh("import sys, torch._dynamo as d; print('neoflow' in d.list_backends()); "
                  "print('neoflow' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]    # found without importing neoflow


def test_importing_neoflow_does_not_import_torch():
    done = _fresh("import sys, neoflow as nf; print('torch' in sys.modules); "
                  "nf.torch; print('torch' in sys.modules, nf.torch.op is not None)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]


@pytest.mark.slow
def test_tuning_ahead_and_background_stay_correct(nf_backend, tmp_path):
    model = _MLP()
    x = torch.randn(4, 9)
    for mode in ("ahead", "background"):
        torch._dynamo.reset()
        compiled = _compile(model, nf_backend, tuning=mode, trials=2,
                            database=str(tmp_path / "tuning.sqlite"))
        with torch.no_grad():
            np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-5,
                                       atol=1e-6)


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2, foreach=True),
    lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True)], ids=["sgd", "adam"])
def test_compiled_optimizer_step_foreach_ops(make_opt, nf_backend):
    torch.manual_seed(0)
    eager = torch.nn.Linear(5, 3)
    ours = copy.deepcopy(eager)
    opt_e, opt_o = make_opt(eager.parameters()), make_opt(ours.parameters())
    step = torch.compile(opt_o.step, backend=nf_backend)
    x = torch.randn(6, 5)
    torch._dynamo.reset()
    for _ in range(4):
        for model, opt, fn in ((eager, opt_e, opt_e.step), (ours, opt_o, step)):
            opt.zero_grad()
            model(x).square().mean().backward()
            fn()
    for a, b in zip(eager.parameters(), ours.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-6)
    graphs = nf.torch.report(ours).values()
    native = {op for g in graphs for op in g["native"]}
    assert any(op.startswith("aten._foreach_") for op in native)
    assert not [g["fallback"] for g in graphs if g["fallback"]]


def test_symbolic_shapes_fall_back_and_stay_correct(nf_backend):
    model = _MLP()
    compiled = torch.compile(model, backend=nf_backend, dynamic=True)
    for batch in (3, 6):
        x = torch.randn(batch, 9)
        np.testing.assert_allclose(compiled(x).detach().numpy(), model(x).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
