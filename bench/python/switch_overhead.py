# SPDX-License-Identifier: BSD-3-Clause
"""dsp.switch from Python against the same C++ call, interleaved in one run.

For each global shape [B, T, S, C] (float32): rounds of `reps` calls of
dsp.switch(x, G, 1, 2, comm) on a numpy block (and on a torch tensor, where
torch is installed), each round beside `reps` calls of
the typed C++ `y = dsp::dynamic_switch<2>(x)` (the module's _cxx_switch_seconds,
timed in C++); per call, the slowest rank's time, the best round of each.
Prints the Python/C++ ratio and the Python overhead per call.

    mpiexec -n 2 /usr/bin/python3 bench/python/switch_overhead.py   (PYTHONPATH=<build>/python)
"""
import sys
import time

import numpy as np
from mpi4py import MPI

import dsp

SHAPES = {"4 KiB": (1, 8, 8, 16), "64 KiB": (1, 16, 32, 32), "4 MiB": (1, 64, 128, 128)}


def python_seconds(comm, g, reps, kind="numpy"):
    x = np.ones(dsp.local_shape(g, dsp.Sharded(1), comm), np.float32)
    if kind == "torch":
        import torch
        x = torch.from_numpy(x)
    y = dsp.switch(x, g, 1, 2, comm)  # warm
    MPI.COMM_WORLD.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        y = dsp.switch(x, g, 1, 2, comm)
    t = (time.perf_counter() - t0) / reps
    del y
    return MPI.COMM_WORLD.allreduce(t, op=MPI.MAX)


def main():
    comm = dsp.Comm(MPI.COMM_WORLD)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    try:
        import torch  # noqa: F401
        torch_too = True
    except ImportError:
        torch_too = False
    if comm.rank == 0:
        print(f"{comm.size} ranks, {rounds} interleaved rounds; per call, best round")
        print(f"{'global size':>12} {'C++ us':>10} {'numpy us':>10} {'ratio':>7} {'overhead us':>12} "
              f"{'torch us':>10} {'ratio':>7} {'overhead us':>12}")
    for name, g in SHAPES.items():
        reps = 2000 if name == "4 KiB" else 500 if name == "64 KiB" else 50
        py, pt, cxx = [], [], []
        for _ in range(rounds):
            cxx.append(dsp._dsp._cxx_switch_seconds(comm, list(g), reps))
            py.append(python_seconds(comm, g, reps))
            if torch_too:
                pt.append(python_seconds(comm, g, reps, "torch"))
        c, p = min(cxx) * 1e6, min(py) * 1e6
        t = min(pt) * 1e6 if torch_too else float("nan")
        if comm.rank == 0:
            print(f"{name:>12} {c:10.2f} {p:10.2f} {p / c:7.3f} {p - c:12.2f} {t:10.2f} {t / c:7.3f} {t - c:12.2f}")


if __name__ == "__main__":
    main()
