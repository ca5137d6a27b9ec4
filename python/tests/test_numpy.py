# SPDX-License-Identifier: BSD-3-Clause
# dsp on numpy blocks: every operation against the global array, on 1-4 ranks.
import numpy as np
import pytest
from conftest import DLPackOnly, block, counts

import dsp

G = (2, 7, 5, 3)  # uneven on 2-4 ranks


def full(dtype=np.float32, shape=G):
    return (np.arange(np.prod(shape)) % 251).astype(dtype).reshape(shape)


@pytest.mark.parametrize("src,dst", [(1, 2), (2, 1), (0, 3), (1, 1)])
def test_switch(comm, src, dst):
    a = full()
    x = block(a, src, comm.rank, comm.size)
    y = dsp.switch(x, G, src, dst, comm)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    assert np.array_equal(y, block(a, dst, comm.rank, comm.size))
    assert np.array_equal(x, block(a, src, comm.rank, comm.size))  # input untouched


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int8, np.int32, np.uint64, np.complex64, np.bool_])
def test_dtypes(comm, dtype):
    a = full(dtype)
    y = dsp.switch(block(a, 1, comm.rank, comm.size), G, 1, 3, comm)
    assert y.dtype == a.dtype and np.array_equal(y, block(a, 3, comm.rank, comm.size))


def test_gather_split(comm):
    a = full()
    g = dsp.gather(block(a, 2, comm.rank, comm.size), G, 2, comm)
    assert np.array_equal(g, a)
    s = dsp.split(a, G, 1, comm)
    assert np.array_equal(s, block(a, 1, comm.rank, comm.size))


def test_redistribute_placements(comm):
    a = full()
    x = block(a, 0, comm.rank, comm.size)
    y = dsp.redistribute(x, G, dsp.Sharded(0), dsp.Replicated(), comm)
    assert np.array_equal(y, a)
    z = dsp.redistribute(a, G, dsp.Replicated(), dsp.Sharded(3), comm)
    assert np.array_equal(z, block(a, 3, comm.rank, comm.size))
    # Partial: every rank holds a term; the sum arrives sharded.
    p = dsp.redistribute(a, G, dsp.Partial(), dsp.Sharded(1), comm)
    assert np.allclose(p, comm.size * block(a, 1, comm.rank, comm.size))
    m = dsp.redistribute(a + comm.rank, G, dsp.Partial("max"), dsp.Replicated(), comm)
    assert np.array_equal(m, a + comm.size - 1)


def test_batch(comm):
    a = full()
    xs = [block(a * k, 1, comm.rank, comm.size) for k in (1, 2, 3)]
    ys = dsp.redistribute(xs, G, dsp.Sharded(1), dsp.Sharded(2), comm)
    assert isinstance(ys, list) and len(ys) == 3
    for k, y in zip((1, 2, 3), ys):
        assert np.array_equal(y, block(a * k, 2, comm.rank, comm.size))
    mixed = [block(a, 1, comm.rank, comm.size), block(a.astype(np.float64), 1, comm.rank, comm.size)]
    out = dsp.redistribute(mixed, G, dsp.Sharded(1), dsp.Sharded(0), comm)
    assert out[1].dtype == np.float64 and np.array_equal(out[1], block(a, 0, comm.rank, comm.size))


@pytest.mark.parametrize("wire,tol", [("bf16", 2**-8), ("fp16", 2**-11), ("fp8_e4m3", 2**-3)])
def test_wires(comm, wire, tol):
    a = np.linspace(-3, 3, np.prod(G), dtype=np.float32).reshape(G)
    y = dsp.switch(block(a, 1, comm.rank, comm.size), G, 1, 2, comm, wire=wire)
    want = block(a, 2, comm.rank, comm.size)
    assert np.all(np.abs(y - want) <= tol * np.abs(want).max() + 1e-30)


def test_split_phase(comm):
    a = full()
    x = block(a, 1, comm.rank, comm.size)
    h = dsp.start_redistribute(x, G, dsp.Sharded(1), dsp.Sharded(2), comm)
    while not h.test():
        pass
    h.wait()
    assert np.array_equal(h.result(), block(a, 2, comm.rank, comm.size))
    hs = dsp.start_redistribute([x, 2 * x], G, dsp.Sharded(1), dsp.Replicated(), comm)
    r = hs.result()
    assert np.array_equal(r[0], a) and np.array_equal(r[1], 2 * a)


def test_mesh(comm):
    shape = dsp.mesh_shape(2, comm.size)
    assert shape[0] * shape[1] == comm.size
    mesh = dsp.Mesh(comm, shape)
    assert mesh.shape == shape and len(mesh.coords) == 2
    a = full()
    src, dst = (dsp.Sharded(1), dsp.Sharded(2)), (dsp.Sharded(0), dsp.Replicated())
    x = np.ascontiguousarray(a[tuple(_box(a.shape, src, mesh))])
    assert x.shape == dsp.local_shape(G, src, mesh)
    y = dsp.redistribute(x, G, src, dst, mesh)
    assert np.array_equal(y, a[tuple(_box(a.shape, dst, mesh))])


def _box(shape, layout, mesh):
    """The slices of this rank's block under a mesh layout (nested blocks, axis 0 outermost)."""
    sl = [slice(0, e) for e in shape]
    for axis, p in enumerate(layout):
        if isinstance(p, dsp.Sharded):
            d = p.dim
            lo, hi = sl[d].start, sl[d].stop
            c = counts(hi - lo, mesh.shape[axis])
            off = lo + sum(c[:mesh.coords[axis]])
            sl[d] = slice(off, off + c[mesh.coords[axis]])
    return sl


def test_mesh_shape():
    assert dsp.mesh_shape(2, 12) == [4, 3]
    assert dsp.mesh_shape(3, 8) == [2, 2, 2]
    with pytest.raises(dsp.InvalidArgument):
        dsp.mesh_shape(5, 8)


def test_settings_and_wisdom(comm):
    assert dsp.planning() == "heuristic"
    with pytest.raises(dsp.InvalidArgument):
        dsp.set_planning("fastest")
    dsp.set_planning("measure")
    try:
        a = full()
        y = dsp.switch(block(a, 1, comm.rank, comm.size), G, 1, 2, comm)
        assert np.array_equal(y, block(a, 2, comm.rank, comm.size))
        w = dsp.export_wisdom()
        assert isinstance(w, str)
        dsp.forget_wisdom()
        dsp.import_wisdom(w)
        assert dsp.export_wisdom() == w
    finally:
        dsp.set_planning("heuristic")
    assert dsp.workspace_bytes(comm) >= 0


def test_outputs_recycled_only_when_dropped(comm):
    a = full()
    x = block(a, 1, comm.rank, comm.size)
    y1 = dsp.switch(x, G, 1, 2, comm)
    y2 = dsp.switch(2 * x, G, 1, 2, comm)
    assert y1.ctypes.data != y2.ctypes.data  # y1 still held: a new array
    assert np.array_equal(y1, block(a, 2, comm.rank, comm.size))  # not overwritten by the second call
    v = y2[:1]  # a view holds y2
    del y2
    y3 = dsp.switch(3 * x, G, 1, 2, comm)
    assert np.array_equal(v, 2 * block(a, 2, comm.rank, comm.size)[:1])  # the viewed memory was not reused
    addr = y3.ctypes.data
    del y3
    y4 = dsp.switch(4 * x, G, 1, 2, comm)
    assert y4.ctypes.data == addr and np.array_equal(y4, 4 * block(a, 2, comm.rank, comm.size))  # reused
    dsp.release_workspaces()


def test_any_dlpack_object(comm):
    a = full()
    x = DLPackOnly(block(a, 1, comm.rank, comm.size))
    y = dsp.switch(x, G, 1, 2, comm)
    assert isinstance(y, DLPackOnly) and np.array_equal(y.a, block(a, 2, comm.rank, comm.size))
    bad = DLPackOnly(np.asfortranarray(block(a, 1, comm.rank, comm.size)))
    with pytest.raises(dsp.InvalidArgument, match="not contiguous"):
        dsp.switch(bad, G, 1, 2, comm)


def test_gqa_replicate_to_fill(comm):
    """K [B, S, H_kv, d] from the sequence over every rank to its heads' ranks (docs/attention.md)."""
    assert dsp.gqa_mesh_shape(8, 2) == [4, 2] and dsp.gqa_mesh_shape(6, 4) == [3, 2]
    shape = dsp.gqa_mesh_shape(comm.size, 2)
    mesh = dsp.Mesh(comm, shape)
    r0, r1 = mesh.coords
    g = full(shape=(2, 11, 2, 3))
    seq = (dsp.Sharded(1), dsp.Sharded(1))
    x = block(block(g, 1, r0, shape[0]), 1, r1, shape[1])  # the nested cut: axis 0, then axis 1
    k = dsp.redistribute(x, g.shape, seq, (dsp.Replicated(), dsp.Sharded(2)), mesh)
    assert np.array_equal(k, block(g, 2, r1, shape[1]))
    with pytest.raises(dsp.InvalidArgument):
        dsp.gqa_mesh_shape(4, 0)


def test_local_offsets(comm):
    """local_offsets and local_shape slice the global array into this rank's block, on a communicator and a mesh."""
    g = full()
    for layout, group in [(dsp.Sharded(1), comm), (dsp.Replicated(), comm), (dsp.Partial(), comm),
                          ((dsp.Sharded(1), dsp.Sharded(1)), dsp.Mesh(comm, dsp.mesh_shape(2, comm.size))),
                          ((dsp.Partial(), dsp.Sharded(3)), dsp.Mesh(comm, dsp.mesh_shape(2, comm.size)))]:
        off, shape = dsp.local_offsets(G, layout, group), dsp.local_shape(G, layout, group)
        got = g[tuple(slice(o, o + s) for o, s in zip(off, shape))]
        if not isinstance(layout, tuple) and layout == dsp.Sharded(1):
            assert np.array_equal(got, block(g, 1, comm.rank, comm.size))
        assert got.shape == shape
    m = dsp.Mesh(comm, dsp.mesh_shape(2, comm.size))
    r0, r1 = m.coords
    off = dsp.local_offsets(G, (dsp.Sharded(1), dsp.Sharded(1)), m)
    assert off[1] == sum(counts(G[1], m.shape[0])[:r0]) + sum(counts(counts(G[1], m.shape[0])[r0], m.shape[1])[:r1])
    with pytest.raises(dsp.InvalidArgument):
        dsp.local_offsets(G, dsp.Sharded(4), comm)
