# SPDX-License-Identifier: BSD-3-Clause
"""dsp.hdf5: checkpoints as plain HDF5 datasets (parallel HDF5, MPI-IO), the C++ dsp::hdf5 from Python.

A file written by ``save`` holds the global tensor as one row-major dataset of its global shape and
native element type: h5py and h5dump read it as an ordinary array, and ``load`` reads it back under
any layout (``dsp.Zigzag`` and ``dsp.Blocks`` too, on a ``dsp.Comm`` or in a mesh's tuple), mesh and
rank count. Both
are collective over the group; a bad argument, a missing file
or dataset, or a dataset of another shape or element type raises a ``dsp.Error`` on every rank before
anything is written (``load``: before anything is read into the result).

Element types: float32, float64, float16, bfloat16 (torch), int8 ... int64, uint8 ... uint64.
Only where dsp was built with its HDF5 component (``dsp.hdf5.available``).
"""
from . import _dsp
from . import InvalidArgument, _codes, _collective, _shape, _sizes

available = bool(_dsp.has_hdf5)

__all__ = ["save", "load", "available"]


def _need():
    if not available:
        raise InvalidArgument("dsp.hdf5: this build of dsp has no HDF5 component (it needs a parallel HDF5: "
                              "Debian's libhdf5-openmpi-dev, then rebuild)")


def _names(file, dataset):
    if not isinstance(file, str) or not isinstance(dataset, str):
        raise InvalidArgument(f"dsp.hdf5: file and dataset are strings, not {file!r} and {dataset!r}")
    return file, dataset


def save(x, global_shape, layout, comm_or_mesh, file, dataset):
    """Writes the global tensor whose block on this rank is ``x`` (under ``layout`` on ``comm_or_mesh``)
    as dataset ``dataset`` (a path; groups on the way are made) of ``file`` (created, or opened when it
    exists; a dataset of the same name is replaced only when it has the same shape and type). Collective."""
    _need()
    g, c, (f, d) = _collective("dsp::hdf5::save", comm_or_mesh, lambda: (
        _shape(global_shape), _codes(layout, "layout"), _names(file, dataset)))
    _dsp.hdf5_save(x, g, c, comm_or_mesh, f, d, _sizes(layout))


def load(file, dataset, global_shape, layout, comm_or_mesh, dtype):
    """Reads dataset ``dataset`` of ``file`` (of shape ``global_shape`` and element type ``dtype``: a
    numpy dtype gives a numpy array, a torch dtype a torch tensor) and returns this rank's block under
    ``layout`` on ``comm_or_mesh``. Collective."""
    _need()
    g, c, (f, d) = _collective("dsp::hdf5::load", comm_or_mesh, lambda: (
        _shape(global_shape), _codes(layout, "layout"), _names(file, dataset)))
    return _dsp.hdf5_load(f, d, g, c, comm_or_mesh, dtype, _sizes(layout))
