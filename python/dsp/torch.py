# SPDX-License-Identifier: BSD-3-Clause
"""dsp's resharding as differentiable PyTorch functions.

The backward of a redistribution is the reverse redistribution (the paper's
adjoints): switch(i -> j) reverses as switch(j -> i); split and gather are
each other's adjoints. So the gradient of a gather is the slice of the
incoming gradient that this rank holds (the ranks compute the same loss from
the gathered tensor, as a sequence-parallel model does). Where each rank
instead holds a *partial* gradient of the gathered tensor, pass
``grad="sum"`` to gather: its backward then sums the ranks' gradients and
keeps this rank's slice (a reduce-scatter).
"""
import torch as _torch

import dsp as _dsp

__all__ = ["switch", "redistribute", "split", "gather"]


def _placement_ok(layout):
    items = layout if isinstance(layout, (tuple, list)) else (layout,)
    for p in items:
        if isinstance(p, _dsp.Partial):
            raise _dsp.InvalidArgument(
                "dsp.torch.redistribute: a Partial placement has no reverse redistribution as its adjoint; use "
                "dsp.redistribute outside autograd, or gather(..., grad=\"sum\")")
    return layout


class _Redistribute(_torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, global_shape, src, dst, group, wire):
        ctx.args = (global_shape, src, dst, group, wire)
        return _dsp.redistribute(x.detach().contiguous(), global_shape, src, dst, group, wire)

    @staticmethod
    def backward(ctx, g):
        global_shape, src, dst, group, wire = ctx.args
        return _dsp.redistribute(g.contiguous(), global_shape, dst, src, group, wire), None, None, None, None, None


class _GatherSum(_torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, global_shape, dim, comm):
        ctx.args = (global_shape, dim, comm)
        return _dsp.gather(x.detach().contiguous(), global_shape, dim, comm)

    @staticmethod
    def backward(ctx, g):
        global_shape, dim, comm = ctx.args
        return (_dsp.redistribute(g.contiguous(), global_shape, _dsp.Partial(), _dsp.Sharded(dim), comm), None, None,
                None)


def redistribute(x, global_shape, src, dst, comm_or_mesh, wire=None):
    """dsp.redistribute, differentiable: backward is redistribute(grad, dst -> src)."""
    return _Redistribute.apply(x, tuple(global_shape), _placement_ok(src), _placement_ok(dst), comm_or_mesh, wire)


def switch(x, global_shape, src_dim, dst_dim, comm, wire=None):
    """dsp.switch, differentiable: backward is switch(grad, dst_dim -> src_dim)."""
    return _Redistribute.apply(x, tuple(global_shape), _dsp.Sharded(src_dim), _dsp.Sharded(dst_dim), comm, wire)


def split(x, global_shape, dim, comm):
    """dsp.split, differentiable: backward is gather(grad)."""
    return _Redistribute.apply(x, tuple(global_shape), _dsp.Replicated(), _dsp.Sharded(dim), comm, None)


def gather(x, global_shape, dim, comm, grad="slice"):
    """dsp.gather, differentiable. grad="slice" (the default, the paper's): backward keeps this rank's slice of
    the gradient; grad="sum": backward sums the ranks' gradients first (a reduce-scatter)."""
    if grad == "sum":
        return _GatherSum.apply(x, tuple(global_shape), dim, comm)
    if grad != "slice":
        raise _dsp.InvalidArgument(f"dsp.torch.gather: grad is \"slice\" or \"sum\", not {grad!r}")
    return _Redistribute.apply(x, tuple(global_shape), _dsp.Sharded(dim), _dsp.Replicated(), comm, None)
