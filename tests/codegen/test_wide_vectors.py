"""Kernels built for each SIMD width (NEOFLOW_VECTOR_BYTES 16, 32, 64) agree
with the reference evaluator on odd sizes -- register tiles, panels and
channel tiles with tails on every side -- and run clean under
AddressSanitizer; on an AVX-512 machine the 64-byte kernels use zmm."""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import neoflow as nf
from neoflow.codegen.c import generate_c
from neoflow.toolchain import asan_runtime_path, cache_dir
from neoflow.toolchain.target import ENV, native_target

WIDTHS = ["16", "32", "64"]


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _matmul(m, k, n):
    a, b = nf.placeholder((m, k), name="a"), nf.placeholder((k, n), name="b")
    r = nf.reduce_axis(k, name="r")
    return [a, b], nf.compute((m, n), lambda i, j: nf.sum(a[i, r] * b[r, j], axis=r), name="c")


def _dense(batch, cin, cout):
    x, w = nf.placeholder((batch, cin), name="x"), nf.placeholder((cout, cin), name="w")
    r = nf.reduce_axis(cin, name="r")
    return [x, w], nf.compute((batch, cout), lambda i, j: nf.sum(x[i, r] * w[j, r], axis=r))


def _conv(batch, cin, cout, size, stride=1):
    x = nf.placeholder((batch, cin, size, size), name="x")
    w = nf.placeholder((cout, cin, 3, 3), name="w")
    return [x, w], nf.nn.conv2d(x, w, stride=stride, padding=1)


def _conv_transpose(batch, cin, cout, size):
    x = nf.placeholder((batch, cin, size, size), name="x")
    w = nf.placeholder((cin, cout, 4, 4), name="w")
    return [x, w], nf.nn.conv_transpose2d(x, w, stride=2, padding=1)


CASES = {
    "matmul tails": lambda: _matmul(37, 71, 53),            # rows, columns, reduction: no fit
    "matmul packed": lambda: _matmul(131, 97, 83),          # panels, tails in both
    "matmul long": lambda: _matmul(45, 600, 41),            # blocked sums over a long reduction
    "dense transposed": lambda: _dense(19, 70, 77),        # panels packed transposed
    "conv channel tile": lambda: _conv(2, 5, 64, 13),       # 32-channel pairs, 13 % 8 tails
    "conv strided": lambda: _conv(1, 6, 64, 15, stride=2),
    "conv transpose": lambda: _conv_transpose(2, 64, 32, 5),
    "conv row of 28": lambda: _conv(2, 1, 6, 28),           # whole, half and scalar vectors
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", list(CASES))
def test_kernels_match_the_reference_at_every_width(monkeypatch, width, case):
    monkeypatch.setenv(ENV, width)
    inputs, out = CASES[case]()
    rng = np.random.default_rng(len(case))
    values = [_rand(rng, *t.shape) for t in inputs]
    got = nf.build(out, inputs)(*values)
    ref = nf.evaluate(out, dict(zip(inputs, values)))
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("width", WIDTHS)
def test_generated_c_is_printed_for_the_target_width(monkeypatch, width):
    monkeypatch.setenv(ENV, width)
    from neoflow.graph import kernels_for
    from neoflow.schedule import default_config, lower_program
    inputs, out = _matmul(9, 20, 40)
    kernels = kernels_for([out])
    program = lower_program(kernels, [default_config(k) for k in kernels], inputs, [out])
    assert generate_c(program).startswith(f"#define NF_VBYTES {width}\n")


# (width, columns) -> (a half-vector step, a scalar remainder) after each vector loop
TAILS = {("16", 16): (0, 0), ("16", 20): (0, 0), ("16", 28): (0, 0),
         ("32", 16): (0, 0), ("32", 20): (1, 0), ("32", 28): (1, 0),
         ("64", 16): (0, 0), ("64", 20): (0, 1), ("64", 28): (1, 1)}


@pytest.mark.parametrize("width, columns", list(TAILS))
def test_vector_loops_print_half_vector_and_scalar_tails_only_where_points_remain(
        monkeypatch, width, columns):
    """A register tile's rows of 16, 20 and 28 columns at 4, 8 and 16 lanes:
    after the whole vectors, a vector half as wide where at least that many
    columns remain (32-byte targets and wider), then a scalar loop only for
    what is left; the kernel agrees with the reference."""
    monkeypatch.setenv(ENV, width)
    from neoflow.graph import kernels_for
    from neoflow.schedule import Config, lower_program
    inputs, out = _matmul(7, 33, 2 * columns)
    config = Config.from_dict({"stages": [{
        "tile": {"s0": [3], "s1": [columns], "r0": [5]},
        "order": ["s0.0", "s1.0", "r0.0", "r0.1", "s0.1", "s1.1"], "parallel": 2,
        "vectorize": "s1", "cache_write": True}]})
    source = generate_c(lower_program(kernels_for([out]), [config], inputs, [out]))
    half, scalar = TAILS[(width, columns)]
    assert source.count("+ NF_LANES_F32 <=") == 3          # init, update, store
    assert source.count("*(nf_hf32*)&") == 3 * half
    assert len(re.findall(r"for \(; v\d+ < ", source)) == 3 * scalar
    rng = np.random.default_rng(columns)
    values = [_rand(rng, *t.shape) for t in inputs]
    np.testing.assert_allclose(nf.build(out, inputs, configs=config)(*values),
                               nf.evaluate(out, dict(zip(inputs, values))), rtol=2e-4, atol=2e-4)


ASAN_SCRIPT = """
import numpy as np, neoflow as nf, sys
sys.path.insert(0, {here!r})
import test_wide_vectors as t
for name, make in t.CASES.items():
    inputs, out = make()
    rng = np.random.default_rng(1)
    values = [t._rand(rng, *x.shape) for x in inputs]
    got = nf.build(out, inputs, sanitize=True)(*values)
    np.testing.assert_allclose(got, nf.evaluate(out, dict(zip(inputs, values))),
                               rtol=2e-4, atol=2e-4)
print("ASAN-CLEAN")
"""


@pytest.mark.slow
def test_wide_kernels_run_clean_under_address_sanitizer():
    """Every case at 64-byte vectors with -fsanitize=address: no read or
    write outside a buffer, the register tiles' stack arrays included."""
    runtime = asan_runtime_path()
    if runtime is None:
        print("the C compiler has no AddressSanitizer runtime (libasan); skipping")
        pytest.skip("the C compiler has no AddressSanitizer runtime (libasan)")
    env = dict(os.environ, LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0", **{ENV: "64"})
    script = ASAN_SCRIPT.format(here=os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "ASAN-CLEAN" in done.stdout, done.stderr[-4000:]


def test_avx512_kernels_use_zmm_registers(monkeypatch, tmp_path):
    """The 64-byte vector types are not split into halves by the compiler's
    256-bit tuning: the matmul's multiply-adds are on zmm registers."""
    if native_target().vector_bytes != 64:
        print(f"the compiler builds for {native_target().describe()} here; no zmm to check")
        pytest.skip("not an AVX-512 target")
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) is not installed")
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(ENV, "64")
    inputs, out = _matmul(64, 64, 64)
    nf.build(out, inputs)
    libraries = list((cache_dir() / "kernels").glob("*/*.so"))
    assert libraries
    text = "".join(subprocess.run([objdump, "-d", str(p)], capture_output=True, text=True,
                                  check=True).stdout for p in libraries)
    fmas = [line for line in text.splitlines() if "vfmadd" in line]
    assert fmas and all("zmm" in line for line in fmas), fmas[:5]
