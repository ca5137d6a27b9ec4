#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The house rules of include/dsp (docs/design.md, "Rooms"): every header
sits on a floor, and includes only headers on its own floor or below; no
two headers share a file name. Prints each violation; exit status 1 if any.
With --alone CXX FLAGS..., also compiles every header alone (each must
include what it uses)."""
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "dsp")

# Floors, bottom up. A folder's headers share its floor; top-level headers
# are named one by one.
FLOORS = [
    ("leaves", ["config.hpp", "error.hpp", "version.hpp", "extents.hpp", "layout.hpp", "partition.hpp",
                "settings.hpp", "wire.hpp", "half.hpp"]),
    ("communicators", ["comm/"]),
    ("plans and the cost model", ["plan/", "cost.hpp"]),
    ("kernels", ["kernels/"]),
    ("protocol", ["core/"]),
    ("tensors", ["tensor.hpp", "mesh.hpp", "groups.hpp", "global_index.hpp"]),
    ("engine", ["engine/"]),
    ("typed call path", ["call/"]),
    ("front ends", ["primitives.hpp", "batch.hpp", "async.hpp", "redistribute.hpp", "distribute.hpp",
                    "pipeline.hpp", "reshard.hpp", "wisdom.hpp", "workspace.hpp", "dsp.hpp", "mpi.hpp",
                    "nccl.hpp", "hdf5.hpp"]),
    ("advisor", ["model.hpp", "model/"]),
]


def floor_of(path):
    for level, (_, members) in enumerate(FLOORS):
        for m in members:
            if path == m or (m.endswith("/") and path.startswith(m)):
                return level
    return None


def headers():
    out = []
    for d, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".hpp"):
                out.append(os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/"))
    return sorted(out)


def main():
    bad = []
    hs = headers()
    names = {}
    for h in hs:
        names.setdefault(os.path.basename(h), []).append(h)
        if floor_of(h) is None:
            bad.append(f"{h}: on no floor (add it to scripts/check-includes.py and docs/design.md)")
    for n, where in names.items():
        if len(where) > 1:
            bad.append(f"{n}: one name for {len(where)} headers: {', '.join(where)}")
    inc = re.compile(r'^\s*#\s*include\s*<dsp/([^>]+)>', re.M)
    for h in hs:
        f = floor_of(h)
        if f is None:
            continue
        with open(os.path.join(ROOT, h)) as fh:
            for target in inc.findall(fh.read()):
                t = floor_of(target)
                if t is None:
                    bad.append(f"{h} includes {target}, which is on no floor")
                elif t > f:
                    bad.append(f"{h} ({FLOORS[f][0]}) includes {target} ({FLOORS[t][0]}), a higher floor")
    if len(sys.argv) > 2 and sys.argv[1] == "--alone":
        cxx = sys.argv[2:]
        for h in hs:
            if h in ("nccl.hpp", "comm/nccl_communicator.hpp"):
                continue  # needs CUDA and NCCL (docs/gpu.md builds them)
            src = f"#include <dsp/{h}>\n"
            r = subprocess.run(cxx + ["-x", "c++", "-fsyntax-only", "-"], input=src, text=True,
                               capture_output=True)
            if r.returncode != 0:
                bad.append(f"{h} does not compile alone:\n{r.stderr[-2000:]}")
    for b in bad:
        print(b)
    print(f"{len(hs)} headers on {len(FLOORS)} floors: {'ok' if not bad else str(len(bad)) + ' problem(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
