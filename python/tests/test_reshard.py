# SPDX-License-Identifier: BSD-3-Clause
# dsp.reshard: a tensor moved between two groups of ranks of one parent, on 1-4 ranks, against the
# global array; bad input raises on every rank of the parent with the input untouched.
import numpy as np
import pytest
from conftest import block, world_all, zigzag_block
from mpi4py import MPI

import dsp

G = (3, 7, 5)


def full(dtype=np.float32):
    return (np.arange(np.prod(G)) % 239).astype(dtype).reshape(G)


def group(members):
    """A dsp.Comm of the world ranks in `members` on those ranks, None on the others (collective)."""
    w = MPI.COMM_WORLD
    inside = w.rank in members
    sub = w.Split(0 if inside else MPI.UNDEFINED, w.rank)
    if not inside:
        return None
    g = dsp.Comm(sub)
    sub.Free()  # dsp keeps its own duplicate
    return g


def groups_cases(n):
    """(source ranks, target ranks): disjoint, overlapping, shrinking, and ranks in neither."""
    cases = [(range(n), range(n)), (range(n), [n - 1])]
    if n >= 2:
        cases += [(range(0, n, 2), range(1, n, 2)), ([0], range(n))]
    if n >= 3:
        cases.append(([0], [n - 1]))  # the middle ranks hold neither
    return cases


@pytest.mark.parametrize("case", range(5))
@pytest.mark.parametrize("src_dim,dst_dim", [(0, 2), (1, 1), (2, None), (None, 1)])
def test_between_groups(comm, case, src_dim, dst_dim):
    cases = groups_cases(comm.size)
    if case >= len(cases):
        pytest.skip("needs more ranks")
    a_ranks, b_ranks = cases[case]
    a, b = group(list(a_ranks)), group(list(b_ranks))
    src = dsp.Replicated() if src_dim is None else dsp.Sharded(src_dim)
    dst = dsp.Replicated() if dst_dim is None else dsp.Sharded(dst_dim)
    g = full()
    x = None
    if a is not None:
        x = g.copy() if src_dim is None else block(g, src_dim, a.rank, a.size)
    before = None if x is None else x.copy()
    y = dsp.reshard(x, G, src, a, dst, b, comm, dtype=np.float32)
    if b is None:
        assert y is None
    else:
        want = g if dst_dim is None else block(g, dst_dim, b.rank, b.size)
        assert isinstance(y, np.ndarray) and y.dtype == np.float32 and np.array_equal(y, want)
    if x is not None:
        assert np.array_equal(x, before)


def test_mesh_target(comm):
    """From a communicator to a 2-axis mesh of the same ranks: the nested blocks."""
    mesh = dsp.Mesh(comm, dsp.mesh_shape(2, comm.size))
    g = full(np.int64)
    y = dsp.reshard(block(g, 1, comm.rank, comm.size), G, dsp.Sharded(1), comm,
                    (dsp.Sharded(0), dsp.Sharded(2)), mesh, comm)
    r0, r1 = mesh.coords
    want = block(block(g, 0, r0, mesh.shape[0]), 2, r1, mesh.shape[1])
    assert y.dtype == np.int64 and np.array_equal(y, want)


def test_torch(comm):
    torch = pytest.importorskip("torch")
    n = comm.size
    a, b = group([0]), group(list(range(n)))
    g = torch.arange(int(np.prod(G)), dtype=torch.float64).reshape(G)
    x = g.clone() if a is not None else None
    y = dsp.reshard(x, G, dsp.Replicated(), a, dsp.Sharded(1), b, comm, dtype=torch.float64)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64
    assert np.array_equal(y.numpy(), block(g.numpy(), 1, comm.rank, n))


def raises_everywhere(exc, fn):
    try:
        fn()
    except exc as e:
        ok, text = True, str(e)
    except Exception as e:  # noqa: BLE001 (the wrong class fails below, on every rank)
        ok, text = False, f"{type(e).__name__}: {e}"
    else:
        ok, text = False, "no exception"
    assert world_all(ok), text
    return text


def test_errors(comm):
    n, r = comm.size, comm.rank
    g = full()
    x = block(g, 0, r, n)
    before = x.copy()
    # No dtype where a rank holds no x (the target-only ranks): every rank raises.
    a, b = group([0]), group(list(range(n)))
    if n > 1:
        xa = g.copy() if a is not None else None
        text = raises_everywhere(dsp.Error, lambda: dsp.reshard(xa, G, dsp.Replicated(), a, dsp.Sharded(0), b, comm))
        assert "dtype" in text if xa is None else "rank 1" in text
    # A block of the wrong shape on the last rank.
    bad = x if r != n - 1 else np.zeros((x.shape[0] + 1,) + x.shape[1:], np.float32)
    text = raises_everywhere(dsp.Error, lambda: dsp.reshard(bad, G, dsp.Sharded(0), comm, dsp.Sharded(1), comm,
                                                            comm))
    assert "shape" in text or "rank" in text
    # x given without its group; a Partial source; a dtype that disagrees with x; a dim past the rank.
    raises_everywhere(dsp.Error, lambda: dsp.reshard(x, G, dsp.Sharded(0), None, dsp.Sharded(1), comm, comm))
    raises_everywhere(dsp.Error, lambda: dsp.reshard(g.copy(), G, dsp.Partial(), comm, dsp.Sharded(1), comm, comm))
    raises_everywhere(dsp.Error, lambda: dsp.reshard(x, G, dsp.Sharded(0), comm, dsp.Sharded(1), comm, comm,
                                                     dtype=np.float64))
    raises_everywhere(dsp.Error, lambda: dsp.reshard(x, G, dsp.Sharded(0), comm, dsp.Sharded(3), comm, comm))
    if n > 1:  # global shapes that disagree across ranks
        shape = G if r != n - 1 else (3, 7, 6)
        xs = block(np.zeros(shape, np.float32), 0, r, n)
        text = raises_everywhere(dsp.Error, lambda: dsp.reshard(xs, shape, dsp.Sharded(0), comm, dsp.Sharded(1),
                                                                comm, comm))
        assert "extents" in text
    assert np.array_equal(x, before)
    # And the parent still works.
    y = dsp.reshard(x, G, dsp.Sharded(0), comm, dsp.Sharded(2), comm, comm)
    assert np.array_equal(y, block(g, 2, r, n))


@pytest.mark.parametrize("case", range(5))
def test_cuts_between_groups(comm, case):
    """dsp.Zigzag and dsp.Blocks on either side, between groups: each rank's block is one box (two for Zigzag)."""
    cases = groups_cases(comm.size)
    if case >= len(cases):
        pytest.skip("needs more ranks")
    a, b = group(list(cases[case][0])), group(list(cases[case][1]))
    g = full()
    x = None if a is None else zigzag_block(g, 1, a.rank, a.size)
    sizes = None if b is None else [G[1]] + [0] * (b.size - 1)  # everything on the group's first rank
    y = dsp.reshard(x, G, dsp.Zigzag(1), a, dsp.Blocks(1, sizes) if b is not None else dsp.Sharded(1), b, comm,
                    dtype=np.float32)
    if b is not None:
        want = g if b.rank == 0 else g[:, :0]
        assert np.array_equal(y, want)
    z = dsp.reshard(y, G, dsp.Blocks(1, sizes) if b is not None else dsp.Sharded(1), b, dsp.Zigzag(2), a, comm,
                    dtype=np.float32)
    if a is not None:
        assert np.array_equal(z, zigzag_block(g, 2, a.rank, a.size))
        assert np.array_equal(x, zigzag_block(g, 1, a.rank, a.size))  # input untouched


def test_cuts_disagreeing_sizes(comm):
    """Target ranks whose dsp.Blocks sizes differ raise on every rank (their blocks would overlap)."""
    if comm.size < 2:
        pytest.skip("needs two ranks")
    g = full()
    sizes = [G[1] - 1] + [0] * (comm.size - 2) + [1]
    mine = sizes if comm.rank else [G[1] - 2] + [0] * (comm.size - 2) + [2]
    try:
        dsp.reshard(block(g, 0, comm.rank, comm.size), G, dsp.Sharded(0), comm, dsp.Blocks(1, mine), comm, comm)
        text = ""
    except dsp.MismatchError as e:
        text = str(e)
    assert world_all("y's holders do not form one layout" in text)
