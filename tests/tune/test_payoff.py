"""The background tuner's budget (tune/payoff.py) and the in-step verdicts
(runtime/step_tuning.StepBudget): a trial starts only where its expected
gain pays for the CPU time it takes; a candidate stays only if the step's
own timing says it won."""
import pytest

from neoflow.schedule import default_config
from neoflow.tune import payoff
from neoflow.tune.payoff import KernelPayoff, Payoff, roofline_s


def test_gain_grows_with_the_remaining_steps_and_the_distance_to_the_roofline():
    far = KernelPayoff(step_s=0.01, roofline_s=0.0005)      # at 5% of its roofline
    near = KernelPayoff(step_s=0.01, roofline_s=0.009)      # at 90%
    pay = Payoff({"far": far, "near": near}, total_steps=10_000)
    assert pay.gain_s("far", 0) > 5 * pay.gain_s("near", 0)
    assert pay.gain_s("far", 9_000) == pytest.approx(pay.gain_s("far", 0) / 10)
    assert pay.gain_s("far", 10_000) == 0


def test_a_run_of_unknown_length_is_expected_to_last_as_long_again():
    pay = Payoff({"k": KernelPayoff(step_s=0.001)})
    assert pay.remaining_steps(250) == 250
    assert pay.gain_s("k", 500) == pytest.approx(2 * pay.gain_s("k", 250))


def test_a_busy_machine_makes_trials_cost_more_than_a_free_core():
    pay = Payoff({"k": KernelPayoff(step_s=0.001)})
    assert pay.cost_s("k", busy=True) > 5 * pay.cost_s("k", busy=False)
    pay.spend("k", core_s=4.0, busy=True)
    assert pay.trial_core_s() == 4.0         # measured cost replaces the first guess


def test_next_kernel_picks_the_best_margin_and_none_when_nothing_pays():
    small = KernelPayoff(step_s=1e-6)
    big = KernelPayoff(step_s=0.02, roofline_s=0.002)
    pay = Payoff({"small": small, "big": big}, total_steps=100_000)
    assert pay.next_kernel(10, busy=True) == "big"
    assert pay.next_kernel(10, busy=True, total=20) is None   # 10 steps left pay nothing
    big.done = True
    assert pay.next_kernel(10, busy=True) is None             # 1 us a step never pays
    assert Payoff({"small": small}, total_steps=10 ** 12).next_kernel(0, True) == "small"


def test_outcomes_update_the_chance_of_a_win_and_its_size():
    k = KernelPayoff(step_s=0.01, roofline_s=0.0)
    pay = Payoff({"k": k}, total_steps=10 ** 6, max_trials=3)
    p0 = k.p_win()
    assert not pay.outcome("k", old_s=0.01, new_s=0.00995)    # 0.5%: within the noise
    assert not pay.outcome("k", old_s=3e-6, new_s=1.5e-6)     # 1.5 us: a call's jitter
    assert k.p_win() < p0
    assert pay.outcome("k", old_s=0.01, new_s=0.008)
    assert k.gains == [pytest.approx(0.2)] and k.step_s == pytest.approx(0.008)
    assert k.gain() == pytest.approx(0.2)
    pay.outcome("k", 0.01, 0.01)
    assert pay.next_kernel(0, busy=False) is None             # max_trials reached


def test_roofline():
    assert roofline_s(payoff.PEAK_FLOPS, payoff.PEAK_BYTES) == pytest.approx(2.0)


class _Options:
    steps, trials = 10 ** 9, 4


def test_the_step_budget_keeps_only_trials_that_won_in_the_step(small_kernels):
    from neoflow.runtime.step_tuning import StepBudget
    from neoflow.tune import detect
    kernels = {k.key: k for k in small_kernels}
    running = {k.key: [default_config(k)] for k in small_kernels}
    sent = []
    budget = StepBudget(kernels, {key: 1e-3 for key in kernels}, _Options(),
                        lambda: (100, running), lambda: True, None, "cpu", detect())
    budget.reply = sent.append
    reply = budget.decide()
    assert reply[0] == "tune" and reply[1] in kernels
    a, b = list(kernels)[:2]
    ca, cb = running[a][0], running[b][0]
    budget.trial(a, ca.to_json(), 1.0)
    budget.trial(b, cb.to_json(), 1.0)
    rows = [(0, a, ca, 1e-3, 0.5e-3), (1, b, cb, 1e-3, 0.999e-3), (2, "other", ca, 1.0, 2.0)]
    assert budget.judge(rows) == {0: True, 1: False}   # index 2 is no trial: not judged
    assert budget.kept == {a: ca.to_json()}
    assert [m[:2] for m in sent] == [("timing", a), ("timing", b)]
    assert budget.judge([(3, a, ca, 1e-3, 2e-3)]) == {3: True}   # the same trial, same verdict


@pytest.fixture
def small_kernels():
    import neoflow as nf
    from neoflow.graph.plan import plan_kernels
    x = nf.placeholder((8, 16), name="x")
    w = nf.placeholder((16, 12), name="w")
    k = nf.reduce_axis(16, name="k")
    h = nf.compute((8, 12), lambda i, j: nf.sum(x[i, k] * w[k, j], axis=k), name="h")
    y = nf.compute((8, 12), lambda i, j: nf.exp(h[i, j]) + 1, name="y")
    s = nf.reduce_axis(12, name="s")
    z = nf.compute((8,), lambda i: nf.max(y[i, s], axis=s), name="z")
    kernels, _ = plan_kernels([z], [x, w])
    if len({kk.key for kk in kernels}) < 2:
        kernels = kernels + plan_kernels([h], [x, w])[0]
    assert len({kk.key for kk in kernels}) >= 2
    return kernels
