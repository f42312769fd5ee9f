"""Small computations the tuning tests share."""
import neoflow as nf


def matmul(m=32, n=24, k=16):
    """C = A @ B and its inputs [A, B].

    >>> C, (A, B) = matmul(8, 8, 8)
    """
    A = nf.placeholder((m, k), name="A")
    B = nf.placeholder((k, n), name="B")
    r = nf.reduce_axis(k, name="k")
    return nf.compute((m, n), lambda i, j: nf.sum(A[i, r] * B[r, j], axis=r), name="C"), [A, B]
