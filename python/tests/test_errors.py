# SPDX-License-Identifier: BSD-3-Clause
# Bad input on one rank or all: a dsp.Error on every rank (never a hang), the
# named class where the fault is, and the inputs untouched.
import numpy as np
import pytest
from conftest import DLPackOnly, block, raises_everywhere, world_all
from mpi4py import MPI

import dsp

G = (2, 8, 6, 3)


def full(dtype=np.float32):
    return np.arange(np.prod(G)).astype(dtype).reshape(G)


def raises_on_all(fn, cls, match):
    """A fault every rank has (the same arguments everywhere): every rank raises cls, with its own text."""
    with pytest.raises(cls, match=match):
        fn()
    assert world_all(True)


def test_dtype_differs_across_ranks(comm):
    a = full(np.float64 if comm.rank == 0 else np.float32)
    x = block(a, 1, comm.rank, comm.size)
    keep = x.copy()
    if comm.size == 1:
        return
    raises_everywhere(lambda: dsp.switch(x, G, 1, 2, comm), dsp.MismatchError, dsp.MismatchError)
    assert np.array_equal(x, keep)


def test_unsupported_dtype_on_one_rank(comm):
    a = full()
    x = block(a, 1, comm.rank, comm.size)
    if comm.rank == 0:
        x = x.astype(np.longdouble)
    keep = x.copy()
    raises_everywhere(lambda: dsp.switch(x, G, 1, 2, comm), dsp.InvalidArgument, dsp.MismatchError,
                      match="is not one dsp moves")
    assert np.array_equal(x, keep)


def test_non_contiguous_on_one_rank(comm):
    a = full()
    x = block(a, 1, comm.rank, comm.size)
    if comm.rank == 0:
        x = np.asfortranarray(x)
    raises_everywhere(lambda: dsp.switch(x, G, 1, 2, comm), dsp.InvalidArgument, dsp.MismatchError,
                      match="not C-contiguous")


def test_block_shape_wrong_on_one_rank(comm):
    a = full()
    x = block(a, 1, comm.rank, comm.size)
    if comm.rank == comm.size - 1:
        x = np.ascontiguousarray(x[:, :, :-1])
    raises_everywhere(lambda: dsp.switch(x, G, 1, 2, comm), dsp.InvalidArgument, dsp.MismatchError,
                      bad_rank=comm.size - 1, match="but this rank's block of global shape")


def test_global_shapes_disagree(comm):
    if comm.size == 1:
        return
    g = (2, 8, 6, 3) if comm.rank else (2, 8, 6, 4)
    a = np.zeros(g, np.float32)
    x = block(a, 0, comm.rank, comm.size)
    raises_everywhere(lambda: dsp.switch(x, g, 0, 1, comm), dsp.MismatchError, dsp.MismatchError)


def test_layout_past_the_rank(comm):
    a = full()
    x = block(a, 1, comm.rank, comm.size)
    raises_on_all(lambda: dsp.redistribute(x, G, dsp.Sharded(1), dsp.Sharded(4), comm), dsp.InvalidArgument,
                  "a Sharded<D> in To names a dim D that is not less than the tensor's rank")
    keep = x.copy()
    raises_on_all(lambda: dsp.switch(x, G, 1, 4, comm), dsp.InvalidArgument, "not less than the tensor's rank")
    assert np.array_equal(x, keep)
    with pytest.raises(dsp.InvalidArgument):
        dsp.Sharded(-1)


def test_mesh_layout_needs_one_placement_per_axis(comm):
    mesh = dsp.Mesh(comm, dsp.mesh_shape(2, comm.size))
    x = np.zeros(dsp.local_shape(G, (dsp.Sharded(0), dsp.Sharded(1)), mesh), np.float32)
    raises_on_all(lambda: dsp.redistribute(x, G, (dsp.Sharded(0), dsp.Sharded(1)), dsp.Sharded(2), mesh),
                  dsp.InvalidArgument, "exactly one placement per mesh axis")


def test_wire_rules(comm):
    a = full(np.int32)
    x = block(a, 1, comm.rank, comm.size)
    raises_on_all(lambda: dsp.switch(x, G, 1, 2, comm, wire="bf16"), dsp.InvalidArgument, "travels exact only")
    f = full()
    raises_on_all(lambda: dsp.redistribute(f, G, dsp.Partial(), dsp.Sharded(1), comm, wire="bf16"),
                  dsp.InvalidArgument, "reduction")
    with pytest.raises(dsp.InvalidArgument):
        dsp.switch(block(f, 1, comm.rank, comm.size), G, 1, 2, comm, wire="int4")


def test_partial_needs_a_reducible_type(comm):
    a = full(np.int8)
    raises_on_all(lambda: dsp.redistribute(a, G, dsp.Partial(), dsp.Replicated(), comm), dsp.InvalidArgument,
                  "Partial placement reduces elements")


def test_not_an_array(comm):
    with pytest.raises(dsp.InvalidArgument, match="numpy array or an object with __dlpack__"):
        dsp.switch([[1, 2]], (2, 2), 0, 1, comm)


def test_freed_mpi4py_communicator(comm):
    sub = MPI.COMM_WORLD.Dup()
    c = dsp.Comm(sub)
    sub.Free()  # dsp keeps its own duplicate: still usable
    a = full()
    y = dsp.switch(block(a, 1, c.rank, c.size), G, 1, 2, c)
    assert np.array_equal(y, block(a, 2, c.rank, c.size))
    with pytest.raises(dsp.InvalidArgument, match="COMM_NULL"):
        dsp.Comm(sub)
    with pytest.raises(dsp.InvalidArgument, match="mpi4py communicator"):
        dsp.Comm(42)


def test_errors_are_dsp_errors():
    assert issubclass(dsp.InvalidArgument, dsp.Error) and issubclass(dsp.InvalidArgument, ValueError)
    for cls in (dsp.MismatchError, dsp.ResourceError, dsp.UsageError, dsp.TimeoutError, dsp.BackendError):
        assert issubclass(cls, dsp.Error)
    assert issubclass(dsp.Error, RuntimeError)


def test_batch_and_rank_limits(comm):
    x = np.zeros(dsp.local_shape(G, dsp.Sharded(1), comm), np.float32)
    raises_on_all(lambda: dsp.redistribute([], G, dsp.Sharded(1), dsp.Sharded(2), comm), dsp.InvalidArgument,
                  "a batch has 1 to 16 blocks")
    raises_on_all(lambda: dsp.redistribute([x] * 17, G, dsp.Sharded(1), dsp.Sharded(2), comm), dsp.InvalidArgument,
                  "a batch has 1 to 16 blocks")
    g9 = (1, ) * 9
    raises_on_all(lambda: dsp.switch(np.zeros(g9, np.float32), g9, 0, 1, comm), dsp.InvalidArgument,
                  "a tensor has 1 to 8 dims")


def test_unreadable_arguments_on_one_rank(comm):
    # Arguments the package cannot read, on rank 0 only: a list as a block, a shape that is not a sequence,
    # a placement that is not one. Every rank raises; nobody waits.
    x = np.zeros(dsp.local_shape(G, dsp.Sharded(1), comm), np.float32)
    bad = comm.rank == 0
    raises_everywhere(lambda: dsp.switch([[1, 2]] if bad else x, G, 1, 2, comm), dsp.InvalidArgument,
                      dsp.MismatchError, match="numpy array or an object with __dlpack__")
    raises_everywhere(lambda: dsp.switch(x, 7 if bad else G, 1, 2, comm), dsp.InvalidArgument, dsp.MismatchError,
                      match="global_shape is a sequence")
    raises_everywhere(lambda: dsp.redistribute(x, G, 1 if bad else dsp.Sharded(1), dsp.Sharded(2), comm),
                      dsp.InvalidArgument, dsp.MismatchError, match="src is a placement")
    raises_everywhere(lambda: dsp.gather(x, G, 1, comm, wire="int4" if bad else None), dsp.InvalidArgument,
                      dsp.MismatchError, match="wire is None")


def test_batch_type_names_in_the_message(comm):
    if comm.size == 1:
        return
    a = full()
    x = block(a, 1, comm.rank, comm.size)
    other = x.astype(np.float64) if comm.rank == 0 else x
    e = raises_everywhere(lambda: dsp.redistribute([x, other], G, dsp.Sharded(1), dsp.Sharded(2), comm),
                          dsp.MismatchError, dsp.MismatchError)
    # numpy's names, as Python users know them (not C++'s float, double)
    assert "float32,float64" in str(e) and "float32,float32" in str(e), str(e)


class NoRoomForResults(DLPackOnly):
    """An array known through DLPack whose results cannot be made (its new_empty raises, as a device out of
    memory would)."""

    def new_empty(self, shape):
        raise MemoryError("no room for the result")


def test_result_that_cannot_be_made_on_one_rank(comm):
    """Rank 0 cannot allocate its result: it raises, and the others do instead of waiting for it in the
    collective (the failure goes through the agreement check)."""
    x = block(full(), 1, comm.rank, comm.size)
    before = x.copy()
    mine = NoRoomForResults(x) if comm.rank == 0 else x
    raises_everywhere(lambda: dsp.switch(mine, G, 1, 2, comm), dsp.InvalidArgument, dsp.MismatchError,
                      match="the output could not be made")
    raises_everywhere(lambda: dsp.redistribute(mine, G, dsp.Sharded(1), dsp.Zigzag(2), comm), dsp.InvalidArgument,
                      dsp.MismatchError, match="the output could not be made")
    raises_everywhere(lambda: dsp.start_redistribute(mine, G, dsp.Sharded(1), dsp.Replicated(), comm).wait(),
                      dsp.InvalidArgument, dsp.MismatchError, match="the output could not be made")
    assert np.array_equal(x, before)
    assert np.array_equal(dsp.switch(x, G, 1, 2, comm), block(full(), 2, comm.rank, comm.size))  # and dsp goes on
