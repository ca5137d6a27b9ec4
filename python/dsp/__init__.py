# SPDX-License-Identifier: BSD-3-Clause
"""dsp from Python: Dynamic Sequence Parallelism's resharding on numpy arrays
and PyTorch tensors (anything with ``__dlpack__``), over mpi4py communicators.

An array is *this rank's block* of a global tensor; a layout is a value:
``dsp.Sharded(d)``, ``dsp.Replicated()``, ``dsp.Partial("sum"|"max"|"min")``,
or on a ``dsp.Mesh`` a tuple with one placement per mesh axis; also ``dsp.Zigzag(d)``
and ``dsp.Blocks(d, sizes)`` (attention's layouts, alone or in a tuple). Blocks are
taken without copying (C-contiguous, host memory) and results come back as
the same kind of array. Every call is collective over its group; bad input on
any rank raises a ``dsp.Error`` on every rank, with the input untouched.

    from mpi4py import MPI
    import numpy as np, dsp
    comm = dsp.Comm(MPI.COMM_WORLD)
    x = np.ones(dsp.local_shape((2, 16, 32, 8), dsp.Sharded(1), comm), np.float32)
    y = dsp.switch(x, (2, 16, 32, 8), 1, 2, comm)   # Sharded(1) -> Sharded(2)

docs/python.md has the whole interface.
"""
import atexit as _atexit

from mpi4py import MPI as _MPI  # noqa: F401  (MPI is initialized before dsp's core, finalized after)

from . import _dsp
from ._dsp import (BackendError, Comm, Error, Handle, InvalidArgument, Mesh, MismatchError, ResourceError,
                   TimeoutError, UsageError, agreement_checks, export_wisdom, forget_wisdom, gqa_mesh_shape, import_wisdom,
                   mesh_shape,
                   planning, release_workspaces, set_agreement_checks, set_call_site_checks, set_planning,
                   workspace_bytes)

__version__ = _dsp.version
# Kokkos is finalized at exit, before mpi4py finalizes MPI (atexit runs in reverse order of registration).
_atexit.register(_dsp._finalize)

__all__ = [
    "Comm", "Mesh", "Handle", "Sharded", "Replicated", "Partial", "Zigzag", "Blocks", "mesh_shape", "gqa_mesh_shape", "local_shape", "local_offsets", "block_split",
    "redistribute",
    "start_redistribute", "switch", "split", "gather", "reshard", "Error", "InvalidArgument", "MismatchError", "ResourceError",
    "UsageError", "TimeoutError", "BackendError", "set_agreement_checks", "agreement_checks",
    "set_call_site_checks", "set_planning", "planning", "export_wisdom", "import_wisdom", "forget_wisdom",
    "workspace_bytes", "release_workspaces"
]


class Placement:
    """A placement of a tensor over one communicator (or one mesh axis)."""
    code = 0

    def __eq__(self, other):
        return isinstance(other, Placement) and other.code == self.code

    def __hash__(self):
        return hash(self.code)


class Sharded(Placement):
    """Split along dim ``dim`` in contiguous blocks, one per rank (C++ dsp::Sharded<D>)."""

    def __init__(self, dim):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InvalidArgument(f"dsp.Sharded(dim): dim is a dim index (an int >= 0), not {dim!r}")
        self.dim = dim
        self.code = dim

    def __repr__(self):
        return f"dsp.Sharded({self.dim})"


class Replicated(Placement):
    """Every rank holds all of it (C++ dsp::Replicated)."""
    code = _dsp.kReplicated

    def __repr__(self):
        return "dsp.Replicated()"


class Partial(Placement):
    """Every rank holds a full-size term; the tensor is their sum (or max, min) (C++ dsp::Partial<Op>)."""
    _codes = {"sum": _dsp.kPartialSum, "max": _dsp.kPartialMax, "min": _dsp.kPartialMin}

    def __init__(self, op="sum"):
        if op not in self._codes:
            raise InvalidArgument(f"dsp.Partial(op): op is \"sum\", \"max\" or \"min\", not {op!r}")
        self.op = op
        self.code = self._codes[op]

    def __repr__(self):
        return f"dsp.Partial({self.op!r})"


def _check_rank(rank, size):
    if isinstance(rank, bool) or not isinstance(rank, int) or not isinstance(size, int) or not 0 <= rank < size:
        raise InvalidArgument(f"dsp: rank {rank!r} is not a rank of {size!r} (0 <= rank < size)")


def _part(extent, parts, i):
    """Part i of ``extent`` indices cut into ``parts`` by dsp's rule (the first extent % parts one longer):
    (offset, count)."""
    q, r = divmod(extent, parts)
    return i * q + min(i, r), q + (1 if i < r else 0)


class Zigzag(Placement):
    """Dim ``dim`` cut into 2N chunks by the usual rule; rank r holds chunks r and 2N-1-r, in that order
    (causal load balance; C++ dsp::Zigzag<D>). A placement of a ``dsp.Comm``, or of one axis of a
    ``dsp.Mesh`` (at most one per layout; ``dsp.block_split`` says where a rank's block jumps), moved by
    ``dsp.redistribute``."""

    def __init__(self, dim):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InvalidArgument(f"dsp.Zigzag(dim): dim is a dim index (an int >= 0), not {dim!r}")
        self.dim = dim
        self.code = _dsp.kZigzag - dim

    def pieces(self, extent, rank, size):
        """Rank ``rank``'s ranges of dim ``dim`` (of ``extent``) on ``size`` ranks, in the order its block holds
        them: [(offset, count), (offset, count)]."""
        _check_rank(rank, size)
        return [_part(extent, 2 * size, rank), _part(extent, 2 * size, 2 * size - 1 - rank)]

    def __repr__(self):
        return f"dsp.Zigzag({self.dim})"


class Blocks(Placement):
    """Dim ``dim`` in one block per rank of the run-time ``sizes`` (one per rank, summing to the extent; rank
    order; C++ dsp::Blocks<D>). A placement of a ``dsp.Comm``, or of one mesh axis in a tuple (one size per
    rank of that axis, which must be the first axis that cuts ``dim``), moved by ``dsp.redistribute``."""

    def __init__(self, dim, sizes):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InvalidArgument(f"dsp.Blocks(dim, sizes): dim is a dim index (an int >= 0), not {dim!r}")
        try:
            self.sizes = tuple(int(v) for v in sizes)
        except (TypeError, ValueError):
            raise InvalidArgument(f"dsp.Blocks(dim, sizes): sizes is a sequence of block sizes, one per rank, "
                                  f"not {sizes!r}") from None
        if any(v < 0 for v in self.sizes):
            raise InvalidArgument(f"dsp.Blocks(dim, sizes): a block size is negative: {self.sizes}")
        self.dim = dim
        self.code = _dsp.kBlocks - dim

    def pieces(self, extent, rank, size):
        """Rank ``rank``'s range of dim ``dim`` (of ``extent``) on ``size`` ranks: [(offset, count)]."""
        _check_rank(rank, size)
        if len(self.sizes) != size or sum(self.sizes) != extent:
            raise InvalidArgument(f"dsp.Blocks: sizes {list(self.sizes)} are not one per rank ({size}) summing to "
                                  f"the extent {extent}")
        return [(sum(self.sizes[:rank]), self.sizes[rank])]

    def __eq__(self, other):
        return isinstance(other, Blocks) and other.code == self.code and other.sizes == self.sizes

    def __hash__(self):
        return hash((self.code, self.sizes))

    def __repr__(self):
        return f"dsp.Blocks({self.dim}, {list(self.sizes)})"


def _is_cut(layout):
    items = layout if isinstance(layout, (tuple, list)) else (layout,)
    return any(isinstance(p, (Zigzag, Blocks)) for p in items)


def _sizes(layout):
    """The sizes of the layout's dsp.Blocks (a placement, or in a mesh's tuple), or []."""
    items = layout if isinstance(layout, (tuple, list)) else (layout,)
    for p in items:
        if isinstance(p, Blocks):
            return list(p.sizes)
    return []


_WIRES = {None: 0, "exact": 0, "bf16": 1, "fp16": 2, "fp8_e4m3": 3, "fp32": 4}


def _wire(wire):
    try:
        return _WIRES[wire]
    except (KeyError, TypeError):
        raise InvalidArgument(f"dsp: wire is None, \"bf16\", \"fp16\", \"fp8_e4m3\" or \"fp32\", not {wire!r}") from None


def _codes(layout, what):
    """One placement code per axis: a placement, or a tuple/list of them (a mesh's)."""
    items = layout if isinstance(layout, (tuple, list)) else (layout,)
    for p in items:
        if not isinstance(p, Placement):
            raise InvalidArgument(f"dsp: {what} is a placement (dsp.Sharded(d), dsp.Replicated(), dsp.Partial(), "
                                  f"dsp.Zigzag(d), dsp.Blocks(d, sizes)) or, "
                                  f"on a dsp.Mesh, a tuple of one per mesh axis; got {layout!r}")
    return [p.code for p in items]


def _shape(global_shape):
    try:
        shape = [int(e) for e in global_shape]
    except TypeError:
        raise InvalidArgument(f"dsp: global_shape is a sequence of extents, not {global_shape!r}") from None
    if any(e < 0 for e in shape):
        raise InvalidArgument(f"dsp: global_shape has a negative extent: {tuple(shape)}")
    return shape


def _shapes(global_shape):
    """One global shape, or a batch's one per block (tensors of different extents, a list of shapes):
    (the first shape, every shape or [])."""
    if isinstance(global_shape, (list, tuple)) and global_shape and \
            all(isinstance(g, (list, tuple)) for g in global_shape):
        shapes = [_shape(g) for g in global_shape]
        return shapes[0], shapes
    return _shape(global_shape), []


def _dim(d, what):
    if isinstance(d, bool) or not isinstance(d, int) or d < 0:
        raise InvalidArgument(f"dsp: {what} is a dim index (an int >= 0), not {d!r}")
    return d


def _cut_box(global_shape, layout, comm):
    """(offsets, shape) of this rank's block under a Zigzag or Blocks placement (the first chunk's offset)."""
    if not isinstance(comm, Comm):
        raise InvalidArgument("dsp: dsp.Zigzag and dsp.Blocks are placements of a plain communicator (dsp.Comm), "
                              "not of mesh axes")
    g = _shape(global_shape)
    if layout.dim >= len(g):
        raise InvalidArgument(f"dsp: {layout!r} names dim {layout.dim} of a tensor of {len(g)} dims")
    if isinstance(layout, Blocks) and (len(layout.sizes) != comm.size or sum(layout.sizes) != g[layout.dim]):
        raise InvalidArgument(f"dsp.Blocks: sizes {list(layout.sizes)} are not one per rank ({comm.size}) summing "
                              f"to the extent {g[layout.dim]}")
    p = layout.pieces(g[layout.dim], comm.rank, comm.size)
    offsets, shape = [0] * len(g), list(g)
    offsets[layout.dim], shape[layout.dim] = p[0][0], sum(c for _, c in p)
    return tuple(offsets), tuple(shape)


def local_shape(global_shape, layout, comm_or_mesh):
    """This rank's block shape of a tensor of ``global_shape`` under ``layout``."""
    if isinstance(layout, (Zigzag, Blocks)):
        return _cut_box(global_shape, layout, comm_or_mesh)[1]
    return tuple(_dsp.local_shape(_shape(global_shape), _codes(layout, "layout"), comm_or_mesh, _sizes(layout)))


def block_split(global_shape, layout, comm_or_mesh):
    """Where this rank's block jumps along a dim (C++ ``DistTensor::block_split``): None when the block is one
    box, else ``(dim, first, second)``: its first ``first`` indices of ``dim`` start at
    ``local_offsets(...)[dim]``, the rest at global index ``second``. Under ``dsp.Zigzag`` on a mesh axis, with
    ``dsp.Sharded`` of the same dim on a later axis, a rank's part of a zigzag block may span both chunks."""
    if isinstance(layout, Blocks):
        return None  # one range per rank
    return _dsp.block_split(_shape(global_shape), _codes(layout, "layout"), comm_or_mesh, _sizes(layout))


def local_offsets(global_shape, layout, comm_or_mesh):
    """Where this rank's block starts in the global tensor under ``layout``: one offset per dim (under
    ``dsp.Zigzag``, its first chunk's; ``Zigzag.pieces`` gives both)."""
    if isinstance(layout, (Zigzag, Blocks)):
        return _cut_box(global_shape, layout, comm_or_mesh)[0]
    return tuple(_dsp.local_offsets(_shape(global_shape), _codes(layout, "layout"), comm_or_mesh, _sizes(layout)))


def _collective(name, group, read):
    """The arguments `read()` returns, or, where they are bad on this rank, an InvalidArgument on every rank of
    `group` (the other ranks are in the call: they raise MismatchError instead of waiting)."""
    try:
        return read()
    except InvalidArgument as e:
        if isinstance(group, (Comm, Mesh)):
            _dsp.fail(group, name, str(e))
        raise


def redistribute(x, global_shape, src, dst, comm_or_mesh, wire=None):
    """Moves ``x`` (this rank's block, or a list of blocks: a batch) from layout ``src`` to ``dst``.

    Returns the new block (a list for a list), of the same kind as ``x``.
    ``global_shape``: the tensor's extents; for a batch of tensors of different extents (on a
    ``dsp.Comm`` or a ``dsp.Mesh``), a list of them, one per block.
    ``wire``: None (exact), "bf16", "fp16", "fp8_e4m3" (float tensors; docs/python.md says which wire
    takes which type) or "fp32" (double tensors). Collective over ``comm_or_mesh``.
    """
    (g, gs), s, d, w = _collective("dsp::redistribute", comm_or_mesh, lambda:
                                   (_shapes(global_shape), _codes(src, "src"), _codes(dst, "dst"), _wire(wire)))
    return _dsp.redistribute(x, g, s, d, comm_or_mesh, w, "dsp::redistribute", _sizes(src), _sizes(dst), gs)


def start_redistribute(x, global_shape, src, dst, comm_or_mesh, wire=None):
    """As redistribute, split-phase: returns a ``dsp.Handle`` (``test()``, ``wait()``, ``result()``).

    ``result()`` waits first. Wait every handle on every rank (a handle dropped unwaited waits when it
    is collected); do not touch ``x`` or the result until then.
    """
    def one_shape():
        g, gs = _shapes(global_shape)
        if gs:
            raise InvalidArgument("global_shape is a list of shapes: a batch of different extents moves blocking "
                                  "(dsp.redistribute), not split-phase; pass one shape")
        return g
    g, s, d, w = _collective("dsp::start_redistribute", comm_or_mesh, lambda:
                             (one_shape(), _codes(src, "src"), _codes(dst, "dst"), _wire(wire)))
    return _dsp.start(x, g, s, d, comm_or_mesh, w, _sizes(src), _sizes(dst))


def switch(x, global_shape, src_dim, dst_dim, comm, wire=None):
    """The paper's dynamic switch: Sharded(src_dim) -> Sharded(dst_dim), one all-to-all.

    ``global_shape`` as in redistribute: for a batch of different extents (GQA's Q with K and V), one
    shape per block.
    """
    (g, gs), s, d, w = _collective("dsp::dynamic_switch", comm, lambda:
                                   (_shapes(global_shape), _dim(src_dim, "src_dim"), _dim(dst_dim, "dst_dim"),
                                    _wire(wire)))
    return _dsp.redistribute(x, g, [s], [d], comm, w, "dsp::dynamic_switch", globals=gs)


def split(x, global_shape, dim, comm):
    """Replicated -> Sharded(dim): this rank's slice; local, no communication (so its errors are local too)."""
    return _dsp.redistribute(x, _shape(global_shape), [Replicated.code], [_dim(dim, "dim")], comm, 0, "dsp::split")


def gather(x, global_shape, dim, comm, wire=None):
    """Sharded(dim) -> Replicated: one all-gather."""
    g, d, w = _collective("dsp::gather", comm, lambda: (_shape(global_shape), _dim(dim, "dim"), _wire(wire)))
    return _dsp.redistribute(x, g, [d], [Replicated.code], comm, w, "dsp::gather")


def reshard(x, global_shape, src, src_group, dst, dst_group, parent, dtype=None):
    """Moves a tensor from one group of ranks to another, both inside ``parent`` (a ``dsp.Comm``).

    ``x``: this rank's block under ``src`` on ``src_group`` (a ``dsp.Comm`` or ``dsp.Mesh``), or None where
    this rank is outside that group (then ``src_group`` is None too). ``dst_group``: the target group, or None
    where this rank is outside it. Returns this rank's block under ``dst`` on ``dst_group`` (the same kind of
    array as ``x``; where ``x`` is None, of ``dtype``: a numpy dtype gives numpy, a torch dtype torch), or
    None outside it. ``dtype`` is needed where ``x`` is None. Collective over ``parent``: every rank calls
    it. Any layouts, meshes or communicators on each side (``dsp.Zigzag`` and ``dsp.Blocks`` on a
    ``dsp.Comm`` or in a mesh's tuple); Partial placements are refused (reduce first).
    """
    def read():
        if not isinstance(parent, Comm):
            raise InvalidArgument(f"dsp.reshard: parent is a dsp.Comm (the communicator holding both groups), "
                                  f"not {type(parent).__name__}")
        return _shape(global_shape), _codes(src, "src"), _codes(dst, "dst")

    g, s, d = _collective("dsp::reshard", parent, read)
    return _dsp.reshard(x, g, s, src_group, d, dst_group, parent, dtype, _sizes(src), _sizes(dst))

from . import hdf5  # noqa: E402,F401  (dsp.hdf5: save and load, after the names it uses)
