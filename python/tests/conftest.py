# SPDX-License-Identifier: BSD-3-Clause
# Shared by the Python tests: they run under mpiexec at 1 to 4 ranks (CTest:
# python.<file>.<n>), every rank running every test in the same order.
import numpy as np
import pytest
from mpi4py import MPI

import dsp


@pytest.fixture(scope="session")
def comm():
    return dsp.Comm(MPI.COMM_WORLD)


def counts(n, parts):
    """dsp's block partition of n over parts: the first n % parts blocks one longer."""
    return [n // parts + (1 if k < n % parts else 0) for k in range(parts)]


def block(full, dim, rank, size):
    """This rank's block of `full` under Sharded(dim), as dsp cuts it."""
    c = counts(full.shape[dim], size)
    off = sum(c[:rank])
    return np.ascontiguousarray(np.take(full, range(off, off + c[rank]), axis=dim))


def zigzag_block(full, dim, rank, size):
    """This rank's block of `full` under dsp.Zigzag(dim): chunks rank and 2N-1-rank of the 2N-chunk rule,
    in that order."""
    c = counts(full.shape[dim], 2 * size)
    off = [sum(c[:k]) for k in range(2 * size)]
    rows = list(range(off[rank], off[rank] + c[rank])) + \
        list(range(off[2 * size - 1 - rank], off[2 * size - 1 - rank] + c[2 * size - 1 - rank]))
    return np.ascontiguousarray(np.take(full, rows, axis=dim))


def raises_everywhere(fn, here, elsewhere=dsp.Error, bad_rank=0, match=None):
    """fn() raises `here` on bad_rank and `elsewhere` on the others, on every rank."""
    rank = MPI.COMM_WORLD.rank
    want = here if rank == bad_rank else elsewhere
    with pytest.raises(want) as e:
        fn()
    if match and rank == bad_rank:
        assert match in str(e.value), str(e.value)
    assert world_all(True)  # every rank got here: nobody hung
    return e.value


def world_all(flag):
    """Whether `flag` holds on every rank."""
    return MPI.COMM_WORLD.allreduce(bool(flag), op=MPI.LAND)


class DLPackOnly:
    """An array type dsp knows only through __dlpack__ (and new_empty for its results)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def new_empty(self, shape):
        return DLPackOnly(np.empty(shape, self.a.dtype))
