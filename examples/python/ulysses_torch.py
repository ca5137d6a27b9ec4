# SPDX-License-Identifier: BSD-3-Clause
"""A spatial-temporal attention block in PyTorch with DSP's switches.

A video activation x of shape [B, T, S, C] (batch, frames, spatial tokens,
channels) is sharded along T across the ranks. Spatial attention mixes the S
tokens of each frame: every rank has whole frames, so it runs locally. Temporal
attention mixes the T frames of each spatial token: one dsp.torch.switch moves
the shard from T to S, the attention runs locally, and a second switch moves
it back. Forward and backward are checked against the same block on one rank.

    PYTHONPATH=build-test/python mpiexec -n 4 /usr/bin/python3 examples/python/ulysses_torch.py
"""
import torch
from mpi4py import MPI

import dsp
import dsp.torch as dt


class Attention(torch.nn.Module):
    """Single-head self-attention over dim `axis` of [B, T, S, C]."""

    def __init__(self, c, axis):
        super().__init__()
        self.qkv = torch.nn.Linear(c, 3 * c, dtype=torch.float64)
        self.out = torch.nn.Linear(c, c, dtype=torch.float64)
        self.axis = axis

    def forward(self, x):
        h = x.movedim(self.axis, -2)  # [..., L, C] with L the attended dim
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1]**0.5, dim=-1)
        return x + self.out(a @ v).movedim(-2, self.axis)


class STBlock(torch.nn.Module):
    """Spatial attention, then temporal attention; `comm` given: x is Sharded(1) (T), DSP switches around the
    temporal half. Without `comm`: the whole tensor on one rank."""

    def __init__(self, c):
        super().__init__()
        self.spatial = Attention(c, axis=2)
        self.temporal = Attention(c, axis=1)

    def forward(self, x, global_shape=None, comm=None):
        x = self.spatial(x)  # frames whole on every rank: local
        if comm is None:
            return self.temporal(x)
        x = dt.switch(x, global_shape, 1, 2, comm)  # T sharded -> S sharded: frames of a token together
        x = self.temporal(x)
        return dt.switch(x, global_shape, 2, 1, comm)  # back to T sharded


def main():
    world = MPI.COMM_WORLD
    comm = dsp.Comm(world)
    B, T, S, C = 2, 8, 12, 16
    shape = (B, T, S, C)
    torch.manual_seed(0)  # the same weights and input on every rank
    block = STBlock(C)
    x_full = torch.randn(shape, dtype=torch.float64)

    # Distributed: this rank's frames.
    counts = [T // comm.size + (1 if r < T % comm.size else 0) for r in range(comm.size)]
    lo = sum(counts[:comm.rank])
    x = x_full[:, lo:lo + counts[comm.rank]].clone().requires_grad_()
    y = block(x, shape, comm)
    y.square().sum().backward()  # this rank's part of the loss
    grads = [p.grad.clone() for p in block.parameters()]
    for g in grads:  # the weights' gradient: the sum over the ranks' parts
        world.Allreduce(MPI.IN_PLACE, g.numpy(), op=MPI.SUM)

    # One rank: the whole tensor.
    block.zero_grad()
    xr = x_full.clone().requires_grad_()
    yr = block(xr)
    yr.square().sum().backward()

    ok = torch.allclose(y, yr[:, lo:lo + counts[comm.rank]], atol=1e-10)
    ok &= torch.allclose(x.grad, xr.grad[:, lo:lo + counts[comm.rank]], atol=1e-10)
    ok &= all(torch.allclose(g, p.grad, atol=1e-9) for g, p in zip(grads, block.parameters()))
    ok = world.allreduce(bool(ok), op=MPI.LAND)
    if comm.rank == 0:
        print(f"ulysses_torch: {comm.size} ranks, x {list(shape)} sharded on T; two switches per temporal "
              f"attention; forward and backward {'match' if ok else 'DIFFER FROM'} one rank")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
