"""Loading a script of bench/ as a module, for the tests that keep it from rotting."""
import importlib.util
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench_script(name):
    """The module of bench/<name>.py (bench/ is not a package).

    >>> load_bench_script("fusion").main                     # doctest: +SKIP
    """
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
