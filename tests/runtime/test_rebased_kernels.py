"""Kernels that differ only in constant offsets into their arguments are
compiled once (schedule/rebase.py, runtime/native.py `rebased` and
`shared_kernels`): an unrolled recurrence's step t reads row t of a tensor
that holds every step; with the offset passed in with the pointer, the
steps print the same C. Checked against the reference interpreter at odd
sizes, through the step entry, kernel-by-kernel calls (`profile`) and a
hot-swapped kernel, and at the loop IR: offsets, and reads and writes
rebased by hand-made offsets, run as compiled C."""
import ctypes

import numpy as np
import pytest

import neoflow as nf
from neoflow import zoo
from neoflow.codegen.c.printer import kernel_c
from neoflow.graph import kernels_for
from neoflow.runtime.native import kernels_source
from neoflow.schedule import default_config, lower_kernel, sample_config
from neoflow.schedule.loop_ir import For, KernelFunc, Load, Seq, Store, Var, Buffer
from neoflow.schedule.rebase import argument_offsets, rebase
from neoflow.te.expr import Binary, Const
from neoflow.toolchain import compile_c, driver

# MI-LSTM unrolled 5 steps at odd sizes where fusion keeps a kernel per step
MILSTM = dict(steps=5, hidden=33, batch=5, n_in=7)


def _row_reader(t, rows=4, width=19):
    X = nf.placeholder((3, rows, width), name="X")
    Y = nf.compute((3, width), lambda b, j: X[b, t, j] * 2.0 + X[b, t, (j + 1) % width],
                   name=f"row{t}")
    return X, Y


def _lowered(tensor):
    (kernel,) = kernels_for([tensor])
    return lower_kernel(kernel, default_config(kernel), [])


def test_offsets_are_the_row_each_step_reads_and_rebased_steps_print_the_same_c():
    funcs = [_lowered(_row_reader(t)[1]) for t in (1, 2, 3)]
    offsets = [argument_offsets(f) for f in funcs]
    assert offsets == [(19, 0), (38, 0), (57, 0)]     # X's row t (width 19): in, out
    texts = [kernel_c(f) for f in funcs]
    assert len(set(texts)) == 3                       # as lowered, each step is its own code
    assert len({kernel_c(rebase(f, o)) for f, o in zip(funcs, offsets)}) == 1


def test_row_zero_and_a_checked_read_keep_offset_zero():
    assert argument_offsets(_lowered(_row_reader(0)[1])) == (0, 0)
    ids = nf.placeholder((4,), dtype="int64", name="ids")
    table = nf.placeholder((6, 5), name="table")
    gather = nf.compute((4,), lambda i: table[ids[i], 3], name="gather")
    assert argument_offsets(_lowered(gather)) == (0, 0, 0)


def _compiled_call(func, offsets, arrays):
    """Run `func` rebased by `offsets` on `arrays` (inputs then outputs) as C."""
    lib = compile_c(kernels_source([rebase(func, offsets)], [False]))
    table = lib.array("nf_kernel_table", ctypes.c_void_p, 1)
    call = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(arrays) + 1))(table[0])
    err = (ctypes.c_int64 * 2)()
    call(*[a.ctypes.data + off * a.itemsize for a, off in zip(arrays, offsets)], err)
    assert err[0] == 0


def test_rebased_reads_and_writes_touch_the_same_elements(tmp_path, monkeypatch):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    src, dst = Buffer("float32", (41,), "arg", "in"), Buffer("float32", (29,), "arg", "out")
    v = Var("v", 0, 9)
    index = Binary("add", Binary("mul", v, Const(3, "int64"), "int64"), Const(7, "int64"), "int64")
    store_at = Binary("add", Const(5, "int64"), Binary("mul", v, Const(2, "int64"), "int64"),
                      "int64")
    body = For(v, Const(0, "int64"), Const(9, "int64"), "serial",
               Seq([Store(dst, store_at, Binary("add", Load(src, index),
                                                Load(src, Binary("sub", index, Const(2, "int64"),
                                                                 "int64")), "float32"))]))
    func = KernelFunc([src], [dst], body)
    assert argument_offsets(func) == (5, 5)            # least constants: 7 - 2 read, 5 written
    x = np.random.default_rng(0).standard_normal(41).astype(np.float32)
    want = np.zeros(29, np.float32)
    want[5:5 + 18:2] = x[7:7 + 27:3] + x[5:5 + 27:3]
    for offsets in [(0, 0), (5, 5), (3, 4), argument_offsets(func)]:
        out = np.zeros(29, np.float32)
        _compiled_call(func, offsets, [x, out])
        np.testing.assert_array_equal(out, want)


def _compiler_calls(monkeypatch):
    kernels = []
    real = driver.compile_shared

    def counting(cc, flags, c_file, out):
        kernels.append(c_file.read_text().count("static void nf_kernel"))
        return real(cc, flags, c_file, out)
    monkeypatch.setattr(driver, "compile_shared", counting)
    return kernels


def _losses(model, backend, steps=3, body=None):
    batch = model.make_batch(np.random.default_rng(5))
    with nf.Trainer(model.loss, nf.optim.SGD(0.05), backend=backend, database=False,
                    seed=2) as trainer:
        losses = [trainer.step(batch) for _ in range(steps)]
        if body is not None:
            body(trainer)
        return losses, {k: v.copy() for k, v in trainer.parameters().items()}


def test_recurrence_steps_share_code_across_offsets_and_match_the_reference(
        monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    compiled = _compiler_calls(monkeypatch)
    model = zoo.get("milstm").build("small", **MILSTM)
    seen = {}

    def inspect(trainer):
        step = trainer._executor.program
        seen["keys"] = {k.key for k in trainer.kernels}
        seen["addresses"] = {step._table[n] for n in range(len(trainer.kernels))}
        seen["offsets"] = step._program.offsets
    native, native_params = _losses(model, "native", body=inspect)
    reference, reference_params = _losses(model, "reference")
    np.testing.assert_allclose(native, reference, rtol=2e-5)
    for name, value in reference_params.items():
        np.testing.assert_allclose(native_params[name], value, rtol=1e-4, atol=1e-6)
    # step t's kernels differ in structure (Kernel.key has the row t), not in code
    assert any(any(row) for row in seen["offsets"])
    assert len(seen["addresses"]) < len(seen["keys"])
    assert sum(compiled) == len(seen["addresses"])


def test_profile_and_a_swapped_rebased_kernel_match_the_reference(monkeypatch, tmp_path):
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path))
    model = zoo.get("milstm").build("small", **MILSTM)
    batch = model.make_batch(np.random.default_rng(5))
    reference, _ = _losses(model, "reference", steps=3)
    with nf.Trainer(model.loss, nf.optim.SGD(0.05), database=False, seed=2) as trainer:
        step = trainer._executor.program
        moved = [n for n, row in enumerate(step._program.offsets) if any(row)]
        assert moved
        n = moved[-1]
        config = sample_config(trainer.kernels[n], 11)
        assert config.to_json() != step.configs[n].to_json()
        step.swap(step.prepare(n, config))    # compiled rebased by kernel n's offsets
        losses = [trainer.step(batch)]
        trainer._executor.step(profile=True)  # step 2, kernel by kernel through the offsets
        losses.append(trainer.step(batch))
    np.testing.assert_allclose(losses, [reference[0], reference[2]], rtol=2e-5)
