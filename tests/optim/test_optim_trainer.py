"""Every optimizer, gradient clipping and every learning-rate schedule
through nf.Trainer against torch.optim in float64: 20 steps of a small
two-layer network (four parameters), parameters to 1e-6; a schedule never
recompiles; bad arguments raise NeoFlowError."""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.errors import NeoFlowError

B, D, H, O = 5, 7, 6, 3
STEPS = 20
NAMES = ("w1", "b1", "w2", "b2")


def _data(seed=0):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal((H, D)) * 0.5, rng.standard_normal(H) * 0.1,
            rng.standard_normal((O, H)) * 0.5, rng.standard_normal(O) * 0.1]
    batches = [(rng.standard_normal((B, D)), rng.standard_normal((B, O))) for _ in range(STEPS)]
    return init, batches


def _network(init):
    x = nf.placeholder((B, D), "float64", name="x")
    y = nf.placeholder((B, O), "float64", name="y")
    w1, b1, w2, b2 = (nf.parameter(a.shape, init=a, dtype="float64", name=n)
                      for a, n in zip(init, NAMES))
    h = nf.nn.tanh(nf.nn.dense(x, w1, b1))
    return x, y, nf.nn.mse_loss(nf.nn.dense(h, w2, b2), y)


def compare(nf_opt, torch_opt, clip=None, schedule=None, seed=0):
    """Max parameter difference after STEPS steps, and torch's gradient norms."""
    init, batches = _data(seed)
    x, y, loss = _network(init)
    params = [torch.tensor(a, requires_grad=True) for a in init]
    opt = torch_opt(params)
    sched = schedule(opt) if schedule else None
    norms = []
    with nf.Trainer(loss, nf_opt) as trainer:
        for xb, yb in batches:
            ours = trainer.step({x: xb, y: yb})
            opt.zero_grad()
            h = torch.tanh(torch.tensor(xb) @ params[0].T + params[1])
            theirs = torch.nn.functional.mse_loss(h @ params[2].T + params[3], torch.tensor(yb))
            theirs.backward()
            assert ours == pytest.approx(theirs.item(), rel=1e-9, abs=1e-12)
            if clip is not None:
                norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip)))
            opt.step()
            if sched is not None:
                sched.step()
        got = trainer.parameters()
    err = max(np.abs(got[n] - p.detach().numpy()).max() for n, p in zip(NAMES, params))
    return err, norms


OPTIMIZERS = [
    ("sgd", lambda **k: nf.optim.SGD(0.1, **k), lambda ps: torch.optim.SGD(ps, 0.1)),
    ("sgd momentum wd", lambda **k: nf.optim.SGD(0.05, momentum=0.9, weight_decay=0.01, **k),
     lambda ps: torch.optim.SGD(ps, 0.05, momentum=0.9, weight_decay=0.01)),
    ("sgd nesterov", lambda **k: nf.optim.SGD(0.05, momentum=0.8, nesterov=True, **k),
     lambda ps: torch.optim.SGD(ps, 0.05, momentum=0.8, nesterov=True)),
    ("adam", lambda **k: nf.optim.Adam(0.02, betas=(0.8, 0.99), weight_decay=0.01, **k),
     lambda ps: torch.optim.Adam(ps, 0.02, betas=(0.8, 0.99), weight_decay=0.01)),
    ("adamw", lambda **k: nf.optim.AdamW(0.02, **k), lambda ps: torch.optim.AdamW(ps, 0.02)),
    ("adamw options", lambda **k: nf.optim.AdamW(0.01, betas=(0.5, 0.9), eps=1e-6,
                                                 weight_decay=0.3, **k),
     lambda ps: torch.optim.AdamW(ps, 0.01, betas=(0.5, 0.9), eps=1e-6, weight_decay=0.3)),
    ("rmsprop", lambda **k: nf.optim.RMSprop(0.01, **k), lambda ps: torch.optim.RMSprop(ps, 0.01)),
    ("rmsprop centered", lambda **k: nf.optim.RMSprop(0.01, alpha=0.9, centered=True, **k),
     lambda ps: torch.optim.RMSprop(ps, 0.01, alpha=0.9, centered=True)),
    ("rmsprop momentum wd", lambda **k: nf.optim.RMSprop(0.005, momentum=0.7, weight_decay=0.1,
                                                         eps=1e-4, **k),
     lambda ps: torch.optim.RMSprop(ps, 0.005, momentum=0.7, weight_decay=0.1, eps=1e-4)),
    ("rmsprop centered momentum", lambda **k: nf.optim.RMSprop(0.005, momentum=0.5,
                                                               centered=True, **k),
     lambda ps: torch.optim.RMSprop(ps, 0.005, momentum=0.5, centered=True)),
]


@pytest.mark.parametrize("name,ours,theirs", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_matches_torch(name, ours, theirs):
    err, _ = compare(ours(), theirs)
    assert err < 1e-6


@pytest.mark.parametrize("max_norm,active", [(0.05, True), (1e3, False)])
@pytest.mark.parametrize("which", [0, 4, 7], ids=["sgd", "adamw", "rmsprop"])
def test_clip_grad_norm_matches_torch(which, max_norm, active):
    _, ours, theirs = OPTIMIZERS[which]
    err, norms = compare(ours(clip_grad_norm=max_norm), theirs, clip=max_norm)
    assert err < 1e-6
    clipped = [n > max_norm for n in norms]
    assert all(clipped) if active else not any(clipped)   # the case the test means


SCHEDULES = [
    ("step", lambda: nf.optim.StepLR(step_size=3, gamma=0.5),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    ("cosine", lambda: nf.optim.CosineAnnealingLR(T_max=8, eta_min=0.001),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=8, eta_min=0.001)),
    ("linear warm-up", lambda: nf.optim.LinearLR(start_factor=0.1, total_iters=6),
     lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=6)),
    ("linear default", lambda: nf.optim.LinearLR(),
     lambda o: torch.optim.lr_scheduler.LinearLR(o)),
    ("one-cycle", lambda: nf.optim.OneCycleLR(max_lr=0.05, total_steps=STEPS),
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=STEPS,
                                                   cycle_momentum=False)),
    ("one-cycle three-phase linear",
     lambda: nf.optim.OneCycleLR(max_lr=0.05, total_steps=STEPS, pct_start=0.25,
                                 anneal_strategy="linear", div_factor=10.0,
                                 final_div_factor=100.0, three_phase=True),
     lambda o: torch.optim.lr_scheduler.OneCycleLR(
         o, max_lr=0.05, total_steps=STEPS, pct_start=0.25, anneal_strategy="linear",
         div_factor=10.0, final_div_factor=100.0, three_phase=True, cycle_momentum=False)),
]


@pytest.mark.parametrize("name,ours,theirs", SCHEDULES, ids=[s[0] for s in SCHEDULES])
@pytest.mark.parametrize("which", [1, 4], ids=["sgd", "adamw"])
def test_schedule_matches_torch(which, name, ours, theirs):
    _, make_ours, make_theirs = OPTIMIZERS[which]
    err, _ = compare(make_ours(lr_schedule=ours()), make_theirs, schedule=theirs)
    assert err < 1e-6


def test_schedule_rates_match_torch_over_many_steps():
    """The rate of every step (no training): 60 steps, past T_max and warm-up ends."""
    cases = [(nf.optim.StepLR(7, 0.3), lambda o: torch.optim.lr_scheduler.StepLR(o, 7, 0.3)),
             (nf.optim.CosineAnnealingLR(13), lambda o: torch.optim.lr_scheduler.
              CosineAnnealingLR(o, 13)),
             (nf.optim.LinearLR(0.25, 0.75, 9), lambda o: torch.optim.lr_scheduler.
              LinearLR(o, 0.25, 0.75, 9)),
             (nf.optim.OneCycleLR(0.3, 59), lambda o: torch.optim.lr_scheduler.
              OneCycleLR(o, 0.3, total_steps=59, cycle_momentum=False))]
    for ours, theirs in cases:
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.2)
        sched = theirs(opt)
        for step in range(1, 61):
            assert ours.lr(0.2, step) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12,
                                                       abs=1e-15), (ours, step)
            opt.step()
            if step < 60:
                sched.step()


def test_schedule_and_clip_never_recompile(monkeypatch):
    """The rate and the clip scale change per step through fed scalars: no
    compile after construction, the same kernels every step."""
    import neoflow.runtime.native as native
    import neoflow.toolchain as toolchain
    init, batches = _data()
    x, y, loss = _network(init)
    opt = nf.optim.AdamW(0.02, clip_grad_norm=0.1,
                         lr_schedule=nf.optim.OneCycleLR(max_lr=0.05, total_steps=STEPS))
    with nf.Trainer(loss, opt) as trainer:
        kernels = trainer.stats()["kernels"]
        compiled = []
        for module in (native, toolchain):
            monkeypatch.setattr(module, "compile_c", lambda *a, **k: compiled.append(a))
        rates = set()
        for step, (xb, yb) in enumerate(batches, 1):
            trainer.step({x: xb, y: yb})
            rates.add(opt.scalar_values(step)["step_size"])
        assert not compiled and trainer.stats()["kernels"] == kernels
        assert len(rates) == STEPS       # the schedule did change the fed scalar every step


@pytest.mark.parametrize("make,message", [
    (lambda: nf.optim.AdamW(-1.0), "lr"),
    (lambda: nf.optim.AdamW(0.1, betas=(0.9,)), "betas"),
    (lambda: nf.optim.AdamW(0.1, betas=(1.0, 0.9)), "betas"),
    (lambda: nf.optim.AdamW(0.1, weight_decay=-0.1), "weight_decay"),
    (lambda: nf.optim.RMSprop(0.1, alpha=1.5), "alpha"),
    (lambda: nf.optim.RMSprop(0.1, momentum=-1), "momentum"),
    (lambda: nf.optim.RMSprop(0.1, eps="x"), "eps"),
    (lambda: nf.optim.SGD(0.1, clip_grad_norm=0.0), "clip_grad_norm"),
    (lambda: nf.optim.Adam(0.1, clip_grad_norm=-2), "clip_grad_norm"),
    (lambda: nf.optim.SGD(0.1, lr_schedule="cosine"), "lr_schedule"),
    (lambda: nf.optim.StepLR(0), "step_size"),
    (lambda: nf.optim.StepLR(2, gamma=-1), "gamma"),
    (lambda: nf.optim.CosineAnnealingLR(2.5), "T_max"),
    (lambda: nf.optim.LinearLR(start_factor=0.0), "start_factor"),
    (lambda: nf.optim.LinearLR(total_iters=0), "total_iters"),
    (lambda: nf.optim.OneCycleLR(0.1, 10, anneal_strategy="exp"), "anneal_strategy"),
    (lambda: nf.optim.OneCycleLR(0.1, 0), "total_steps"),
    (lambda: nf.optim.OneCycleLR(0.1, 10, pct_start=1.5), "pct_start"),
    (lambda: nf.optim.OneCycleLR(0.1, 10, pct_start=0.1), "phase of no steps"),
])
def test_bad_arguments_raise(make, message):
    with pytest.raises(NeoFlowError, match=message):
        make()


def test_one_cycle_past_its_steps_raises():
    s = nf.optim.OneCycleLR(0.1, total_steps=4)
    assert s.lr(0.0, 5) > 0               # torch allows total_steps + 1 steps
    with pytest.raises(NeoFlowError, match="past"):
        s.lr(0.0, 6)
