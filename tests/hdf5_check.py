# SPDX-License-Identifier: BSD-3-Clause
# Reads the file test_hdf5 saved (DSP_TEST_H5) with h5py and checks it is
# the global tensor: dataset "fields/u", float64, extents [7, 5, 6], element
# (i, j, k) = i * 10000 + j * 100 + k + 0.5, row-major; and "ints/v", int32
# [9, 4], element (i, j) = i * 100 + j - 50; "halves/h", float16 [7, 5, 6],
# element (i, j, k) = (i * 30 + j * 6 + k - 100) / 4; and "zigzag/u1", saved
# from a Zigzag<1> tensor (two boxes per rank), five times fields/u.
import sys

import h5py
import numpy as np

with h5py.File(sys.argv[1], "r") as f:
    u = f["fields/u"]
    assert u.dtype == np.float64, u.dtype
    assert u.shape == (7, 5, 6), u.shape
    i, j, k = np.indices(u.shape)
    want = i * 10000.0 + j * 100.0 + k + 0.5
    bad = np.count_nonzero(u[...] != want)
    assert bad == 0, f"{bad} elements of fields/u differ"
    v = f["ints/v"]
    assert v.dtype == np.int32, v.dtype
    assert v.shape == (9, 4), v.shape
    i, j = np.indices(v.shape)
    bad = np.count_nonzero(v[...] != i * 100 + j - 50)
    assert bad == 0, f"{bad} elements of ints/v differ"
    h = f["halves/h"]  # dsp::float16: numpy's float16
    assert h.dtype == np.float16, h.dtype
    assert h.shape == (7, 5, 6), h.shape
    i, j, k = np.indices(h.shape)
    bad = np.count_nonzero(h[...].astype(np.float32) != ((i * 30 + j * 6 + k) - 100) * 0.25)
    assert bad == 0, f"{bad} elements of halves/h differ"
    z = f["zigzag/u1"]
    assert z.shape == (7, 5, 6), z.shape
    i, j, k = np.indices(z.shape)
    bad = np.count_nonzero(z[...] != 5 * (i * 10000.0 + j * 100.0 + k + 0.5))
    assert bad == 0, f"{bad} elements of zigzag/u1 differ"
print("h5py: fields/u, ints/v, halves/h and zigzag/u1 are the global tensors")
