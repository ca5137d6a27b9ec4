# SPDX-License-Identifier: BSD-3-Clause
# dsp on torch tensors (DLPack, no copy), and dsp.torch's autograd: gradients
# on N ranks equal those on one rank.
import numpy as np
import pytest
from conftest import block

import dsp

torch = pytest.importorskip("torch")
import dsp.torch as dt  # noqa: E402

G = (2, 6, 5, 4)


def tblock(t, dim, comm):
    return torch.from_numpy(block(t.detach().numpy(), dim, comm.rank, comm.size))


def test_torch_in_torch_out(comm):
    a = torch.arange(float(np.prod(G))).reshape(G)
    x = tblock(a, 1, comm)
    y = dsp.switch(x, G, 1, 2, comm)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    assert torch.equal(y, tblock(a, 2, comm))
    b = dsp.switch(x.to(torch.bfloat16), G, 1, 2, comm)
    assert b.dtype == torch.bfloat16 and torch.equal(b, tblock(a, 2, comm).to(torch.bfloat16))
    g = dsp.gather(x, G, 1, comm)
    assert torch.equal(g, a)


def test_outputs_recycled_only_when_idle(comm):
    """A host tensor's output memory is handed out again only once nothing holds it: not while a view of it
    lives, nor while autograd keeps it for a backward."""
    a = torch.arange(float(np.prod(G))).reshape(G)
    x, x2 = tblock(a, 1, comm), tblock(a * -3, 1, comm)
    want = tblock(a, 2, comm)
    y = dsp.switch(x, G, 1, 2, comm)
    view = y[0]
    w = torch.ones(want.shape, requires_grad=True)
    z = (y * w).sum()  # autograd saves y for w's gradient
    del y
    for _ in range(12):  # more than the pool keeps
        out = dsp.switch(x2, G, 1, 2, comm)
        assert torch.equal(out, tblock(a * -3, 2, comm))
    assert torch.equal(view, want[0])
    z.backward()
    assert torch.equal(w.grad, want)
    # And once idle it is reused (the steady loop then page-faults nothing).
    del view, z, w, out
    p = dsp.switch(x, G, 1, 2, comm).data_ptr()
    assert dsp.switch(x, G, 1, 2, comm).data_ptr() == p


def test_no_copy_at_the_boundary(comm):
    # dsp reads the caller's memory: a view into a bigger tensor (contiguous) is taken as is.
    base = torch.zeros((3,) + tuple(dsp.local_shape(G, dsp.Sharded(1), comm)))
    base[1] = 7
    y = dsp.switch(base[1], G, 1, 2, comm)
    assert torch.all(y == 7)


def test_non_contiguous_tensor(comm):
    x = torch.zeros(dsp.local_shape(G, dsp.Sharded(1), comm)[::-1]).permute(3, 2, 1, 0)
    with pytest.raises(dsp.InvalidArgument, match="x.contiguous"):
        dsp.switch(x, G, 1, 2, comm)


def loss_of(y):
    return (y * y * torch.arange(1.0, y.numel() + 1).reshape(y.shape)).sum()


def test_switch_backward(comm):
    torch.manual_seed(0)
    a = torch.randn(G, dtype=torch.float64)
    x = tblock(a, 1, comm).requires_grad_()
    y = dt.switch(x, G, 1, 2, comm)
    # the loss of the whole tensor: each rank its part, weighted by global index
    w = tblock(torch.arange(1.0, a.numel() + 1, dtype=torch.float64).reshape(G), 2, comm)
    (y * y * w).sum().backward()
    want = 2 * a * torch.arange(1.0, a.numel() + 1, dtype=torch.float64).reshape(G)
    assert torch.allclose(x.grad, tblock(want, 1, comm))


def test_gather_split_backward(comm):
    a = torch.randn(G, dtype=torch.float64)
    x = tblock(a, 2, comm).requires_grad_()
    g = dt.gather(x, G, 2, comm)  # every rank the same loss of the whole tensor
    (g * g).sum().backward()
    assert torch.allclose(x.grad, tblock(2 * a, 2, comm))
    x2 = tblock(a, 2, comm).requires_grad_()
    g2 = dt.gather(x2, G, 2, comm, grad="sum")  # every rank a partial loss: the gradients sum
    (g2 * g2).sum().backward()
    assert torch.allclose(x2.grad, comm.size * tblock(2 * a, 2, comm))
    r = a.clone().requires_grad_()
    s = dt.split(r, G, 0, comm)
    (3 * s).sum().backward()
    assert torch.allclose(r.grad, torch.full(G, 3.0, dtype=torch.float64))


def test_redistribute_mesh_backward(comm):
    mesh = dsp.Mesh(comm, dsp.mesh_shape(2, comm.size))
    src, dst = (dsp.Sharded(1), dsp.Sharded(3)), (dsp.Sharded(0), dsp.Sharded(2))
    x = torch.randn(dsp.local_shape(G, src, mesh), dtype=torch.float64, requires_grad=True)
    y = dt.redistribute(x, G, src, dst, mesh)
    (y * 5).sum().backward()
    assert torch.allclose(x.grad, torch.full(x.shape, 5.0, dtype=torch.float64))
    with pytest.raises(dsp.InvalidArgument, match="Partial"):
        dt.redistribute(x, G, src, (dsp.Partial(), dsp.Replicated()), mesh)


def test_gradcheck_one_rank_blocks(comm):
    # torch.autograd.gradcheck on the distributed switch, composed so the check is rank-local:
    # f(x) = switch(x) then switch back; the Jacobian is the identity on every rank. gradcheck calls f
    # once per element of x (and of f(x)): every rank's block has the same size, so every rank makes
    # the same collective calls.
    g = (2, 2 * comm.size, 3, 4)
    x = tblock(torch.randn(g, dtype=torch.float64), 1, comm).requires_grad_()

    def f(t):
        return dt.switch(dt.switch(t, g, 1, 3, comm), g, 3, 1, comm) * 2

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-8)
