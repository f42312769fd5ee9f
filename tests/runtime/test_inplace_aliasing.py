"""In-place updates pass one buffer as a kernel's input and output: such
kernels must not declare their pointers `restrict` (undefined behaviour in C;
it once gave LeNet a wrong momentum update, which today's schedules no longer
show, so the printer's choice is checked directly too)."""
import numpy as np

import neoflow as nf
from neoflow import zoo


def _two_steps(backend):
    model = zoo.get("lenet").build("small")
    trainer = nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.05, momentum=0.9), seed=3,
                         fusion=False, backend=backend)
    batch = model.make_batch(np.random.default_rng(2))
    for _ in range(2):
        trainer.step(batch)
    return trainer.parameters()


def test_in_place_updates_match_the_reference_backend():
    native, reference = _two_steps("native"), _two_steps("reference")
    for name, value in reference.items():
        np.testing.assert_allclose(native[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_only_aliased_kernels_drop_restrict():
    from neoflow.codegen.c import generate_c
    from neoflow.graph import kernels_for
    from neoflow.schedule import default_config, lower_program
    x = nf.placeholder((8,), name="x")
    y = nf.compute((8,), lambda i: x[i] * 2.0)
    z = nf.compute((8,), lambda i: y[i] + 1.0)
    kernels = kernels_for([z])
    program = lower_program(kernels, [default_config(k) for k in kernels], [x], [y, z])
    source = generate_c(program, aliased={1})
    first, second = (line for line in source.splitlines() if line.startswith("static void nf_kernel"))
    assert "restrict" in first and "restrict b" not in second
