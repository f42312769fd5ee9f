"""The tuning database: concurrent writers, reopening, the schema version,
a corrupt file, JSON export."""
import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from neoflow.schedule import default_config
from neoflow.tune import Database, DatabaseError, DatabaseWarning, Record
from neoflow.tune.database import SCHEMA_VERSION, as_json

WRITER = textwrap.dedent("""
    import sys
    from neoflow.schedule import Config
    from neoflow.tune import Database, Record
    path, tag, config = sys.argv[1], sys.argv[2], Config.from_json(sys.argv[3])
    db = Database(path)
    for n in range(40):
        t = 1.0 + n / 100 if tag == "a" else 0.5 + n / 100
        db.add_trials("k", "cpu", "hw", [(config, "ok", t, tag)])
        db.offer(Record("k", "cpu", "hw", config, t, 1000, 0, tag))
    db.close()
""")


def record(config, seconds, kernel="k"):
    return Record(kernel, "cpu", "hw", config, seconds, 1000, 0, "test")


def test_two_processes_write_at_once(tmp_path, small_kernel):
    path = tmp_path / "shared.sqlite"
    config = default_config(small_kernel).to_json()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag, config])
             for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with Database(path) as db:
        trials = db.trials("k", "cpu", "hw")
        assert len(trials) == 80
        assert sorted({t[3] for t in trials}) == ["a", "b"]
        best = db.best("k", "cpu", "hw")
        assert best.median_s == 0.5 and best.name == "b" and best.trials == 80


def test_reopen_keeps_records_and_only_faster_replaces(tmp_path, small_kernel):
    path = tmp_path / "t.sqlite"
    config = default_config(small_kernel)
    with Database(path) as db:
        db.offer(record(config, 0.2))
        assert db.offer(record(config, 0.3)).median_s == 0.2
    with Database(path) as db:
        assert db.schema_version == SCHEMA_VERSION
        rec = db.best("k", "cpu", "hw")
        assert rec.config == config and rec.median_s == 0.2
        assert db.offer(record(config, 0.1)).median_s == 0.1
        exported = json.loads(as_json(db.records()))
        assert exported[0]["config"] == config.to_dict() and exported[0]["median_s"] == 0.1
        assert db.best("other", "cpu", "hw") is None


def test_forget_drops_the_best_record_and_keeps_the_trials(tmp_path, small_kernel):
    config = default_config(small_kernel)
    with Database(tmp_path / "t.sqlite") as db:
        db.add_trials("k", "cpu", "hw", [(config, "ok", 0.2, "")])
        db.offer(record(config, 0.2))
        db.forget("k", "cpu", "hw")
        assert db.best("k", "cpu", "hw") is None and len(db.trials("k", "cpu", "hw")) == 1
        assert db.offer(record(config, 0.3)).median_s == 0.3


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "t.sqlite"
    Database(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'",
                 (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(DatabaseError, match="newer"):
        Database(path)


def test_another_programs_database_is_refused(tmp_path):
    path = tmp_path / "theirs.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(DatabaseError, match="another program"):
        Database(path)


def test_corrupt_file_warns_and_starts_fresh(tmp_path, small_kernel):
    path = tmp_path / "t.sqlite"
    path.write_bytes(b"this is not a database at all " * 200)
    with pytest.warns(DatabaseWarning, match="unreadable"):
        db = Database(path)
    with db:
        assert db.records() == []
        db.offer(record(default_config(small_kernel), 0.1))
        assert db.best("k", "cpu", "hw") is not None
    aside = list(tmp_path.glob("t.sqlite.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not")
