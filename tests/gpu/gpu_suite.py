"""Helpers of the GPU tests: skip without triton (the reason printed), load
a CPU test module of this repository so its tests run again on target="cuda"."""
import functools
import importlib.util
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

import neoflow as nf

TESTS = Path(__file__).resolve().parent.parent


def require_triton():
    pytest.importorskip("triton", reason="target='cuda' needs triton (the neoflow[gpu] extra)")


def load_tests(relpath, name):
    """Import tests/<relpath> as module `name` (its folder on sys.path for its imports)."""
    path = TESTS / relpath
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def calling(module, helper):
    """{name: test function} of `module`'s tests whose body calls `helper`."""
    return {n: f for n, f in vars(module).items()
            if n.startswith("test_") and callable(f) and helper in inspect.getsource(f)}


def cuda_build(outputs, inputs, target="cpu", *args, **kw):
    """nf.build on target="cuda" whatever the caller asked, results as NumPy arrays."""
    f = _BUILD(outputs, inputs, "cuda", *args, **kw)

    @functools.wraps(f.__call__)
    def call(*xs):
        out = f(*xs)
        return tuple(o.cpu().numpy() for o in out) if isinstance(out, tuple) \
            else out.cpu().numpy()
    return call


_BUILD = nf.build


def to_numpy(out):
    return tuple(np.asarray(o.cpu()) for o in out) if isinstance(out, tuple) \
        else np.asarray(out.cpu())
