"""nf.tune end to end on a tiny kernel with a tiny budget, and nf.build
using what it recorded (also when the database is missing or broken)."""
import numpy as np
import pytest

import neoflow as nf
from neoflow.schedule import default_config
from neoflow.tune import Database, DatabaseWarning, TuneError
from tune_helpers import matmul


def test_tune_returns_a_record_and_build_uses_it(tmp_path):
    C, inputs = matmul()
    path = tmp_path / "tuning.sqlite"
    rec = nf.tune(C, inputs, trials=6, database=path, progress=False)
    assert rec.trials == 6 and rec.median_s > 0 and rec.gflops > 0
    assert rec.config is not None and rec.name == "C"
    f = nf.build(C, inputs, database=path)
    assert f.configs[0] == rec.config
    a, b = np.ones((32, 16), np.float32), np.ones((16, 24), np.float32)
    np.testing.assert_allclose(f(a, b), a @ b)
    # the same structure under other names finds the record; database=False ignores it
    C2, inputs2 = matmul()
    assert nf.build(C2, inputs2, database=path).configs[0] == rec.config
    assert nf.build(C, inputs, database=False).configs[0] == default_config(f.kernels[0])
    # tuning again goes on from the stored trials
    again = nf.tune(C, inputs, trials=3, database=path, progress=False)
    assert again.trials == 9 and again.median_s <= rec.median_s


def test_default_database_is_the_per_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    C, inputs = matmul(8, 8, 8)
    assert nf.build(C, inputs).configs[0] == default_config(nf.build(C, inputs).kernels[0])
    assert not (tmp_path / "tuning.sqlite").exists()      # a build creates nothing
    rec = nf.tune(C, inputs, trials=2, seconds=60, progress=False)
    assert (tmp_path / "tuning.sqlite").exists()
    assert nf.build(C, inputs).configs[0] == rec.config


def test_build_survives_an_unreadable_database(tmp_path):
    C, inputs = matmul(8, 8, 8)
    path = tmp_path / "broken.sqlite"
    path.write_bytes(b"\0garbage" * 100)
    with pytest.warns(DatabaseWarning):
        f = nf.build(C, inputs, database=path)
    assert f.configs[0] == default_config(f.kernels[0])


def test_several_kernels_share_the_budget(tmp_path):
    x = nf.placeholder((16, 33), name="x")
    y = nf.nn.softmax(x, 1)
    kernels = nf.build(y, [x], database=False).kernels
    recs = nf.tune(y, [x], trials=len(kernels) * 2, database=tmp_path / "t.sqlite",
                   progress=False)
    if len(kernels) == 1:
        recs = (recs,)
    assert [r.kernel for r in recs] == [k.key for k in kernels]
    with Database(tmp_path / "t.sqlite") as db:
        assert len(db.records()) == len({k.key for k in kernels})


def test_bad_budgets_are_refused():
    C, inputs = matmul(8, 8, 8)
    with pytest.raises(TuneError, match="trials"):
        nf.tune(C, inputs, trials=0)
    with pytest.raises(TuneError, match="budget"):
        nf.tune(C, inputs, trials=None)
    with pytest.raises(TuneError, match="target"):
        nf.tune(C, inputs, target="tpu")
