"""Schedules as plain data: JSON, validation messages, the default heuristic,
and kernels with structural keys."""
import json

import pytest

import neoflow as nf
from neoflow.graph import Kernel, kernels_for
from neoflow.schedule import Config, ConfigError, default_config, sample_config, validate


def matmul(m=64, n=48, k=32, names=("A", "B", "C", "k"), dtype="float32"):
    a = nf.placeholder((m, k), dtype=dtype, name=names[0])
    b = nf.placeholder((k, n), dtype=dtype, name=names[1])
    r = nf.reduce_axis(k, name=names[3])
    return nf.compute((m, n), lambda i, j: nf.sum(a[i, r] * b[r, j], axis=r), name=names[2])


def kernel_of(t):
    return kernels_for([t])[-1]


def test_config_round_trips_through_json():
    kernel = kernel_of(matmul())
    for config in [default_config(kernel)] + [sample_config(kernel, s) for s in range(10)]:
        text = config.to_json()
        assert Config.from_json(text) == config
        assert json.loads(text)["stages"][0]["order"] == config.stages[0].order


def test_malformed_config_data():
    with pytest.raises(ConfigError, match="malformed"):
        Config.from_dict({"stages": [{"order": []}]})


@pytest.mark.usefixtures("avx2")
def test_default_matmul_is_register_blocked():
    sc = default_config(kernel_of(matmul(1024, 1024, 1024))).stages[0]
    assert sc.cache_write and sc.vectorize == "s1" and sc.parallel >= 1
    assert sc.tile["s1"] == [16] and sc.tile["s0"] == [6]
    assert sc.order[-1] == "s1.1" and sc.order.index("r0.0") < sc.order.index("s0.1")


def test_default_configs_are_valid_for_many_kernels():
    x = nf.placeholder((4096 * 1024,), name="x")
    y = nf.placeholder((3, 5, 7), name="y")
    r = nf.reduce_axis(7, name="r")
    conv = nf.nn.conv2d(nf.placeholder((2, 3, 9, 9), name="img"),
                        nf.placeholder((4, 3, 3, 3), name="w"), stride=2, padding=1)
    tensors = [matmul(), conv, x * 2.0,
               nf.compute((), lambda: nf.sum(y[0, 0, r], axis=r)),
               nf.compute((3, 5), lambda i, j: nf.max(y[i, j, r], axis=r)),
               nf.compute((7,), lambda i: nf.sum(y[1, 2, r] * y[0, 0, i], axis=r)),
               nf.compute((3, 5, 7), lambda i, j, k: y[i, j, k] > 0)]
    for t in tensors:
        kernel = kernel_of(t)
        validate(default_config(kernel), kernel)
    big = default_config(kernel_of(x * 2.0)).stages[0]
    assert big.parallel == 1 and big.vectorize == "s0" and big.tile["s0"]


def stage_dict(**changes):
    base = {"tile": {"s0": [4], "s1": [16], "r0": []},
            "order": ["s0.0", "s1.0", "r0.0", "s0.1", "s1.1"],
            "parallel": 2, "vectorize": "s1", "unroll": {"s0.1": 4}, "cache_write": True}
    base.update(changes)
    return {"stages": [base]}


@pytest.mark.parametrize("changes,message", [
    ({"tile": {"s0": [4], "s1": [16]}}, r"tile must give factors for exactly the axes"),
    ({"tile": {"s0": [4, 0], "s1": [16], "r0": []}}, r"tile factors of axis s0"),
    ({"order": ["s0.0", "s1.0", "r0.0", "s0.1"]}, r"order must list every loop once"),
    ({"order": ["s0.1", "s1.0", "r0.0", "s0.0", "s1.1"]}, r"loops of axis s0 must stay"),
    ({"parallel": 3}, r"parallel outer loop\(s\) .* may not include a reduce loop"),
    ({"parallel": -1}, r"parallel must be a count"),
    ({"vectorize": "s0"}, r"vectorised loop s0.1 must be the innermost"),
    ({"vectorize": "s7"}, r"vectorize must name an axis"),
    ({"unroll": {"s0.1": 100}}, r"unroll factor of s0.1"),
    ({"unroll": {"s9.1": 2}}, r"cannot unroll 's9.1'"),
    ({"tile": {"s0": [64], "s1": [48], "r0": []}, "unroll": {}},
     r"accumulator tile .* has 3072 elements|more than"),
])
def test_validation_names_what_is_wrong(changes, message):
    kernel = kernel_of(matmul())
    config = Config.from_dict(stage_dict(**changes))
    if "accumulator" in message:
        kernel = kernel_of(matmul(128, 96, 32))
        config.stages[0].tile = {"s0": [64], "s1": [96], "r0": []}
        config.stages[0].order = ["s0.0", "s1.0", "r0.0", "s0.1", "s1.1"]
        config.stages[0].parallel = 1
    with pytest.raises(ConfigError, match=message) as err:
        validate(config, kernel)
    assert "stage 0 ('C')" in str(err.value)


def test_validation_of_cache_write_and_reduce_vectorisation():
    x = nf.placeholder((8, 8), name="x")
    r = nf.reduce_axis(8, name="r")
    ew = kernel_of(x * 2.0)
    with pytest.raises(ConfigError, match="cache_write needs a reduction"):
        validate(Config.from_dict({"stages": [{"tile": {"s0": [], "s1": []},
                                               "order": ["s0.0", "s1.0"],
                                               "cache_write": True}]}), ew)
    cast = kernel_of(nf.compute((8,), lambda i: nf.cast(nf.sum(x[i, r], axis=r), "int32")))
    rowmax = kernel_of(nf.compute((8,), lambda i: nf.max(x[i, r], axis=r)))
    stage = {"tile": {"s0": [], "r0": []}, "order": ["s0.0", "r0.0"]}
    with pytest.raises(ConfigError, match="reduction is float32 and the output int32"):
        validate(Config.from_dict({"stages": [dict(stage, cache_write=False)]}), cast)
    validate(Config.from_dict({"stages": [dict(stage, cache_write=True, vectorize="r0")]}),
             rowmax)
    with pytest.raises(ConfigError, match="a reduce axis .r0. can be vectorised only for a "
                                          "reduction accumulated in a scalar"):
        validate(Config.from_dict({"stages": [dict(stage, cache_write=False,
                                                   vectorize="r0")]}), rowmax)
    with pytest.raises(ConfigError, match=r"2 stage schedule\(s\); kernel .* has 1 stage"):
        validate(Config.from_dict({"stages": [dict(stage, cache_write=True)] * 2}), rowmax)


def test_kernel_inputs_outputs_and_locals():
    x = nf.placeholder((4, 5), name="x")
    e = nf.compute((4, 5), lambda i, j: nf.exp(x[i, j]), name="e")
    s = nf.compute((4,), lambda i: e[i, 0] + e[i, 4], name="s")
    kernel = Kernel([e, s], outputs=[s])
    assert kernel.inputs == (x,) and kernel.outputs == (s,) and kernel.locals == (e,)
    with pytest.raises(ValueError, match="comes later"):
        Kernel([s, e])
    assert [k.stages for k in kernels_for([s])] == [(e,), (s,)]


def test_kernel_key_ignores_names_and_sees_structure():
    same = [kernel_of(matmul()), kernel_of(matmul(names=("P", "Q", "R", "z")))]
    assert same[0].key == same[1].key
    assert "A" not in same[0].signature() and "'k'" not in same[0].signature()
    different = [kernel_of(matmul(64, 48, 16)), kernel_of(matmul(dtype="float64"))]
    a = nf.placeholder((64, 32), name="A")
    b = nf.placeholder((32, 48), name="B")
    r = nf.reduce_axis(32, name="k")
    different.append(kernel_of(nf.compute((64, 48), lambda i, j: nf.max(a[i, r] * b[r, j],
                                                                         axis=r))))
    assert len({k.key for k in same[:1] + different}) == 4
