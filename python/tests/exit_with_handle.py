# SPDX-License-Identifier: BSD-3-Clause
# A script that keeps split-phase handles at module level until exit (one
# waited, one not): Python collects them after dsp finalized Kokkos, and the
# process must still exit cleanly (run by ctest: python.exit_with_handle).
import numpy as np
from mpi4py import MPI

import dsp

comm = dsp.Comm(MPI.COMM_WORLD)
G = (2, 36, 8, 4)  # large enough that the split-phase switch takes scratch buffers
x = np.ones(dsp.local_shape(G, dsp.Sharded(1), comm), np.float32)
h = dsp.start_redistribute(x, G, dsp.Sharded(1), dsp.Sharded(2), comm)
y = h.result()
assert y.shape == dsp.local_shape(G, dsp.Sharded(2), comm) and (y == 1).all()
mesh = dsp.Mesh(comm, (comm.size, 1))
docs = [G[1]] + [0] * (comm.size - 1)
b = dsp.redistribute(x, G, (dsp.Sharded(1), dsp.Replicated()), (dsp.Blocks(1, docs), dsp.Sharded(2)), mesh)
h2 = dsp.start_redistribute(b, G, (dsp.Blocks(1, docs), dsp.Sharded(2)), (dsp.Sharded(2), dsp.Sharded(1)), mesh)
h2.wait()
print("exit_with_handle: ok")
