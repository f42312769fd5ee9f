"""`neoflow db export | import | merge`: records move between databases as
JSON, the fastest per (kernel, target, hardware) is kept, trials are
unioned without duplicates, and bad files are refused with the entry named."""
import json
import subprocess
import sys

import pytest

from neoflow.schedule import default_config, sample_config
from neoflow.tune import Database, Record
from neoflow.tune.exchange import ExchangeError, check, export_entries, import_entries, merge


def fill(db, kernel, hardware, times, seed=0):
    """Trials with `times` (seconds) under `hardware`; the fastest as best."""
    configs = [default_config(kernel)] + [sample_config(kernel, seed + s) for s in range(8)]
    configs = list({c.to_json(): c for c in configs}.values())[:len(times)]
    db.add_trials(kernel.key, "cpu", hardware,
                  [(c, "ok", t, "") for c, t in zip(configs, times)] + [(configs[-1], "crash",
                                                                         None, "SIGSEGV")])
    t, c = min(zip(times, configs), key=lambda p: p[0])
    db.offer(Record(kernel.key, "cpu", hardware, c, t, 1000, 0, "C"))
    return configs


def neoflow(*args):
    return subprocess.run([sys.executable, "-m", "neoflow.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_export_import_round_trip_keeps_the_best_and_every_trial(small_kernel, tmp_path):
    with Database(tmp_path / "a.sqlite") as a:
        fill(a, small_kernel, "hw-one", [0.3, 0.2, 0.4])
        fill(a, small_kernel, "hw-two", [0.05, 0.07], seed=20)
        entries = export_entries(a, trials=True)
    text = json.dumps(entries)
    with Database(tmp_path / "b.sqlite") as b:
        fill(b, small_kernel, "hw-one", [0.25, 0.1], seed=40)      # b already has a faster one
        assert import_entries(b, json.loads(text)) == (2, 1, 3 + 1 + 2 + 1)
        assert import_entries(b, json.loads(text)) == (2, 0, 0)    # twice: nothing new
        one = b.best(small_kernel.key, "cpu", "hw-one")
        two = b.best(small_kernel.key, "cpu", "hw-two")
        assert one.median_s == 0.1 and two.median_s == 0.05
        assert len(b.trials(small_kernel.key, "cpu", "hw-one")) == 3 + 2 + 1 + 1
        assert {s for _, s, _, _ in b.trials(small_kernel.key, "cpu", "hw-one")} == {"ok",
                                                                                   "crash"}
        [exported_two] = [e for e in entries if e["hardware"] == "hw-two"]
        assert two.config.to_dict() == exported_two["config"]


def test_merge_keeps_the_fastest_per_key_and_unions_trials(small_kernel, tmp_path):
    with Database(tmp_path / "a.sqlite") as a, Database(tmp_path / "b.sqlite") as b:
        fill(a, small_kernel, "hw", [0.3, 0.2])
        fill(b, small_kernel, "hw", [0.15, 0.5], seed=30)
        fill(b, small_kernel, "other", [0.9])
        ea, eb = export_entries(a, trials=True), export_entries(b, trials=True)
    merged = merge(ea, eb)
    assert [(e["hardware"], e["median_s"]) for e in merged] == [("hw", 0.15), ("other", 0.9)]
    hw = merged[0]
    runs = [t for e in ea + eb if e["hardware"] == "hw" for t in e["trials_run"]]
    distinct = {json.dumps(t, sort_keys=True) for t in runs}
    assert len(runs) == 6 and len(hw["trials_run"]) == len(distinct)
    assert merge(merged, merged) == merged                      # idempotent
    check(merged)


def test_cli_export_import_merge(small_kernel, tmp_path):
    a, b, c = (str(tmp_path / f"{n}.sqlite") for n in "abc")
    with Database(a) as db:
        fill(db, small_kernel, "hw-x", [0.4, 0.3])
    with Database(b) as db:
        fill(db, small_kernel, "hw-x", [0.2], seed=50)
        fill(db, small_kernel, "hw-y", [0.6], seed=60)
    fa, fb, fm = (str(tmp_path / f"{n}.json") for n in ("a", "b", "m"))
    for db, out in ((a, fa), (b, fb)):
        done = neoflow("db", "export", "--all-hardware", "--trials", "--database", db, "-o", out)
        assert done.returncode == 0, done.stderr
    done = neoflow("db", "merge", fa, fb, "-o", fm)
    assert done.returncode == 0, done.stderr
    assert [(e["hardware"], e["median_s"]) for e in json.load(open(fm))] == [("hw-x", 0.2),
                                                                            ("hw-y", 0.6)]
    done = neoflow("db", "import", fa, fb, "--database", c)
    assert done.returncode == 0, done.stderr
    assert "2 record(s)" in done.stdout
    with Database(c) as db:
        assert db.best(small_kernel.key, "cpu", "hw-x").median_s == 0.2
        assert db.best(small_kernel.key, "cpu", "hw-y").median_s == 0.6
        assert len(db.trials(small_kernel.key, "cpu", "hw-x")) == 3 + 2


@pytest.mark.parametrize("bad, why", [
    ({"kernel": "k"}, "expected a JSON list"),
    ([{"kernel": "k", "target": "cpu", "hardware": "h", "config": {}, "median_s": 1.0}],
     "record 0 lacks flops"),
    ([{"kernel": "k", "target": "cpu", "hardware": "h", "config": {}, "median_s": -1.0,
       "flops": 1}], "median_s=-1.0"),
    ([{"kernel": "k", "target": "cpu", "hardware": "h", "config": {"nonsense": 1},
       "median_s": 1.0, "flops": 1}], "not a NeoFlow schedule"),
])
def test_bad_files_are_refused_naming_the_entry(tmp_path, bad, why):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ExchangeError, match=why):
        check(bad)
    done = neoflow("db", "import", str(path), "--database", str(tmp_path / "t.sqlite"))
    assert done.returncode == 2 and why.split("=")[0] in done.stderr
