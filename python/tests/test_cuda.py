# SPDX-License-Identifier: BSD-3-Clause
# CUDA arrays (docs/python.md, "CUDA arrays"): dsp.Comm(comm, device=...) and
# what every build says about device memory. The device tests run where the
# module was built with a CUDA Kokkos and NCCL, torch sees a GPU per rank
# (NCCL takes one rank per GPU); elsewhere they skip, and the refusals below
# run in every build.
import numpy as np
import pytest
from conftest import block, raises_everywhere, world_all, zigzag_block
from mpi4py import MPI

import dsp

try:
    import torch
except ImportError:
    torch = None

W = MPI.COMM_WORLD
G = (2, 6, 5, 4)
CUDA = world_all(dsp._dsp.has_cuda and torch is not None and torch.cuda.is_available())
if CUDA:
    # Before the first dsp.Comm: a CUDA build initializes Kokkos on the device current then.
    NODE = W.Split_type(MPI.COMM_TYPE_SHARED)
    torch.cuda.set_device(NODE.rank % torch.cuda.device_count())
    CUDA = world_all(torch.cuda.device_count() >= NODE.size)  # NCCL: one GPU per rank
cuda = pytest.mark.skipif(not CUDA, reason="needs the module built with CUDA and NCCL, and a GPU per rank")


class FakeCuda:
    """An array that says it lives in CUDA memory (DLPack device type 2): dsp must refuse it from its
    __dlpack_device__ alone, never asking for the data."""

    def __init__(self, shape):
        self.shape = shape
        self.exported = False

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        self.exported = True
        raise AssertionError("dsp asked a refused CUDA array for its data")


def refused(fn, match):
    """Rank 0's fault: dsp.InvalidArgument saying `match` there, MismatchError (rank 0 could not take part)
    on the others; nobody waits."""
    raises_everywhere(fn, dsp.InvalidArgument, dsp.MismatchError, match=match)


def test_device_argument(comm):
    assert comm.device is None and "device" not in repr(comm)
    assert dsp.Comm(W, device=None).device is None
    for bad in ("cpu", "cuda:x", 1.5, "gpu:0"):
        with pytest.raises(dsp.InvalidArgument, match="device is None"):
            dsp.Comm(W, device=bad)
    if not dsp._dsp.has_cuda:
        for d in ("cuda", "cuda:0", 0):
            with pytest.raises(dsp.InvalidArgument, match="this build of dsp moves host memory only"):
                dsp.Comm(W, device=d)


def test_cuda_array_refused_on_a_host_comm(comm):
    """Rank 0's block says it lives in CUDA memory, the others' are numpy: every rank raises, and no
    input is touched."""
    a = np.arange(np.prod(G), dtype=np.float32).reshape(G)
    x = block(a, 1, comm.rank, comm.size)
    before = x.copy()
    fake = FakeCuda(x.shape)
    why = "lives in device memory (CUDA device 0)" if not dsp._dsp.has_cuda else "lives in CUDA memory (device 0)"
    refused(lambda: dsp.switch(fake if comm.rank == 0 else x, G, 1, 2, comm), why)
    assert not fake.exported and np.array_equal(x, before)
    # And in a batch, and through reshard (host memory only in every build).
    refused(lambda: dsp.switch([x, fake if comm.rank == 0 else x], G, 1, 2, comm), why)
    reshard_why = why if not dsp._dsp.has_cuda else "dsp.reshard moves host memory"
    refused(lambda: dsp.reshard(fake if comm.rank == 0 else x, G, dsp.Sharded(1), comm, dsp.Sharded(2), comm,
                                comm), reshard_why)
    assert not fake.exported and np.array_equal(x, before)


# ---------------------------------------------------------------- on a GPU


@pytest.fixture(scope="module")
def dcomm():
    return dsp.Comm(W, device="cuda")


def tblock(a, dim, comm):
    return torch.from_numpy(block(a, dim, comm.rank, comm.size))


@cuda
def test_cuda_in_cuda_out(dcomm, comm):
    k = torch.cuda.current_device()
    assert dcomm.device == f"cuda:{k}" and "cuda" in repr(dcomm)
    for d in (k, f"cuda:{k}", torch.device("cuda", k)):
        assert dsp.Comm(W, device=d).device == f"cuda:{k}"
    a = np.arange(np.prod(G), dtype=np.float32).reshape(G)
    x = tblock(a, 1, dcomm).cuda()
    y = dsp.switch(x, G, 1, 2, dcomm)
    assert y.is_cuda and y.device == x.device and y.dtype == torch.float32
    assert torch.equal(y.cpu(), tblock(a, 2, dcomm))
    assert torch.equal(dsp.gather(x, G, 1, dcomm).cpu(), torch.from_numpy(a))
    assert torch.equal(dsp.split(torch.from_numpy(a).cuda(), G, 3, dcomm).cpu(), tblock(a, 3, dcomm))
    b = dsp.switch(x.to(torch.bfloat16), G, 1, 2, dcomm)
    assert b.dtype == torch.bfloat16 and torch.equal(b.cpu(), tblock(a, 2, dcomm).to(torch.bfloat16))
    i = torch.from_numpy(block(a.astype(np.int64), 1, dcomm.rank, dcomm.size)).cuda()
    ys = dsp.switch([x, i, x * 2], G, 1, 2, dcomm)  # a batch of three, two element types
    assert [t.is_cuda for t in ys] == [True] * 3
    assert torch.equal(ys[1].cpu(), tblock(a.astype(np.int64), 2, dcomm))
    assert torch.equal(ys[2].cpu(), tblock(a * 2, 2, dcomm))


@cuda
def test_cuda_wires_match_the_host(dcomm, comm):
    """A wire's bytes are the host kernels' bytes (both round the same way)."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal(G).astype(np.float32) * 100
    x = tblock(a, 1, dcomm)
    for wire in ("bf16", "fp16", "fp8_e4m3"):
        want = dsp.switch(x, G, 1, 2, comm, wire=wire)
        got = dsp.switch(x.cuda(), G, 1, 2, dcomm, wire=wire)
        assert torch.equal(got.cpu(), want), wire


@cuda
def test_cuda_on_a_side_stream(dcomm):
    """The caller's stream and dsp's are ordered both ways: dsp reads what the caller's stream wrote
    last, and what the caller's stream runs next sees dsp's output (no synchronize between)."""
    big = (2, 64 * dcomm.size, 256, 64)
    a = torch.arange(float(np.prod(big)), device="cuda").reshape(big)
    want = tblock(a.cpu().numpy() * 3 + 1, 2, dcomm).cuda()
    s = torch.cuda.Stream()
    checks = dsp.agreement_checks()
    with torch.cuda.stream(s):
        for k in range(20):
            dsp.set_agreement_checks(k % 2 == 0)  # off: no host wait inside the call to hide a missing order
            x = tblock(a.cpu().numpy(), 1, dcomm).cuda()
            x = x * 3  # queued on s; dsp must wait for it
            y = dsp.switch(x, big, 1, 2, dcomm)
            z = y + 1  # queued on s; must wait for dsp
            del x, y  # the memory may be reused by s at once
            w = torch.full_like(z, -5)  # the next allocation on s
            assert torch.equal(z, want)
            del w
    dsp.set_agreement_checks(checks)
    torch.cuda.synchronize()


@cuda
def test_cuda_split_phase(dcomm):
    a = np.arange(np.prod(G), dtype=np.float64).reshape(G)
    h = dsp.start_redistribute(tblock(a, 1, dcomm).cuda(), G, dsp.Sharded(1), dsp.Sharded(3), dcomm)
    y = h.result()
    assert y.is_cuda and torch.equal(y.cpu(), tblock(a, 3, dcomm))


@cuda
def test_cuda_zigzag_and_mesh(dcomm, comm):
    a = np.arange(np.prod(G), dtype=np.float32).reshape(G)
    z = dsp.redistribute(tblock(a, 2, dcomm).cuda(), G, dsp.Sharded(2), dsp.Zigzag(1), dcomm)
    assert torch.equal(z.cpu(), torch.from_numpy(zigzag_block(a, 1, dcomm.rank, dcomm.size)))
    shape = dsp.mesh_shape(2, dcomm.size)
    hm, dm = dsp.Mesh(comm, shape), dsp.Mesh(dcomm, shape)
    assert dm.shape == hm.shape and dm.coords == hm.coords and dm.comm.device == dcomm.device
    x = dsp.redistribute(torch.from_numpy(a), G, (dsp.Replicated(), dsp.Replicated()),
                         (dsp.Sharded(1), dsp.Sharded(2)), hm)
    want = dsp.redistribute(x, G, (dsp.Sharded(1), dsp.Sharded(2)), (dsp.Sharded(3), dsp.Replicated()), hm)
    got = dsp.redistribute(x.cuda(), G, (dsp.Sharded(1), dsp.Sharded(2)), (dsp.Sharded(3), dsp.Replicated()), dm)
    assert got.is_cuda and torch.equal(got.cpu(), want)


@cuda
def test_cuda_autograd(dcomm, comm):
    import dsp.torch as dt
    a = torch.arange(float(np.prod(G)), dtype=torch.float64).reshape(G)
    grads = []
    for c, dev in ((comm, "cpu"), (dcomm, "cuda")):
        x = tblock(a.numpy(), 1, c).to(dev).requires_grad_()
        y = dt.switch(x, G, 1, 2, c)
        (y * y).sum().backward()
        grads.append(x.grad.cpu())
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0], 2 * tblock(a.numpy(), 1, comm))


@cuda
def test_cuda_refusals(dcomm, comm):
    """A host block on a device dsp.Comm, on rank 0 only: every rank raises, inputs untouched."""
    a = np.arange(np.prod(G), dtype=np.float32).reshape(G)
    host = tblock(a, 1, dcomm)
    dev = host.cuda()
    refused(lambda: dsp.switch(host if dcomm.rank == 0 else dev, G, 1, 2, dcomm),
            "the array lives in host memory, but this dsp.Comm moves CUDA memory")
    # A host array that only DLPack describes (torch has no uint16 attribute table entry: it goes through
    # __dlpack__), on one rank.
    u = torch.zeros(tuple(host.shape), dtype=torch.uint16) if hasattr(torch, "uint16") else None
    if u is not None:
        refused(lambda: dsp.switch(u if dcomm.rank == 0 else dev.to(torch.int16).view(torch.uint16),
                           G, 1, 2, dcomm), "the array lives in host memory")
    with pytest.raises(dsp.InvalidArgument, match="make it with dsp.Comm"):
        dsp.switch(dev, G, 1, 2, comm)
    with pytest.raises(dsp.InvalidArgument, match="dsp.reshard moves host memory"):
        dsp.reshard(dev, G, dsp.Sharded(1), comm, dsp.Sharded(2), comm, comm)
    assert torch.equal(dev.cpu(), host) and torch.equal(host, tblock(a, 1, dcomm))
