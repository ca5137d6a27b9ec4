# SPDX-License-Identifier: BSD-3-Clause
# dsp.hdf5: save under one layout, load under others (communicators and meshes, numpy and torch),
# on 1-4 ranks; bad input raises on every rank before anything is written or read.
import os
import tempfile

import numpy as np
import pytest
from conftest import block, world_all, zigzag_block
from mpi4py import MPI

import dsp

pytestmark = pytest.mark.skipif(not dsp.hdf5.available, reason="dsp built without its HDF5 component")

G = (4, 9, 5)


def full(dtype=np.float32):
    return (np.arange(np.prod(G)) % 241).astype(dtype).reshape(G)


@pytest.fixture(scope="module")
def path():
    """One file name, the same on every rank (rank 0's temporary directory)."""
    d = tempfile.mkdtemp(prefix="dsp-py-hdf5-") if MPI.COMM_WORLD.rank == 0 else None
    d = MPI.COMM_WORLD.bcast(d)
    yield os.path.join(d, "run.h5")
    MPI.COMM_WORLD.Barrier()
    if MPI.COMM_WORLD.rank == 0:
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        os.rmdir(d)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.uint64])
def test_roundtrip(comm, path, dtype):
    g = full(dtype)
    x = block(g, 1, comm.rank, comm.size)
    name = f"fields/{np.dtype(dtype).name}"
    dsp.hdf5.save(x, G, dsp.Sharded(1), comm, path, name)
    y = dsp.hdf5.load(path, name, G, dsp.Sharded(2), comm, dtype)
    assert isinstance(y, np.ndarray) and y.dtype == np.dtype(dtype)
    assert np.array_equal(y, block(g, 2, comm.rank, comm.size))
    assert np.array_equal(dsp.hdf5.load(path, name, G, dsp.Replicated(), comm, dtype), g)
    # Saved again (same shape and type): replaced in place.
    dsp.hdf5.save(g * 0 + 1, G, dsp.Replicated(), comm, path, name)
    assert np.all(dsp.hdf5.load(path, name, G, dsp.Sharded(0), comm, dtype) == 1)


def test_cuts(comm, path):
    """dsp.Zigzag and dsp.Blocks blocks save as the global dataset and load back under either."""
    g = full()
    dsp.hdf5.save(zigzag_block(g, 1, comm.rank, comm.size), G, dsp.Zigzag(1), comm, path, "cuts/z")
    assert np.array_equal(dsp.hdf5.load(path, "cuts/z", G, dsp.Replicated(), comm, np.float32), g)
    sizes = [G[1]] + [0] * (comm.size - 1) if comm.size > 1 else [G[1]]
    sizes = list(reversed(sizes))  # everything on the last rank
    y = dsp.hdf5.load(path, "cuts/z", G, dsp.Blocks(1, sizes), comm, np.float32)
    assert np.array_equal(y, g if comm.rank == comm.size - 1 else g[:, :0])
    dsp.hdf5.save(y, G, dsp.Blocks(1, sizes), comm, path, "cuts/b")
    z = dsp.hdf5.load(path, "cuts/b", G, dsp.Zigzag(2), comm, np.float32)
    assert np.array_equal(z, zigzag_block(g, 2, comm.rank, comm.size))
    if comm.size > 1:  # ranks whose Blocks sizes differ: every rank raises
        mine = sizes if comm.rank else list(reversed(sizes))
        try:
            dsp.hdf5.load(path, "cuts/b", G, dsp.Blocks(1, mine), comm, np.float32)
            raised = False
        except dsp.MismatchError as e:
            raised = "Blocks sizes disagree" in str(e) and f"(rank {comm.rank}: Blocks sizes [" in str(e)
        assert world_all(raised)


def test_mesh(comm, path):
    mesh = dsp.Mesh(comm, dsp.mesh_shape(2, comm.size))
    g = full()
    r0, r1 = mesh.coords
    x = block(block(g, 0, r0, mesh.shape[0]), 1, r1, mesh.shape[1])
    dsp.hdf5.save(x, G, (dsp.Sharded(0), dsp.Sharded(1)), mesh, path, "mesh/u")
    y = dsp.hdf5.load(path, "mesh/u", G, (dsp.Sharded(2), dsp.Replicated()), mesh, np.float32)
    assert np.array_equal(y, block(g, 2, r0, mesh.shape[0]))


def test_torch(comm, path):
    torch = pytest.importorskip("torch")
    g = torch.arange(int(np.prod(G)), dtype=torch.float32).reshape(G).to(torch.bfloat16)
    x = torch.from_numpy(block(g.float().numpy(), 0, comm.rank, comm.size)).to(torch.bfloat16)
    dsp.hdf5.save(x, G, dsp.Sharded(0), comm, path, "torch/bf16")
    y = dsp.hdf5.load(path, "torch/bf16", G, dsp.Sharded(1), comm, torch.bfloat16)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    assert torch.equal(y, torch.from_numpy(block(g.float().numpy(), 1, comm.rank, comm.size)).to(torch.bfloat16))


def raises_everywhere(exc, fn):
    try:
        fn()
    except exc as e:
        ok, text = True, str(e)
    except Exception as e:  # noqa: BLE001
        ok, text = False, f"{type(e).__name__}: {e}"
    else:
        ok, text = False, "no exception"
    assert world_all(ok), text
    return text


def test_errors(comm, path):
    g = full()
    x = block(g, 0, comm.rank, comm.size)
    dsp.hdf5.save(x, G, dsp.Sharded(0), comm, path, "err/u")
    last = comm.rank == comm.size - 1
    # Another element type, another shape, a missing dataset or file, no dtype.
    assert "element type" in raises_everywhere(
        dsp.Error, lambda: dsp.hdf5.load(path, "err/u", G, dsp.Sharded(0), comm, np.float64))
    assert "extents" in raises_everywhere(
        dsp.Error, lambda: dsp.hdf5.load(path, "err/u", (4, 9, 6), dsp.Sharded(0), comm, np.float32))
    raises_everywhere(dsp.Error, lambda: dsp.hdf5.load(path, "err/none", G, dsp.Sharded(0), comm, np.float32))
    raises_everywhere(dsp.Error, lambda: dsp.hdf5.load(path + ".missing", "u", G, dsp.Sharded(0), comm, np.float32))
    raises_everywhere(dsp.Error, lambda: dsp.hdf5.load(path, "err/u", G, dsp.Sharded(0), comm, None))
    # A bad block on one rank: nothing written (the dataset keeps its values).
    bad = x if not last else np.zeros((x.shape[0] + 1,) + x.shape[1:], np.float32)
    raises_everywhere(dsp.Error, lambda: dsp.hdf5.save(bad, G, dsp.Sharded(0), comm, path, "err/u"))
    assert np.array_equal(dsp.hdf5.load(path, "err/u", G, dsp.Replicated(), comm, np.float32), g)
    # Types HDF5 does not take here; a Partial layout; names that disagree across ranks.
    assert "element type" in raises_everywhere(
        dsp.InvalidArgument, lambda: dsp.hdf5.save(x.astype(np.bool_), G, dsp.Sharded(0), comm, path, "err/b"))
    raises_everywhere(dsp.InvalidArgument, lambda: dsp.hdf5.save(g, G, dsp.Partial(), comm, path, "err/p"))
    if comm.size > 1:
        raises_everywhere(dsp.Error, lambda: dsp.hdf5.save(x, G, dsp.Sharded(0), comm, path,
                                                           "err/v" if last else "err/w"))
    assert np.array_equal(x, block(g, 0, comm.rank, comm.size))
