"""runtime/cuda: the GPU side of the runtime -- which device runs Triton
kernels, loading generated Triton source, device buffers, and a built GPU
computation as a Python callable.

The device is a CUDA GPU, or, when TRITON_INTERPRET=1 is set, the CPU: the
interpreter runs the same kernels on CPU torch tensors (slow; for tests).
Inputs are torch tensors on that device (used as they are when contiguous
and of the right dtype) or NumPy arrays (copied); outputs are fresh torch
tensors on it. Temporaries between kernels and kernel-local buffers are
device tensors allocated once (per function, per trainer step); a kernel's
checked read reports into a two-element int64 `err` tensor read back once
per call. The Trainer's `CudaBackend` gives the executor `DeviceMemory`, so
a step's planned arena and leaves are device tensors too.

`CudaFunction` shares BuiltFunction's hand-out plan and error report (it has
the attributes they read: inputs, outputs, _computed, _originals, _sites).

Hands on: `CudaFunction` (what `nf.build(..., target="cuda")` returns).
"""
import hashlib
import importlib.util
import os
import sys

from ..errors import InputError, MissingDependencyError
from ..te.feed import as_input_array
from .function import BuiltFunction

TORCH_DTYPES = ("float32", "float64", "int32", "int64", "bool")


def interpreting():
    """Whether Triton's interpreter stands in for a GPU (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def require_device():
    """The torch device name kernels run on ("cuda", or "cpu" under the
    interpreter); MissingDependencyError says what is missing otherwise.

    >>> require_device()          # doctest: +SKIP
    'cuda'
    """
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError(
            f"target='cuda' needs triton and torch ({e.name} is missing): install the "
            "'neoflow[gpu]' extra (pip install 'neoflow[gpu]')") from None
    if interpreting():
        return "cpu"
    if not torch.cuda.is_available():
        raise MissingDependencyError(
            "target='cuda' needs an NVIDIA GPU and a CUDA build of torch "
            f"(torch {torch.__version__} sees no CUDA device); set TRITON_INTERPRET=1 to run "
            "the kernels in Triton's interpreter on the CPU instead (slow; for tests)")
    return "cuda"


def torch_dtype(name):
    import torch
    return getattr(torch, name)


def load_module(source):
    """Import generated Triton `source` (triton.jit reads a function's text from
    its file, so the source is written to the kernel cache first)."""
    from ..toolchain.cache import cache_dir
    key = hashlib.sha256(source.encode()).hexdigest()
    folder = cache_dir() / "triton"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"nf_{key[:32]}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    name = f"neoflow_triton_{key[:32]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def as_device_tensor(tensor, value, device):
    """`value` (torch tensor or array-like) as a contiguous torch tensor of
    `tensor`'s shape and dtype on `device`; InputError names the input."""
    import torch
    want = torch_dtype(tensor.dtype)
    if not isinstance(value, torch.Tensor):
        value = torch.from_numpy(as_input_array(tensor, value))
    if value.dtype != want:
        raise InputError(f"input '{tensor.name}': expected dtype {tensor.dtype}, got "
                         f"{value.dtype}")
    if tuple(value.shape) != tuple(tensor.shape):
        raise InputError(f"input '{tensor.name}': expected shape {tuple(tensor.shape)}, got "
                         f"{tuple(value.shape)}")
    if value.device.type != device:
        value = value.to(device)
    return value.contiguous()


def compile_program(kernels, configs, inputs, outputs, precision="fp32", hardware=None):
    """(Program, TritonProgram) of `kernels` under GPU `configs`: validated,
    lowered, printed (bf16 contractions when `precision` is "bf16") and
    statically checked against `hardware` (tune/gpu_hardware.py; None: the
    device's, else the documented H200 table)."""
    from ..codegen.triton import check_triton, generate_triton
    from ..schedule import lower_program
    from ..schedule.config import validate_gpu
    from ..tune.gpu_hardware import detect_gpu
    for cfg, kernel in zip(configs, kernels):
        validate_gpu(cfg, kernel)
    program = lower_program(kernels, configs, inputs, outputs)
    triton = generate_triton(program, [c.gpu for c in configs], bf16=precision == "bf16")
    hw = hardware or detect_gpu()
    check_triton(triton, smem_per_block=hw.smem_per_block)
    return program, triton


class Launcher:
    """Runs a TritonProgram's launches over device tensors; the kernels'
    local buffers and the Program's temporaries are allocated once, at the
    first run, and reused."""

    def __init__(self, program, triton, device):
        self.program, self.triton, self.device = program, triton, device
        self.module = load_module(triton.source)
        self.locals = _kernel_locals(program)
        self.scratch = None

    def run(self, tensors):
        """Run every launch; `tensors` maps id(Program input/output Buffer) to its tensor."""
        import torch
        prog = self.program
        if self.scratch is None:
            self.scratch = {id(b): torch.empty(b.shape or (1,), dtype=torch_dtype(b.dtype),
                                               device=self.device)
                            for b in prog.temps + self.locals}
        device = dict(self.scratch)
        device.update(tensors)
        err = torch.zeros(2, dtype=torch.int64, device=self.device)
        for launch in self.triton.launches:
            func = prog.kernels[launch.kernel]
            formal = {id(f): device[id(a)]
                      for f, a in zip(func.inputs + func.outputs, prog.calls[launch.kernel])}
            formal.update(self.scratch)
            fn = getattr(self.module, launch.name)
            fn[launch.grid](*[formal[id(b)] for b in launch.buffers], err,
                            num_warps=launch.num_warps, num_stages=launch.num_stages,
                            **launch.blocks)
        return err


class CudaFunction:
    """A computation built for the GPU: call it with torch tensors (or arrays).

    `source` is the generated Triton module; `launches` the kernels it runs in
    order; `kernels`/`configs` how it was cut and scheduled.

    >>> f = nf.build(B, [A], target="cuda"); y = f(torch.ones(2, 3))   # doctest: +SKIP
    """

    def __init__(self, outputs, single, inputs, computed, kernels, configs, program, triton,
                 database, device, originals=None):
        self.outputs, self.inputs, self.kernels, self.configs = outputs, inputs, kernels, configs
        self.source, self.launches, self.database = triton.source, triton.launches, database
        self.device, self.program = device, program
        self._single, self._computed, self._sites = single, computed, program.sites
        self._originals = computed if originals is None else originals
        self._launcher = Launcher(program, triton, device)
        self._handout = BuiltFunction._handout_plan(self)

    def __repr__(self):
        names = ", ".join(t.name for t in self.inputs)
        return f"<CudaFunction ({names}) -> {len(self.outputs)} output(s), " \
               f"{len(self.launches)} launch(es)>"

    def __call__(self, *args):
        import torch
        if len(args) != len(self.inputs):
            names = ", ".join(f"'{t.name}'" for t in self.inputs)
            raise InputError(f"expected {len(self.inputs)} input(s) ({names}), got {len(args)}")
        arrays = [as_device_tensor(t, a, self.device) for t, a in zip(self.inputs, args)]
        results = [torch.empty(t.shape, dtype=torch_dtype(t.dtype), device=self.device)
                   for t in self._computed]
        prog = self.program
        tensors = {id(b): a for b, a in zip(prog.inputs, arrays)}
        tensors.update({id(b): r for b, r in zip(prog.outputs, results)})
        raise_error(self, self._launcher.run(tensors))
        pools = (results, arrays)
        outs = [pools[pool][n].clone() if copy else pools[pool][n]
                for pool, n, copy in self._handout]
        return outs[0] if self._single else tuple(outs)


def raise_error(owner, err):
    """Raise the OutOfBoundsError a run's `err` tensor reports (`owner._sites`)."""
    code, index = (int(v) for v in err.cpu())
    if code:
        BuiltFunction._raise(owner, code, index)


class DeviceMemory:
    """The trainer's buffers as torch tensors on the device (the executor's
    arena is one uint8 tensor; views are typed slices of it)."""

    def __init__(self, device):
        self.device = device

    def allocate(self, size):
        import torch
        return torch.empty(max(1, size), dtype=torch.uint8, device=self.device)

    def view(self, memory, t, offset=0):
        from ..graph.memory import nbytes
        return memory[offset:offset + nbytes(t)].view(torch_dtype(t.dtype)).reshape(t.shape)

    def write(self, target, value):
        import numpy as np
        import torch
        if isinstance(value, torch.Tensor):
            target.copy_(value.reshape(target.shape))
        elif np.ndim(value) == 0:
            target.fill_(value.item() if hasattr(value, "item") else value)
        else:
            target.copy_(torch.from_numpy(np.ascontiguousarray(value)).reshape(target.shape))

    def host(self, buffer):
        return buffer.cpu().numpy().copy()

    def copy(self, target, value):
        target.copy_(value)


class CudaBackend:
    """The Trainer's execution backend on target="cuda": the step's kernels as
    Triton launches over the planned device buffers; feeds that are torch
    tensors on the device are used as they are (the executor copies them into
    the input buffers on the device).

    >>> step = CudaBackend().program(kernels, views); step()       # doctest: +SKIP
    """

    name = "cuda"

    def __init__(self, database=None, tuned=None, precision="fp32"):
        self.device = require_device()
        self.database, self.tuned, self.precision = database, dict(tuned or {}), precision
        self.memory = DeviceMemory(self.device)

    def feed_value(self, tensor, value):
        return as_device_tensor(tensor, value, self.device)

    def _configs(self, kernels):
        from ..schedule import default_config
        from ..tune.database import best_configs
        stored = best_configs(kernels, "cuda", self.database)
        return [self.tuned.get(k.key) or c or default_config(k, "cuda")
                for k, c in zip(kernels, stored)]

    def program(self, kernels, views, apart=()):
        """A callable running `kernels` in order over `views` ({id(tensor): device tensor});
        `apart` (the kernels the CPU backend compiles in units of their own) changes
        nothing here: the Triton kernels are compiled one by one."""
        produced = {id(t) for k in kernels for t in k.outputs}
        leaves = list({id(t): t for k in kernels for t in k.inputs
                       if id(t) not in produced}.values())
        outputs = [t for k in kernels for t in k.outputs]
        self.configs = self._configs(kernels)
        program, triton = compile_program(kernels, self.configs, leaves, outputs,
                                          self.precision)
        launcher = Launcher(program, triton, self.device)
        tensors = {id(b): views[id(t)] for b, t in zip(program.inputs + program.outputs,
                                                       leaves + outputs)}

        class _Owner:
            _sites = program.sites

        def run():
            raise_error(_Owner, launcher.run(tensors))
        run.source = triton.source
        return run

    def function(self, outputs, inputs):
        """A callable(*tensors) -> tuple of fresh device tensors computing `outputs`:
        their computes (fused by the caller) grouped into multi-stage kernels as
        nf.build groups them (graph/plan.grouped_kernels), as on the CPU."""
        from ..graph.plan import grouped_kernels
        computed, kernels = grouped_kernels(outputs)
        configs = self._configs(kernels)
        program, triton = compile_program(kernels, configs, list(inputs), computed,
                                          self.precision)
        return CudaFunction(list(outputs), False, list(inputs), computed, kernels, configs,
                            program, triton, None, self.device)


def _kernel_locals(program):
    from ..codegen.triton.printer import heap_locals
    return [b for func in program.kernels for b in heap_locals(func.body)]
