import pytest

from tessel import te


def make_matmul(M=5, N=6, K=7, names=("A", "B", "C", "k")):
    A = te.placeholder((M, K), name=names[0])
    B = te.placeholder((K, N), name=names[1])
    k = te.reduce_axis(K, name=names[3])
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name=names[2])
    return te.create_func([A, B, C], name="matmul")


@pytest.fixture
def matmul_func():
    return make_matmul()


# Property tests are deterministic: the same examples on every run and every machine.
from hypothesis import settings  # noqa: E402

settings.register_profile("tessel", derandomize=True, deadline=None)
settings.load_profile("tessel")

# The suite runs in parallel (pytest-xdist): every timing would see the other workers as a busy
# machine and be taken again and again. Load detection is tested on its own
# (test_measure_load.py, with explicit settings); everywhere else it is off, in subprocesses too.
import os  # noqa: E402

os.environ["TESSEL_BUSY_CORES"] = "0"
# Two workers' OpenMP kernels (each with a thread per core) share the cores: threads spinning
# at a barrier then wait out each other's time slices, and on a busy CI runner an 8x8x8 matmul
# candidate once ran past its 5 s limit. Waiting threads sleep instead (timings are benchmarks'
# business, not the tests').
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
