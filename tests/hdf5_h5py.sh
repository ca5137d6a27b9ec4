#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# test_hdf5_h5py: runs the MPI command after the first two arguments (test_hdf5's
# cases at 2 ranks) with DSP_TEST_H5 naming the file it saves, then reads that
# file with h5py (Debian's python3-h5py, under Debian's /usr/bin/python3) and
# compares it with the global tensor. Exit 77 (skipped) without h5py.
#   hdf5_h5py.sh FILE CHECK_SCRIPT MPIEXEC ARGS...
set -eu
file="$1"
check="$2"
shift 2
python=/usr/bin/python3
if ! "$python" -c "import h5py" 2>/dev/null; then
  echo "test_hdf5_h5py skipped: $python cannot import h5py (Debian: apt-get install python3-h5py)"
  exit 77
fi
rm -f "$file" "$file.foreign"
# A file as h5py writes it, for the case "files h5py wrote": an empty dataset,
# an lzf one (a filter Debian's HDF5 lacks) and a gzip one, chunked by 2 rows.
"$python" - "$file.foreign" <<'EOF'
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("empty", shape=(0, 5, 6), dtype="f8")
    f.create_dataset("lzf", data=np.zeros((7, 5, 6)), chunks=(2, 5, 6), compression="lzf")
    f.create_dataset("gzip", data=np.zeros((7, 5, 6)), chunks=(2, 5, 6), compression="gzip")
EOF
DSP_TEST_H5="$file" DSP_TEST_H5_FOREIGN="$file.foreign" "$@"
"$python" "$check" "$file"
rm -f "$file.foreign"
