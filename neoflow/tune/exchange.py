"""tune/exchange: tuning records between machines, as JSON.

`neoflow db export` writes a database's best records (optionally each
with its trials) as a JSON list; `import` reads such files into a
database; `merge` joins files into one. Both keep, per (kernel, target,
hardware fingerprint), the fastest record, and the union of the trials
(a trial already present is not added twice), so a file imported twice
changes nothing. Records stay keyed by the fingerprint of the machine
that measured them: importing another machine's records never makes
this machine use them, unless its fingerprint is the same.

An entry (one object of the list):
    {"kernel", "target", "hardware", "config": {...}, "median_s", "flops",
     "trials", "name", "updated", "gflops" (ignored on reading),
     "trials_run": [{"config", "status", "median_s", "detail"}, ...] (optional)}

Hands on: JSON-ready lists, and counts for the CLI.
"""
import json
import math

from ..errors import NeoFlowError
from ..schedule import Config, ConfigError
from .database import Record
from .measure import STATUSES

FIELDS = ("kernel", "target", "hardware", "config", "median_s", "flops")


class ExchangeError(NeoFlowError):
    """A records file that is not what `neoflow db export` writes."""


def export_entries(db, hardware=None, trials=False):
    """The best records of `db` (of one fingerprint, if given) as entries;
    with `trials`, each carries every trial of its key.

    >>> entries = export_entries(db, trials=True)               # doctest: +SKIP
    """
    out = []
    for rec in db.records(hardware):
        entry = rec.to_dict()
        if trials:
            entry["trials_run"] = [
                {"config": json.loads(c), "status": s, "median_s": t, "detail": d}
                for c, s, t, d in db.trials(rec.kernel, rec.target, rec.hardware)]
        out.append(entry)
    return out


def dumps(entries):
    """The JSON text of a list of entries (what export writes)."""
    return json.dumps(entries, indent=2, sort_keys=True)


def load(path):
    """The checked entries of a records file.

    >>> load("records.json")[0]["kernel"]                      # doctest: +SKIP
    """
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ExchangeError(f"cannot read tuning records from {path}: {e}") from None
    return check(data, str(path))


def check(data, where="the records"):
    """`data` if it is a list of valid entries, else ExchangeError naming
    the entry and the field."""
    if not isinstance(data, list):
        raise ExchangeError(f"{where}: expected a JSON list of records (neoflow db export), "
                            f"got {type(data).__name__}")
    for n, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ExchangeError(f"{where}: record {n} is a {type(entry).__name__}, not an object")
        missing = [f for f in FIELDS if f not in entry]
        if missing:
            raise ExchangeError(f"{where}: record {n} lacks {', '.join(missing)}")
        time = entry["median_s"]
        if not isinstance(time, (int, float)) or not math.isfinite(time) or time <= 0:
            raise ExchangeError(f"{where}: record {n} has median_s={time!r}: expected a "
                                "positive number of seconds")
        _config(entry["config"], f"{where}: record {n}")
        for m, trial in enumerate(entry.get("trials_run", ())):
            if not isinstance(trial, dict) or trial.get("status") not in STATUSES:
                raise ExchangeError(f"{where}: record {n}, trial {m}: expected an object with "
                                    f"a status among {STATUSES}")
            _config(trial.get("config"), f"{where}: record {n}, trial {m}")
    return data


def _config(data, where):
    try:
        return Config.from_dict(data)
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ExchangeError(f"{where}: the config is not a NeoFlow schedule ({e})") from None


def _key(entry):
    return entry["kernel"], entry["target"], entry["hardware"]


def _trial_key(trial):
    return (json.dumps(trial["config"], sort_keys=True), trial["status"], trial.get("median_s"),
            trial.get("detail", ""))


def merge(*lists):
    """One list of entries from several: per key the fastest record, with
    the union of the trials.

    >>> len(merge(load("a.json"), load("b.json")))             # doctest: +SKIP
    """
    best, trials = {}, {}
    for entries in lists:
        for entry in entries:
            key = _key(entry)
            if key not in best or entry["median_s"] < best[key]["median_s"]:
                best[key] = {k: v for k, v in entry.items() if k != "trials_run"}
            seen = trials.setdefault(key, {})
            for trial in entry.get("trials_run", ()):
                seen.setdefault(_trial_key(trial), trial)
    out = []
    for key, entry in best.items():
        if trials[key]:
            entry["trials_run"] = list(trials[key].values())
            entry["trials"] = max(entry.get("trials", 0), len(entry["trials_run"]))
        out.append(entry)
    return sorted(out, key=_key)


def import_entries(db, entries):
    """Add `entries` to `db`: each is kept where it is faster than the
    stored record of its key; trials not already there are added. Returns
    (records, kept as best, trials added).

    >>> import_entries(db, load("records.json"))              # doctest: +SKIP
    (3, 2, 40)
    """
    kept = added = 0
    for entry in entries:
        kernel, target, hardware = _key(entry)
        have = {_trial_key({"config": json.loads(c), "status": s, "median_s": t, "detail": d})
                for c, s, t, d in db.trials(kernel, target, hardware)}
        new = [t for t in entry.get("trials_run", ()) if _trial_key(t) not in have]
        db.add_trials(kernel, target, hardware,
                      [(Config.from_dict(t["config"]), t["status"], t.get("median_s"),
                        t.get("detail", "")) for t in new])
        added += len(new)
        record = Record(kernel, target, hardware, Config.from_dict(entry["config"]),
                        float(entry["median_s"]), int(entry["flops"]),
                        int(entry.get("trials", 0)), entry.get("name", ""))
        before = db.best(kernel, target, hardware)
        after = db.offer(record)
        kept += before is None or after.median_s < before.median_s
    return len(entries), kept, added
