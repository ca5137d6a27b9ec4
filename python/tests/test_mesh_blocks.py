# SPDX-License-Identifier: BSD-3-Clause
# dsp.Blocks on a mesh axis (USP over packed documents: whole documents per
# ring rank, the Ulysses axis cutting each ring block): dsp.redistribute into,
# out of and between such layouts (the same sizes: the ring axis stays; other
# sizes: a rebalance) on every 2-axis mesh, each block checked against the
# global array through local_offsets and local_shape, which are checked
# against the nested rule simulated here; a batch, a wire, reshard and hdf5;
# bad sizes raised on every rank. 1-4 ranks.
import numpy as np
import pytest
from conftest import counts, world_all

import dsp

G = (2, 13, 6, 3)  # [B, S, H, d]


def full():
    return (np.arange(np.prod(G)) % 241).astype(np.float32).reshape(G)


def shapes(n):
    return [(d, n // d) for d in range(1, n + 1) if n % d == 0]


def docs(parts, seed):
    """Sizes of `parts` blocks summing to G[1], an empty one among them where parts > 1 (the same on every rank)."""
    rng = np.random.default_rng(seed)
    s = [0] * parts
    for _ in range(G[1]):
        s[int(rng.integers(parts))] += 1
    if parts > 1:
        s[-1] += s[0]
        s[0] = 0
    return s


def rows(layout, mesh_shape, coords):
    """The global indices of dim 1 a rank holds, by the nested rule on index lists."""
    idx = list(range(G[1]))
    for p, n, c in zip(layout, mesh_shape, coords):
        if isinstance(p, dsp.Blocks) and p.dim == 1:
            idx = idx[sum(p.sizes[:c]):sum(p.sizes[:c + 1])]
        elif isinstance(p, dsp.Sharded) and p.dim == 1:
            k = counts(len(idx), n)
            idx = idx[sum(k[:c]):sum(k[:c]) + k[c]]
    return idx


def expected(a, layout, mesh):
    off = dsp.local_offsets(G, layout, mesh)
    shape = dsp.local_shape(G, layout, mesh)
    assert dsp.block_split(G, layout, mesh) is None  # Blocks and Sharded: one box
    b = a
    for d in range(4):
        b = np.take(b, range(off[d], off[d] + shape[d]), axis=d)
    return np.ascontiguousarray(b), list(range(off[1], off[1] + shape[1]))


@pytest.mark.parametrize("which", [0, 1, 2])
def test_usp_blocks_layouts(comm, which):
    if which >= len(shapes(comm.size)):
        pytest.skip("fewer 2-axis mesh shapes at this rank count")
    mesh_shape = shapes(comm.size)[which]
    mesh = dsp.Mesh(comm, mesh_shape)
    coords = (comm.rank // mesh_shape[1], comm.rank % mesh_shape[1])
    a = full()
    rep = (dsp.Replicated(), dsp.Replicated())
    sizes = docs(mesh_shape[0], 3)
    bseq = (dsp.Blocks(1, sizes), dsp.Sharded(1))  # documents per ring rank, Ulysses inside
    bheads = (dsp.Blocks(1, sizes), dsp.Sharded(2))  # after the Ulysses switch
    x = dsp.redistribute(a.copy(), G, rep, bseq, mesh)
    want, r = expected(a, bseq, mesh)
    assert r == rows(bseq, mesh_shape, coords)
    assert world_all(np.array_equal(x, want))
    h = dsp.redistribute(x, G, bseq, bheads, mesh)  # the same sizes: one switch on the Ulysses axis
    want, r = expected(a, bheads, mesh)
    assert r == rows(bheads, mesh_shape, coords)
    assert world_all(np.array_equal(h, want))
    hw = dsp.redistribute(x, G, bseq, bheads, mesh, wire="bf16")  # small integers: exact on bf16
    assert world_all(np.array_equal(hw, want))
    # A rebalance: other sizes on the ring axis, and Blocks moved to the other axis.
    other = (dsp.Blocks(1, docs(mesh_shape[0], 4)), dsp.Sharded(2))
    o = dsp.redistribute(h, G, bheads, other, mesh)
    assert world_all(np.array_equal(o, expected(a, other, mesh)[0]))
    inner = (dsp.Sharded(2), dsp.Blocks(1, docs(mesh_shape[1], 5)))
    i = dsp.redistribute(o, G, other, inner, mesh)
    assert world_all(np.array_equal(i, expected(a, inner, mesh)[0]))
    # Split-phase: the Ulysses switch posted (the same sizes); a rebalance's recut at the start.
    hs = dsp.start_redistribute(x, G, bseq, bheads, mesh)
    assert world_all(np.array_equal(hs.result(), want))
    os_ = dsp.start_redistribute(h, G, bheads, other, mesh).result()
    assert world_all(np.array_equal(os_, expected(a, other, mesh)[0]))
    # A batch of two blocks, then back to the whole tensor.
    hh = dsp.redistribute([x, x * 2], G, bseq, bheads, mesh)
    assert world_all(np.array_equal(hh[0], want) and np.array_equal(hh[1], want * 2))
    back = dsp.redistribute(i, G, inner, rep, mesh)
    assert world_all(np.array_equal(back, a))


def test_mesh_blocks_errors(comm):
    mesh = dsp.Mesh(comm, (comm.size, 1))
    a = full()
    seq = (dsp.Sharded(1), dsp.Sharded(2))
    x = dsp.redistribute(a.copy(), G, (dsp.Replicated(), dsp.Replicated()), seq, mesh)
    keep = x.copy()
    cases = [
        ((dsp.Blocks(1, [G[1]] + [0] * comm.size), dsp.Sharded(2)), "one size per rank of its mesh axis"),
        ((dsp.Blocks(1, [G[1] + 1] + [0] * (comm.size - 1)), dsp.Sharded(2)), "sum to"),
        ((dsp.Blocks(1, [G[1]] + [0] * (comm.size - 1)), dsp.Blocks(2, [G[2]])), "at most one Blocks"),
    ]
    for dst, text in cases:
        with pytest.raises(dsp.InvalidArgument) as e:
            dsp.redistribute(x, G, seq, dst, mesh)
        assert text in str(e.value)
    if comm.size > 1:  # ranks whose sizes differ: every rank raises, naming its own sizes
        mine = [0] * comm.size
        mine[comm.rank] = G[1]
        with pytest.raises(dsp.MismatchError) as e:
            dsp.redistribute(x, G, seq, (dsp.Blocks(1, mine), dsp.Sharded(2)), mesh)
        assert "Blocks sizes" in str(e.value)
    with pytest.raises(dsp.InvalidArgument):  # split-phase: the same checks
        dsp.start_redistribute(x, G, seq, (dsp.Blocks(1, [G[1]] + [0] * comm.size), dsp.Sharded(2)), mesh)
    assert world_all(np.array_equal(x, keep))


def test_mesh_blocks_reshard_and_hdf5(comm, tmp_path_factory):
    mesh = dsp.Mesh(comm, shapes(comm.size)[-1 if comm.size > 1 else 0])
    a = full()
    bseq = (dsp.Blocks(1, docs(mesh.shape[0], 7)), dsp.Sharded(1))
    x = dsp.redistribute(a.copy(), G, (dsp.Replicated(), dsp.Replicated()), bseq, mesh)
    y = dsp.reshard(x, G, bseq, mesh, dsp.Sharded(2), comm, comm)
    c = counts(G[2], comm.size)
    assert world_all(np.array_equal(y, np.take(a, range(sum(c[:comm.rank]), sum(c[:comm.rank + 1])), axis=2)))
    back = dsp.reshard(y, G, dsp.Sharded(2), comm, bseq, mesh, comm)
    assert world_all(np.array_equal(back, x))
    if not dsp.hdf5.available:
        return
    from mpi4py import MPI
    name = MPI.COMM_WORLD.bcast(str(tmp_path_factory.mktemp("h5") / "bb.h5") if comm.rank == 0 else None)
    dsp.hdf5.save(x, G, bseq, mesh, name, "bb")
    r = dsp.hdf5.load(name, "bb", G, dsp.Replicated(), comm, np.float32)
    assert world_all(np.array_equal(r, a))
    other = (dsp.Blocks(1, docs(mesh.shape[0], 8)), dsp.Sharded(1))
    x2 = dsp.hdf5.load(name, "bb", G, other, mesh, np.float32)
    assert world_all(np.array_equal(x2, expected(a, other, mesh)[0]))


def test_comm_blocks_split_phase(comm):
    """On a dsp.Comm: Sharded -> Blocks -> Blocks (other sizes) -> Sharded, split-phase, against blocking."""
    a = full()
    c = counts(G[2], comm.size)
    x = np.ascontiguousarray(a[:, :, sum(c[:comm.rank]):sum(c[:comm.rank + 1])])
    b1, b2 = dsp.Blocks(1, docs(comm.size, 11)), dsp.Blocks(1, docs(comm.size, 12))
    y = dsp.start_redistribute(x, G, dsp.Sharded(2), b1, comm).result()
    assert world_all(np.array_equal(y, dsp.redistribute(x, G, dsp.Sharded(2), b1, comm)))
    z = dsp.start_redistribute(y, G, b1, b2, comm, wire="bf16").result()
    assert world_all(np.array_equal(z, dsp.redistribute(y, G, b1, b2, comm)))
    back = dsp.start_redistribute(z, G, b2, dsp.Sharded(2), comm).result()
    assert world_all(np.array_equal(back, x))
