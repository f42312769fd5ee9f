"""Shared by the PyTorch-frontend tests: the backend to hand torch.compile --
the string "neoflow" when the package is installed with its
torch_dynamo_backends entry point (pip install -e .), else the same
function, nf.torch.backend (the string route is tested on its own)."""
from importlib.metadata import entry_points

import pytest


def has_entry_point():
    return any(e.name == "neoflow" for e in entry_points(group="torch_dynamo_backends"))


@pytest.fixture(scope="session")
def nf_backend():
    if has_entry_point():
        return "neoflow"
    import neoflow as nf
    return nf.torch.backend


@pytest.fixture(scope="session")
def entry_point_installed():
    return has_entry_point()
