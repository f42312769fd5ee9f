"""The tune stage: a kernel -> its best Config on this machine.

hardware (what the CPU offers) -> estimate (an analytic loop-nest model) ->
prune (drop hopeless schedules) -> search (random, then evolution guided by
cost_model over features) -> measure (isolated worker processes) ->
database (SQLite: best records and every trial) -> tuner (`nf.tune`).

>>> rec = nf.tune(C, [A, B], trials=32)          # doctest: +SKIP
>>> f = nf.build(C, [A, B])                      # uses rec.config
"""
from .database import Database, DatabaseError, DatabaseWarning, Record, default_path
from .hardware import Hardware, detect
from .tuner import TuneError, tune, tune_kernel

__all__ = ["Database", "DatabaseError", "DatabaseWarning", "Hardware", "Record", "TuneError",
           "default_path", "detect", "tune", "tune_kernel"]
