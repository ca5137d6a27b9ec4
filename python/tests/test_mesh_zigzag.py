# SPDX-License-Identifier: BSD-3-Clause
# dsp.Zigzag on a mesh axis (USP's causal layout: the ring axis zigzagged, the
# Ulysses axis cutting each zigzag block): dsp.redistribute into and out of it
# on every 2-axis mesh, each block checked against the global array through
# local_offsets and block_split, which are checked against the nested rule
# simulated here; split-phase; the refusals (a Blocks after an axis cutting
# its dim, two Zigzags) raised on every rank. 1-4 ranks.
import numpy as np
import pytest
from conftest import counts, world_all

import dsp

G = (2, 11, 6, 3)  # [B, S, H, d]: S = 11, uneven over every ring


def full():
    return (np.arange(np.prod(G)) % 241).astype(np.float32).reshape(G)


def shapes(n):
    return [(d, n // d) for d in range(1, n + 1) if n % d == 0]


def rows(extent, layout, mesh_shape, coords):
    """The global indices of dim 1 a rank holds, by the nested rule on index lists."""
    idx = list(range(extent))
    for p, n, c in zip(layout, mesh_shape, coords):
        if not isinstance(p, (dsp.Sharded, dsp.Zigzag)) or p.dim != 1:
            continue
        if isinstance(p, dsp.Zigzag):
            k = counts(len(idx), 2 * n)
            off = [sum(k[:i]) for i in range(2 * n)]
            idx = idx[off[c]:off[c] + k[c]] + idx[off[2 * n - 1 - c]:off[2 * n - 1 - c] + k[2 * n - 1 - c]]
        else:
            k = counts(len(idx), n)
            idx = idx[sum(k[:c]):sum(k[:c]) + k[c]]
    return idx


def expected(a, layout, mesh):
    """This rank's block of `a` under `layout`: dim 1 through local_offsets and block_split, the others by
    local_offsets and local_shape."""
    off = dsp.local_offsets(G, layout, mesh)
    shape = dsp.local_shape(G, layout, mesh)
    split = dsp.block_split(G, layout, mesh)
    r = list(range(off[1], off[1] + shape[1]))
    if split is not None:
        dim, first, second = split
        assert dim == 1
        r = r[:first] + list(range(second, second + shape[1] - first))
    b = np.take(a, r, axis=1)
    for d in (0, 2, 3):
        b = np.take(b, range(off[d], off[d] + shape[d]), axis=d)
    return np.ascontiguousarray(b), r


@pytest.mark.parametrize("which", [0, 1, 2])
def test_usp_zigzag_layouts(comm, which):
    if which >= len(shapes(comm.size)):
        pytest.skip("fewer 2-axis mesh shapes at this rank count")
    mesh_shape = shapes(comm.size)[which]
    mesh = dsp.Mesh(comm, mesh_shape)
    coords = (comm.rank // mesh_shape[1], comm.rank % mesh_shape[1])
    a = full()
    rep = (dsp.Replicated(), dsp.Replicated())
    seq = (dsp.Sharded(1), dsp.Sharded(1))
    zseq = (dsp.Zigzag(1), dsp.Sharded(1))  # the ring axis zigzagged, Ulysses inside
    zheads = (dsp.Zigzag(1), dsp.Sharded(2))  # after the Ulysses switch
    x = dsp.redistribute(a.copy(), G, rep, seq, mesh)
    z = dsp.redistribute(x, G, seq, zseq, mesh)
    want, r = expected(a, zseq, mesh)
    assert r == rows(G[1], zseq, mesh_shape, coords)
    assert world_all(np.array_equal(z, want))
    h = dsp.redistribute(z, G, zseq, zheads, mesh)
    want, r = expected(a, zheads, mesh)
    assert r == rows(G[1], zheads, mesh_shape, coords)
    assert world_all(np.array_equal(h, want))
    # On a bf16 wire: these small integers travel exactly.
    hw = dsp.redistribute(z, G, zseq, zheads, mesh, wire="bf16")
    assert world_all(np.array_equal(hw, want))
    back = dsp.redistribute(h, G, zheads, rep, mesh)
    assert world_all(np.array_equal(back, a))
    # Split-phase: the Ulysses switch posted; into the zigzag layout, the recut steps at the start.
    hs = dsp.start_redistribute(z, G, zseq, zheads, mesh)
    assert world_all(np.array_equal(hs.result(), want))
    zs = dsp.start_redistribute(x, G, seq, zseq, mesh).result()
    assert world_all(np.array_equal(zs, z))
    # A batch of two blocks.
    zz = dsp.redistribute([x, x * 2], G, seq, zheads, mesh)
    assert world_all(np.array_equal(zz[0], want) and np.array_equal(zz[1], want * 2))


def test_mesh_zigzag_refusals(comm):
    mesh = dsp.Mesh(comm, (comm.size, 1))
    a = full()
    x = dsp.redistribute(a.copy(), G, (dsp.Replicated(), dsp.Replicated()), (dsp.Sharded(1), dsp.Sharded(2)), mesh)
    cases = [
        ((dsp.Zigzag(1), dsp.Zigzag(2)), "at most one Zigzag"),
        ((dsp.Sharded(2), dsp.Blocks(2, [G[2]])), "the first axis that cuts dim D"),
    ]
    for dst, text in cases:
        with pytest.raises(dsp.Error) as e:
            dsp.redistribute(x, G, (dsp.Sharded(1), dsp.Sharded(2)), dst, mesh)
        assert text in str(e.value) or "rank" in str(e.value)
    with pytest.raises(dsp.InvalidArgument):  # Blocks sizes that are not one per rank of the axis
        dsp.local_shape(G, (dsp.Blocks(1, [G[1]] + [0] * comm.size), dsp.Sharded(2)), mesh)
    with pytest.raises(dsp.InvalidArgument):  # split-phase: the same rules
        dsp.start_redistribute(x, G, (dsp.Sharded(1), dsp.Sharded(2)), (dsp.Zigzag(1), dsp.Zigzag(2)), mesh)
    assert world_all(np.array_equal(x, dsp.redistribute(a.copy(), G, (dsp.Replicated(), dsp.Replicated()),
                                                        (dsp.Sharded(1), dsp.Sharded(2)), mesh)))


def test_mesh_zigzag_reshard_and_hdf5(comm, tmp_path_factory):
    """(Zigzag, Sharded) on a mesh moves between groups with dsp.reshard and saves and loads with dsp.hdf5 (a
    rank's block may jump: the box and its split travel)."""
    mesh = dsp.Mesh(comm, shapes(comm.size)[-1 if comm.size > 1 else 0])
    a = full()
    zseq = (dsp.Zigzag(1), dsp.Sharded(1))
    z = dsp.redistribute(a.copy(), G, (dsp.Replicated(), dsp.Replicated()), zseq, mesh)
    y = dsp.reshard(z, G, zseq, mesh, dsp.Sharded(2), comm, comm)
    want = np.take(a, range(*_range(G[2], comm.rank, comm.size)), axis=2)
    assert world_all(np.array_equal(y, want))
    back = dsp.reshard(y, G, dsp.Sharded(2), comm, zseq, mesh, comm)
    assert world_all(np.array_equal(back, z))
    if not dsp.hdf5.available:
        return
    from mpi4py import MPI
    name = MPI.COMM_WORLD.bcast(str(tmp_path_factory.mktemp("h5") / "zz.h5") if comm.rank == 0 else None)
    dsp.hdf5.save(z, G, zseq, mesh, name, "zz")
    r = dsp.hdf5.load(name, "zz", G, dsp.Replicated(), comm, np.float32)
    assert world_all(np.array_equal(r, a))
    z2 = dsp.hdf5.load(name, "zz", G, zseq, mesh, np.float32)
    assert world_all(np.array_equal(z2, z))


def _range(extent, rank, size):
    c = counts(extent, size)
    return sum(c[:rank]), sum(c[:rank]) + c[rank]


def test_comm_refusals(comm):
    """On a dsp.Comm: Partial -> Zigzag split-phase refused (as blocking), a Blocks in a tuple has no offsets."""
    a = full()
    with pytest.raises(dsp.Error):
        dsp.start_redistribute(a.copy(), G, dsp.Partial(), dsp.Zigzag(1), comm)
    with pytest.raises(dsp.InvalidArgument):
        dsp.local_offsets(G, (dsp.Blocks(1, counts(G[1], comm.size)),), comm)
