"""nf.build: the public contract of built functions (API.md, "Running expressions")."""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.runtime.function import address
from neoflow.errors import InputError, NeoFlowError
from neoflow.schedule import ConfigError, default_config


@pytest.fixture(scope="module")
def prog():
    a = nf.placeholder((3, 4), name="a")
    b = nf.placeholder((4,), name="b")
    c = nf.compute((3, 4), lambda i, j: a[i, j] * b[j], name="c")
    d = nf.compute((4,), lambda j: c[0, j] + c[2, j], name="d")
    return a, b, c, d


def values():
    rng = np.random.default_rng(0)
    return rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)


def test_one_tensor_gives_one_array_a_list_gives_a_tuple(prog):
    a, b, c, d = prog
    av, bv = values()
    single = nf.build(c, [a, b])(av, bv)
    assert isinstance(single, np.ndarray) and single.shape == (3, 4)
    np.testing.assert_allclose(single, av * bv)
    pair = nf.build([c, d], [a, b])(av, bv)
    assert isinstance(pair, tuple) and len(pair) == 2
    np.testing.assert_allclose(pair[1], av[0] * bv + av[2] * bv)
    one = nf.build([d], [a, b])(av, bv)
    assert isinstance(one, tuple) and len(one) == 1
    assert nf.build is nf.api.build


def test_wrong_count_shape_and_dtype_name_the_input(prog):
    a, b, c, _ = prog
    f = nf.build(c, [a, b])
    av, bv = values()
    with pytest.raises(InputError, match=r"expected 2 input\(s\) \('a', 'b'\), got 1"):
        f(av)
    with pytest.raises(NeoFlowError, match=r"input 'b': expected shape \(4,\), got \(5,\)"):
        f(av, np.zeros(5, np.float32))
    with pytest.raises(NeoFlowError, match=r"input 'a': expected dtype float32, got float64"):
        f(av.astype(np.float64), bv)


def test_missing_input_and_bad_signatures(prog):
    a, b, c, _ = prog
    with pytest.raises(NeoFlowError, match=r"read 'b' \(4,\) float32, which is not among"):
        nf.build(c, [a])
    with pytest.raises(NeoFlowError, match="input 'c' is a computed tensor"):
        nf.build(c, [a, b, c])
    with pytest.raises(NeoFlowError, match="input 'a' is listed twice"):
        nf.build(c, [a, a, b])
    with pytest.raises(NeoFlowError, match="outputs must be Tensors"):
        nf.build([c, 3], [a, b])
    with pytest.raises(NeoFlowError, match="target 'tpu': expected one of"):
        nf.build(c, [a, b], target="tpu")


def test_inputs_untouched_outputs_fresh_torch_and_views_accepted(prog):
    a, b, c, _ = prog
    f = nf.build(c, [a, b])
    av, bv = values()
    keep_a, keep_b = av.copy(), bv.copy()
    first, second = f(av, bv), f(av, bv)
    assert first is not second and not np.shares_memory(first, av)
    np.testing.assert_array_equal(av, keep_a)
    np.testing.assert_array_equal(bv, keep_b)
    np.testing.assert_allclose(f(torch.from_numpy(av), torch.from_numpy(bv)), av * bv)
    wide = np.asfortranarray(av)                              # not C-contiguous
    strided = np.repeat(bv, 2)[::2]                           # a strided view
    assert not strided.flags.c_contiguous
    np.testing.assert_allclose(f(wide, strided), av * bv)
    frozen_a, frozen_b = av.copy(), bv.copy()        # read-only buffers: no buffer export
    frozen_a.setflags(write=False)
    frozen_b.setflags(write=False)
    np.testing.assert_allclose(f(frozen_a, frozen_b), av * bv)


def test_address_is_the_data_pointer_writable_or_not():
    a = np.arange(6, dtype=np.float32)
    assert address(a) == a.ctypes.data
    a.setflags(write=False)
    assert address(a) == a.ctypes.data
    empty = np.zeros(0, np.float32)                    # no byte to take the address of
    assert address(empty) == empty.ctypes.data


def test_unused_inputs_outputs_that_are_inputs_and_repeated_outputs(prog):
    a, b, c, _ = prog
    extra = nf.placeholder((2,), name="extra")
    f = nf.build([c, a, c], [a, b, extra])
    av, bv = values()
    out = f(av, bv, np.zeros(2, np.float32))
    np.testing.assert_array_equal(out[1], av)
    assert not np.shares_memory(out[1], av) and not np.shares_memory(out[0], out[2])
    np.testing.assert_array_equal(out[0], out[2])


def test_source_database_and_configs(prog, tmp_path):
    a, b, c, d = prog
    db = tmp_path / "no-records.sqlite"       # no file: default schedules
    assert len(nf.build(d, [a, b], database=db).kernels) == 1    # fused: c inlined into d
    f = nf.build(d, [a, b], database=db, fusion=False)           # one kernel per compute
    assert f.database is db and "nf_main" in f.source and len(f.kernels) == 2
    cfg = default_config(f.kernels[1])
    g = nf.build(d, [a, b], configs={f.kernels[1].key: cfg}, fusion=False)
    av, bv = values()
    np.testing.assert_allclose(g(av, bv), f(av, bv))
    with pytest.raises(NeoFlowError, match="one Config given but the outputs make 2 kernels"):
        nf.build(d, [a, b], configs=cfg, fusion=False)
    with pytest.raises(ConfigError):   # c's kernel has 2 axes, cfg fits d's 1
        nf.build(d, [a, b], configs=[cfg, None], fusion=False)


def test_zero_d_output_and_scalar_input():
    s = nf.placeholder((), name="s")
    v = nf.placeholder((5,), name="v")
    r = nf.reduce_axis(5, name="r")
    loss = nf.compute((), lambda: nf.sum(v[r] * s[()], axis=r), name="loss")
    f = nf.build(loss, [s, v])
    out = f(2.0, np.arange(5, dtype=np.float32))
    assert out.shape == () and out.dtype == np.float32 and float(out) == 20.0
