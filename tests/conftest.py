# Triton reads TRITON_INTERPRET when a function is jit-decorated, and its own
# language library (tl.sum, ...) is decorated when triton is first imported --
# which torch.compile's tests may do long before the GPU tests run. So the
# GPU backend's interpreter mode (target="cuda" on CPU torch tensors, see
# tests/gpu/conftest.py) is chosen here, before any test module imports
# anything; TRITON_INTERPRET=0 on a machine with a GPU runs the kernels natively.
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
