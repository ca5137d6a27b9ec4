# SPDX-License-Identifier: BSD-3-Clause
# dsp.Zigzag and dsp.Blocks (attention's layouts) on numpy and torch blocks:
# redistribute to and from Sharded, Replicated and each other, one tensor or a
# batch, against the global array; uneven extents and empty chunks; every
# refusal raised on every rank with the input untouched. 1-4 ranks.
import numpy as np
import pytest
import torch
from conftest import block, counts, world_all, zigzag_block

import dsp

G = (2, 7, 5, 3)  # dim 1: 7 rows, fewer than 2N from 4 ranks on (empty chunks)


def full(dtype=np.float32):
    return (np.arange(np.prod(G)) % 251).astype(dtype).reshape(G)


def sizes_for(extent, size, skew):
    """Block sizes of `extent` over `size` ranks: all on the last rank (skew) or dsp's rule."""
    if skew:
        return [0] * (size - 1) + [extent]
    return counts(extent, size)


def blocks_block(a, dim, sizes, rank):
    off = sum(sizes[:rank])
    return np.ascontiguousarray(np.take(a, range(off, off + sizes[rank]), axis=dim))


@pytest.mark.parametrize("dim", [1, 2])
def test_zigzag_to_and_from_sharded(comm, dim):
    a = full()
    x = block(a, 2, comm.rank, comm.size)
    z = dsp.redistribute(x, G, dsp.Sharded(2), dsp.Zigzag(dim), comm)
    assert z.shape == dsp.local_shape(G, dsp.Zigzag(dim), comm)
    assert np.array_equal(z, zigzag_block(a, dim, comm.rank, comm.size))
    assert np.array_equal(x, block(a, 2, comm.rank, comm.size))  # input untouched
    back = dsp.redistribute(z, G, dsp.Zigzag(dim), dsp.Sharded(3), comm)
    assert np.array_equal(back, block(a, 3, comm.rank, comm.size))
    r = dsp.redistribute(z, G, dsp.Zigzag(dim), dsp.Replicated(), comm)
    assert np.array_equal(r, a)


@pytest.mark.parametrize("skew", [False, True])
def test_blocks(comm, skew):
    a = full(np.float64)
    sizes = sizes_for(G[1], comm.size, skew)
    x = block(a, 0, comm.rank, comm.size)
    b = dsp.redistribute(x, G, dsp.Sharded(0), dsp.Blocks(1, sizes), comm)
    assert b.shape == dsp.local_shape(G, dsp.Blocks(1, sizes), comm)
    assert dsp.local_offsets(G, dsp.Blocks(1, sizes), comm)[1] == sum(sizes[:comm.rank])
    assert np.array_equal(b, blocks_block(a, 1, sizes, comm.rank))
    z = dsp.redistribute(b, G, dsp.Blocks(1, sizes), dsp.Zigzag(1), comm)
    assert np.array_equal(z, zigzag_block(a, 1, comm.rank, comm.size))


def test_batch_and_torch(comm):
    a = full()
    xs = [block(a * k, 1, comm.rank, comm.size) for k in (1, 2)]
    zs = dsp.redistribute(xs, G, dsp.Sharded(1), dsp.Zigzag(1), comm)
    assert isinstance(zs, list) and len(zs) == 2
    for k, z in zip((1, 2), zs):
        assert np.array_equal(z, zigzag_block(a * k, 1, comm.rank, comm.size))
    t = torch.from_numpy(zigzag_block(a, 1, comm.rank, comm.size))
    s = dsp.redistribute(t, G, dsp.Zigzag(1), dsp.Sharded(2), comm)
    assert isinstance(s, torch.Tensor) and np.array_equal(s.numpy(), block(a, 2, comm.rank, comm.size))


def test_wire(comm):
    """On a wire, each element arrives as the wire's rounding of it (bf16 as torch rounds); a split is exact."""
    a = ((np.arange(np.prod(G)) % 251) * 0.0137 + 0.3).astype(np.float32).reshape(G)
    bf = torch.from_numpy(a).to(torch.bfloat16).to(torch.float32).numpy()
    x = block(a, 2, comm.rank, comm.size)
    z = dsp.redistribute(x, G, dsp.Sharded(2), dsp.Zigzag(1), comm, wire="bf16")
    assert np.array_equal(z, zigzag_block(bf, 1, comm.rank, comm.size))
    assert np.array_equal(x, block(a, 2, comm.rank, comm.size))  # input untouched
    zs = dsp.redistribute([x, 2 * x], G, dsp.Sharded(2), dsp.Zigzag(1), comm, wire="bf16")
    assert np.array_equal(zs[1], zigzag_block(torch.from_numpy(2 * a).to(torch.bfloat16).float().numpy(), 1,
                                              comm.rank, comm.size))
    s = dsp.redistribute(zigzag_block(a, 1, comm.rank, comm.size), G, dsp.Zigzag(1), dsp.Sharded(3), comm,
                         wire="fp8_e4m3")
    assert np.all(np.abs(s - block(a, 3, comm.rank, comm.size)) <= np.abs(block(a, 3, comm.rank, comm.size)) / 16 + 0.01)
    split = dsp.redistribute(a, G, dsp.Replicated(), dsp.Zigzag(1), comm, wire="bf16")
    assert np.array_equal(split, zigzag_block(a, 1, comm.rank, comm.size))


def test_batch_of_other_extents(comm):
    """GQA's Q [2, 7, 4, 3] with K [2, 7, 2, 3] in one call: a switch, then to Zigzag on a wire; misuse raises."""
    gq, gk = (2, 7, 4, 3), (2, 7, 2, 3)
    q = (np.arange(np.prod(gq)) % 97).astype(np.float32).reshape(gq)
    k = (np.arange(np.prod(gk)) % 89).astype(np.float32).reshape(gk)
    xs = [block(q, 1, comm.rank, comm.size), block(k, 1, comm.rank, comm.size)]
    qh, kh = dsp.switch(xs, [gq, gk], 1, 2, comm)
    assert np.array_equal(qh, block(q, 2, comm.rank, comm.size))
    assert np.array_equal(kh, block(k, 2, comm.rank, comm.size))  # 2 heads: empty blocks from 3 ranks on
    zq, zk = dsp.redistribute([qh, torch.from_numpy(kh)], [gq, gk], dsp.Sharded(2), dsp.Zigzag(1), comm, wire="bf16")
    assert np.array_equal(zq, zigzag_block(q, 1, comm.rank, comm.size))  # integers below 256: exact in bf16
    assert isinstance(zk, torch.Tensor) and np.array_equal(zk.numpy(), zigzag_block(k, 1, comm.rank, comm.size))
    assert np.array_equal(xs[1], block(k, 1, comm.rank, comm.size))  # inputs untouched
    # one shape for two blocks; shapes of different ranks
    assert expect_everywhere(lambda: dsp.switch(xs, [gq], 1, 2, comm), dsp.Error, "global_shape is a list of 1 shapes")
    assert expect_everywhere(lambda: dsp.switch(xs, [gq, (2, 7)], 1, 2, comm), dsp.Error, "another number of dims")
    # On every 2-axis mesh (USP with GQA: the sequence over both axes, Ulysses' heads on axis 1), one call
    # too; and back, on a wire, to the sequence zigzagged on the ring axis.
    def mesh_block(a, layout, m):
        off, shape = dsp.local_offsets(a.shape, layout, m), dsp.local_shape(a.shape, layout, m)
        return a[tuple(slice(o, o + s) for o, s in zip(off, shape))]
    seq, heads = (dsp.Sharded(1), dsp.Sharded(1)), (dsp.Sharded(1), dsp.Sharded(2))
    for shape in [(d, comm.size // d) for d in range(1, comm.size + 1) if comm.size % d == 0]:
        m = dsp.Mesh(comm, shape)
        ms = [np.ascontiguousarray(mesh_block(q, seq, m)), np.ascontiguousarray(mesh_block(k, seq, m))]
        mq, mk = dsp.redistribute(ms, [gq, gk], seq, heads, m)
        assert np.array_equal(mq, mesh_block(q, heads, m)) and np.array_equal(mk, mesh_block(k, heads, m))
        back = dsp.redistribute([mq, mk], [gq, gk], heads, (dsp.Zigzag(1), dsp.Sharded(1)), m, wire="bf16")
        expect = [dsp.redistribute(ms[i], g, seq, (dsp.Zigzag(1), dsp.Sharded(1)), m) for i, g in ((0, gq), (1, gk))]
        assert all(np.array_equal(b, e) for b, e in zip(back, expect))
        assert expect_everywhere(lambda: dsp.redistribute(ms, [gq], seq, heads, m), dsp.Error,
                                 "global_shape is a list of 1 shapes")
        assert expect_everywhere(lambda: dsp.start_redistribute(ms, gq, seq, heads, m).wait(), dsp.Error,
                                 "its shape is")
        assert expect_everywhere(lambda: dsp.start_redistribute(ms, [gq, gk], seq, heads, m).wait(), dsp.Error,
                                 "a batch of different extents moves blocking (dsp.redistribute), not split-phase")
        # Blocks shared by a batch whose extents differ along its dim: refused (on a mesh a batch shares them).
        sizes = [gq[1]] + [0] * (shape[0] - 1)
        blk = (dsp.Blocks(1, sizes), dsp.Sharded(1))
        assert expect_everywhere(lambda: dsp.redistribute(ms, [gq, (2, 5, 2, 3)], seq, blk, m), dsp.Error,
                                 "which dsp.Blocks cuts; on a mesh, the tensors of a batch share their Blocks sizes")


def test_pieces():
    z = dsp.Zigzag(1)
    assert z.pieces(8, 0, 2) == [(0, 2), (6, 2)] and z.pieces(8, 1, 2) == [(2, 2), (4, 2)]
    assert dsp.Blocks(0, [3, 0, 2]).pieces(5, 2, 3) == [(3, 2)]
    assert dsp.Blocks(0, [3, 2]) == dsp.Blocks(0, [3, 2]) and dsp.Blocks(0, [3, 2]) != dsp.Blocks(0, [2, 3])
    assert dsp.Zigzag(1) != dsp.Sharded(1) and repr(dsp.Zigzag(2)) == "dsp.Zigzag(2)"
    with pytest.raises(dsp.InvalidArgument):
        dsp.Zigzag(-1)
    with pytest.raises(dsp.InvalidArgument):
        dsp.Blocks(0, [1, -1])
    with pytest.raises(dsp.InvalidArgument):
        z.pieces(8, -1, 2)  # a rank out of range
    with pytest.raises(dsp.InvalidArgument):
        z.pieces(8, 2, 2)
    with pytest.raises(dsp.InvalidArgument):
        dsp.Blocks(0, [3, 0, 2]).pieces(6, 0, 3)  # sizes that do not sum to the extent


def expect_everywhere(fn, kind, text):
    """fn() raises `kind` whose message contains `text` on this rank; True on every rank when it did."""
    try:
        fn()
    except kind as e:
        return world_all(text in str(e))
    return world_all(False)


def test_refusals_on_every_rank(comm):
    a = full()
    x = block(a, 2, comm.rank, comm.size)
    keep = x.copy()
    # a wire that does not carry the element type
    x64 = block(full(np.float64), 2, comm.rank, comm.size)
    assert expect_everywhere(lambda: dsp.redistribute(x64, G, dsp.Sharded(2), dsp.Zigzag(1), comm, wire="bf16"),
                             dsp.Error, "does not carry double")
    # split-phase into Blocks sizes that do not sum to the extent (split-phase Blocks: test_mesh_blocks.py)
    assert expect_everywhere(lambda: dsp.start_redistribute(x, G, dsp.Sharded(2),
                                                            dsp.Blocks(1, [1] * comm.size), comm).result(),
                             dsp.Error, "sum to")
    # Partial
    assert expect_everywhere(lambda: dsp.redistribute(a, G, dsp.Partial(), dsp.Zigzag(1), comm),
                             dsp.Error, "between Partial and Zigzag")
    # Blocks sizes that do not sum to the extent
    bad = [1] * comm.size
    assert expect_everywhere(lambda: dsp.redistribute(x, G, dsp.Sharded(2), dsp.Blocks(1, bad), comm),
                             dsp.Error, "Blocks")
    # a dim past the rank
    assert expect_everywhere(lambda: dsp.redistribute(x, G, dsp.Sharded(2), dsp.Zigzag(4), comm),
                             dsp.Error, "not less than the tensor's rank")
    # a block of the wrong shape (rank 0's only: the others raise too)
    y = x if comm.rank else np.zeros((1, 1, 1, 1), np.float32)
    assert expect_everywhere(lambda: dsp.redistribute(y, G, dsp.Sharded(2), dsp.Zigzag(1), comm),
                             dsp.Error, "")
    # ranks whose Blocks sizes disagree
    if comm.size > 1:
        sizes = sizes_for(G[1], comm.size, comm.rank == 0)
        assert expect_everywhere(lambda: dsp.redistribute(x, G, dsp.Sharded(2), dsp.Blocks(1, sizes), comm),
                                 dsp.MismatchError, "Blocks sizes")
    # ranks that disagree on the layout (one takes the cut path, the others the planner's)
    if comm.size > 1:
        to = dsp.Zigzag(1) if comm.rank == 0 else dsp.Sharded(1)
        assert expect_everywhere(lambda: dsp.redistribute(x, G, dsp.Sharded(2), to, comm), dsp.MismatchError, "")
    # Blocks on a mesh after an axis that cuts its dim (Blocks on a mesh moves: test_mesh_blocks.py)
    if comm.size % 2 == 0:
        m = dsp.Mesh(comm, (2, comm.size // 2))
        xm = np.zeros(dsp.local_shape(G, (dsp.Sharded(1), dsp.Sharded(2)), m), np.float32)
        assert expect_everywhere(
            lambda: dsp.redistribute(xm, G, (dsp.Sharded(1), dsp.Sharded(2)),
                                     (dsp.Sharded(1), dsp.Blocks(1, [G[1]] + [0] * (comm.size // 2 - 1))), m),
            dsp.Error, "the first axis that cuts dim D")
    assert np.array_equal(x, keep)
    # still usable afterwards
    z = dsp.redistribute(x, G, dsp.Sharded(2), dsp.Zigzag(1), comm)
    assert np.array_equal(z, zigzag_block(a, 1, comm.rank, comm.size))


def test_autograd(comm):
    import dsp.torch as dt
    a = full()
    x = torch.from_numpy(block(a, 2, comm.rank, comm.size)).requires_grad_()
    z = dt.redistribute(x, G, dsp.Sharded(2), dsp.Zigzag(1), comm)
    assert np.array_equal(z.detach().numpy(), zigzag_block(a, 1, comm.rank, comm.size))
    z.backward(torch.from_numpy(zigzag_block(3 * a, 1, comm.rank, comm.size)))  # backward: Zigzag(1) -> Sharded(2)
    assert np.array_equal(x.grad.numpy(), block(3 * a, 2, comm.rank, comm.size))
