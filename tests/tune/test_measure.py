"""Measurement in worker processes: a candidate that crashes, hangs or
computes a wrong result is recorded and dropped; the tuner goes on."""
from neoflow.schedule import default_config, sample_config
from neoflow.tune import tune_kernel
from neoflow.tune.measure import Measurer

ENTRY = "int64_t nf_main(void* const* args, int64_t* err) {"
FAULTS = {
    "crash": lambda src: src.replace(ENTRY, "#include <signal.h>\n" + ENTRY + " raise(SIGSEGV);"),
    "hang": lambda src: src.replace(ENTRY, ENTRY + " for (volatile int z = 0; ; ++z) {}"),
    "wrong": lambda src: src.replace("return err[0];",
                                     "((float*)args[2])[5] += 1.0f; return err[0];"),
}


def faulty(plan):
    """A source hook injecting plan[config JSON] ("crash", "hang", "wrong")."""
    def hook(config, source):
        fault = plan.get(config.to_json())
        return FAULTS[fault](source) if fault else source
    return hook


def test_faults_are_recorded_and_survived(small_kernel):
    good = [sample_config(small_kernel, s) for s in range(40)]
    good = list({c.to_json(): c for c in good}.values())[:4]
    plan = {good[0].to_json(): "crash", good[1].to_json(): "hang", good[2].to_json(): "wrong"}
    with Measurer(small_kernel, timeout=2.0, repeats=3, min_time=0.01,
                  source_hook=faulty(plan)) as m:
        results = m.measure(good + [default_config(small_kernel)])
    status = [r.status for r in results]
    assert status == ["crash", "timeout", "wrong", "ok", "ok"], [(r.status, r.detail)
                                                                 for r in results]
    assert "SIGSEGV" in results[0].detail
    assert "differ" in results[2].detail
    assert results[3].median_s > 0


def test_tuner_survives_a_crashing_candidate(small_kernel, db):
    """Every proposed candidate but the default crashes: the tuner records
    them and returns the default schedule."""
    default = default_config(small_kernel).to_json()

    def crash_all(config, source):
        return source if config.to_json() == default else FAULTS["crash"](source)
    rec = tune_kernel(small_kernel, db=db, trials=4, timeout=5.0, source_hook=crash_all)
    assert rec.config.to_json() == default
    statuses = sorted(s for _, s, _, _ in db.trials(small_kernel.key, "cpu", rec.hardware))
    assert statuses == ["crash", "crash", "crash", "ok"]


def busy(n):
    """A source rewrite: `n` empty loop turns before the kernel runs."""
    return lambda src: src.replace(ENTRY, ENTRY + f" for (volatile int z = 0; z < {n}; ++z) {{}}")


def test_a_lucky_best_must_beat_the_default_again(small_kernel, db):
    """During the search the default schedule measures very slow (once) and
    every candidate a little slow: a candidate wins the search, loses the
    head-to-head confirmation, and the database keeps the default."""
    default = default_config(small_kernel).to_json()
    default_builds = []

    def hook(config, source):
        if config.to_json() == default:
            default_builds.append(1)
            return busy(3_000_000)(source) if len(default_builds) == 1 else source
        return busy(300_000)(source)
    rec = tune_kernel(small_kernel, db=db, trials=4, timeout=5.0, source_hook=hook)
    assert rec.config.to_json() == default
    assert db.best(small_kernel.key, "cpu", rec.hardware).config.to_json() == default
    assert len(default_builds) > 1, "no confirmation was measured"


def test_a_real_gain_is_confirmed(small_kernel, db):
    """The default schedule is always very slow: the search's best is kept."""
    default = default_config(small_kernel).to_json()

    def hook(config, source):
        return busy(3_000_000)(source) if config.to_json() == default else source
    rec = tune_kernel(small_kernel, db=db, trials=4, timeout=5.0, source_hook=hook)
    assert rec.config.to_json() != default
    assert db.best(small_kernel.key, "cpu", rec.hardware).config.to_json() != default
