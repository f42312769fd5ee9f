"""tune/database: tuning records in SQLite (WAL), safe for many processes.

One file (default `<neoflow.toolchain.cache_dir()>/tuning.sqlite`) holds, per
key (kernel structural key, target, hardware fingerprint), the best
schedule found -- a Config as JSON, never pickle -- with its median time,
and every trial measured (config, status, time): the cost model's training
data. The schema carries a version; WAL mode and a busy timeout let several
processes read and write at once, each write one short transaction, and the
best record is replaced only by a faster one.

A file that is not a readable SQLite database is moved aside
(`<name>.corrupt-<time>`) with a warning and a fresh database takes its
place; a database written by a newer NeoFlow (higher schema version) or
another program raises DatabaseError rather than being touched.

Hands on: `Record`s and trial rows for the tuner, `nf.build` and the CLI.
"""
import json
import math
import os
import sqlite3
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..toolchain import cache_dir
from ..errors import NeoFlowError
from ..schedule import Config, ConfigError, validate
from .hardware import detect

SCHEMA_VERSION = 1
FILENAME = "tuning.sqlite"
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS best (
    kernel TEXT NOT NULL, target TEXT NOT NULL, hardware TEXT NOT NULL,
    config TEXT NOT NULL, median_s REAL NOT NULL, flops INTEGER NOT NULL,
    trials INTEGER NOT NULL, name TEXT NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (kernel, target, hardware));
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel TEXT NOT NULL, target TEXT NOT NULL, hardware TEXT NOT NULL,
    config TEXT NOT NULL, status TEXT NOT NULL, median_s REAL, detail TEXT NOT NULL,
    created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS trials_by_key ON trials (kernel, target, hardware);
"""


class DatabaseError(NeoFlowError):
    """A tuning database that cannot be used (newer schema, not NeoFlow's)."""


class DatabaseWarning(RuntimeWarning):
    """A tuning database was unreadable and has been replaced, or is skipped."""


@dataclass
class Record:
    """The best schedule known for one kernel on one target and machine.

    >>> rec = db.best(kernel.key, "cpu", detect().fingerprint)
    >>> rec.config, rec.median_s, rec.gflops, rec.trials      # doctest: +SKIP
    """
    kernel: str
    target: str
    hardware: str
    config: Config
    median_s: float
    flops: int
    trials: int
    name: str = ""
    updated: float = 0.0

    @property
    def gflops(self):
        """Billions of arithmetic operations per second at the median time."""
        return self.flops / self.median_s / 1e9 if self.median_s > 0 else math.inf

    def to_dict(self):
        """JSON-ready fields (the config as a dict)."""
        return {"kernel": self.kernel, "target": self.target, "hardware": self.hardware,
                "name": self.name, "median_s": self.median_s, "gflops": self.gflops,
                "flops": self.flops, "trials": self.trials, "updated": self.updated,
                "config": self.config.to_dict()}


def default_path():
    """Where the per-user tuning database lives.

    >>> default_path().name
    'tuning.sqlite'
    """
    return cache_dir() / FILENAME


class Database:
    """A tuning database file; created (with its folder) when missing.

    >>> db = Database("/tmp/tuning.sqlite")
    >>> db.best(kernel.key, "cpu", detect().fingerprint) is None
    True
    """

    def __init__(self, path=None):
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = self._open()
        except sqlite3.OperationalError as e:   # locked, unreachable: not damage
            raise DatabaseError(f"cannot use tuning database {self.path}: {e}") from None
        except sqlite3.DatabaseError as e:
            moved = _move_aside(self.path)
            warnings.warn(f"tuning database {self.path} is unreadable ({e}); moved it to "
                          f"{moved} and started a fresh one", DatabaseWarning, stacklevel=2)
            self._conn = self._open()

    def __repr__(self):
        return f"<Database {self.path}>"

    def _open(self):
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
            conn.execute("PRAGMA synchronous=NORMAL")
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and "meta" not in tables:
                raise DatabaseError(f"{self.path} is an SQLite database of another program "
                                    f"(tables {sorted(tables)}); choose another path")
            with _transaction(conn):
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
            version = int(conn.execute(
                "SELECT value FROM meta WHERE name='schema_version'").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise DatabaseError(f"{self.path} has schema version {version}, newer than "
                                    f"this NeoFlow's ({SCHEMA_VERSION}); upgrade NeoFlow or "
                                    "choose another path")
        except BaseException:
            conn.close()
            raise
        return conn

    @property
    def schema_version(self):
        """The schema version recorded in the file."""
        return int(self._conn.execute(
            "SELECT value FROM meta WHERE name='schema_version'").fetchone()[0])

    # -- writing ---------------------------------------------------------------
    def add_trials(self, kernel, target, hardware, measurements):
        """Record measured trials: (config, status, median_s or None, detail) tuples."""
        now = time.time()
        rows = [(kernel, target, hardware, c.to_json(), status, t, detail, now)
                for c, status, t, detail in measurements]
        with _transaction(self._conn):
            self._conn.executemany(
                "INSERT INTO trials (kernel, target, hardware, config, status, median_s, "
                "detail, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def offer(self, record):
        """Keep `record` as the best of its key unless a faster one is there;
        returns the best record afterwards."""
        with _transaction(self._conn):
            self._conn.execute(
                "INSERT INTO best VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (kernel, target, hardware) DO UPDATE SET "
                "config = excluded.config, median_s = excluded.median_s, "
                "flops = excluded.flops, name = excluded.name, updated = excluded.updated "
                "WHERE excluded.median_s < best.median_s",
                (record.kernel, record.target, record.hardware, record.config.to_json(),
                 record.median_s, record.flops, record.trials, record.name, time.time()))
            self._conn.execute(     # the trials stored (or more, as an imported record says)
                "UPDATE best SET trials = MAX(trials, (SELECT COUNT(*) FROM trials WHERE "
                "kernel = ? AND target = ? AND hardware = ?)) WHERE kernel = ? AND target = ? "
                "AND hardware = ?", (record.kernel, record.target, record.hardware) * 2)
        return self.best(record.kernel, record.target, record.hardware)

    def forget(self, kernel, target, hardware):
        """Drop the best record of a key (its trials stay): the schedule lost
        to the one it replaced inside a training step."""
        with _transaction(self._conn):
            self._conn.execute("DELETE FROM best WHERE kernel = ? AND target = ? AND hardware = ?",
                               (kernel, target, hardware))

    # -- reading ---------------------------------------------------------------
    def best(self, kernel, target, hardware):
        """The best Record of a key, or None."""
        row = self._conn.execute(
            "SELECT kernel, target, hardware, config, median_s, flops, trials, name, updated "
            "FROM best WHERE kernel = ? AND target = ? AND hardware = ?",
            (kernel, target, hardware)).fetchone()
        return None if row is None else _record(row)

    def records(self, hardware=None):
        """Every best Record (of one hardware fingerprint, if given), newest first."""
        query = ("SELECT kernel, target, hardware, config, median_s, flops, trials, name, "
                 "updated FROM best")
        args = ()
        if hardware is not None:
            query, args = query + " WHERE hardware = ?", (hardware,)
        return [_record(r) for r in self._conn.execute(query + " ORDER BY updated DESC", args)]

    def trials(self, kernel, target, hardware):
        """Every trial of a key: [(config JSON, status, median_s or None, detail)]."""
        return list(self._conn.execute(
            "SELECT config, status, median_s, detail FROM trials WHERE kernel = ? AND "
            "target = ? AND hardware = ? ORDER BY id", (kernel, target, hardware)))

    def close(self):
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _record(row):
    kernel, target, hardware, config, median_s, flops, trials, name, updated = row
    return Record(kernel, target, hardware, Config.from_json(config), median_s, flops, trials,
                  name, updated)


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): one writer at a time."""

    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, value, tb):
        self.conn.execute("ROLLBACK" if kind else "COMMIT")


def _move_aside(path):
    """Rename `path` (and its -wal / -shm files) to `<name>.corrupt-<time>`."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}-{os.getpid()}")
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, target.with_name(target.name + suffix))
    return target


def open_database(database):
    """A Database from what a user passes: None (the per-user default), a
    path, or a Database (returned as is).

    >>> open_database("/tmp/t.sqlite").path.name
    't.sqlite'
    """
    if isinstance(database, Database):
        return database
    return Database(None if database is None else os.fspath(database))


def as_json(records):
    """Records as a JSON text (a list of objects), for export.

    >>> json.loads(as_json(db.records()))       # doctest: +SKIP
    """
    return json.dumps([r.to_dict() for r in records], indent=2, sort_keys=True)


_warned = set()   # databases nf.build has already warned about


def _hardware(target):
    """The machine records of `target` are keyed by (the GPU for "cuda")."""
    if target == "cuda":
        from .gpu_hardware import detect_gpu
        return detect_gpu()
    return detect()


def best_configs(kernels, target="cpu", database=None):
    """The best known Config of each kernel (None where there is none), for
    nf.build and the runtime. `database`: None (the per-user database, if it
    exists), False (none), a path, or a Database. Never raises: an unusable
    database gives one DatabaseWarning per path and no configs.

    >>> best_configs(kernels_for([C]), "cpu", "/tmp/tuning.sqlite")
    [None]
    """
    none = [None] * len(kernels)
    if database is False:
        return none
    if not isinstance(database, (Database, str, os.PathLike, type(None))):
        raise NeoFlowError(f"database must be None, False, a path or a Database, got "
                           f"{type(database).__name__}")
    own = not isinstance(database, Database)
    path = Path(os.fspath(database)) if own and database is not None else (
        default_path() if own else database.path)
    if own and not path.exists():
        return none
    try:
        db = Database(path) if own else database
        try:
            hardware = _hardware(target).fingerprint
            out = []
            for k in kernels:
                rec = db.best(k.key, target, hardware)
                out.append(_fitting(rec, k))
            return out
        finally:
            if own:
                db.close()
    except (sqlite3.Error, NeoFlowError, OSError) as e:
        if str(path) not in _warned:
            _warned.add(str(path))
            warnings.warn(f"tuning database {path} cannot be read ({e}); building with "
                          "default schedules", DatabaseWarning, stacklevel=3)
        return none


def _fitting(record, kernel):
    """The record's Config if it still fits `kernel` (else None)."""
    if record is None:
        return None
    try:
        validate(record.config, kernel)
    except ConfigError:
        return None
    return record.config
