"""Shared by the tuning tests: small kernels and a throwaway database."""
import pytest

from neoflow.graph import kernels_for
from neoflow.tune import Database
from tune_helpers import matmul


@pytest.fixture
def small_kernel():
    C, _ = matmul()
    return kernels_for([C])[0]


@pytest.fixture
def db(tmp_path):
    with Database(tmp_path / "tuning.sqlite") as database:
        yield database
