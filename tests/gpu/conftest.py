# The GPU backend's tests run the generated Triton kernels in Triton's
# interpreter on CPU torch tensors unless a run asks otherwise
# (TRITON_INTERPRET=0 on a machine with a GPU); tests/conftest.py sets the
# variable before anything imports triton.


def pytest_configure(config):
    # masked-off lanes still compute in the interpreter (numpy); their values are never stored
    config.addinivalue_line(
        "filterwarnings", "ignore:(divide by zero|invalid value|overflow) encountered:RuntimeWarning")
