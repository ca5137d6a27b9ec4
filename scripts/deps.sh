#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs what dsp's build, tests and examples need on Debian 12, if missing.
# Runs apt-get as root (directly, or through sudo).
set -euo pipefail
# FFTW and FFTW-MPI (about 5 MB to download) so that test_fft3d, the 3-D FFT example's test
# against FFTW and FFTW-MPI, runs in CI; without them CMake leaves that test and example out.
# Parallel HDF5 and h5py (about 40 MB) for dsp::hdf5, its tests (test_hdf5, and test_hdf5_h5py, which
# reads the saved file with Debian's python3-h5py) and the checkpoint example.
# CLI11 (header-only) for dsp-plan's and dsp-bench's option parsers.
# pybind11, mpi4py, numpy and pytest for the Python module (python/) and its tests; PyTorch for CPU
# (about 40 MB) for dsp.torch, its tests and examples/python/ulysses_torch.py.
pkgs=(cmake g++ make libtrilinos-kokkos-dev libopenmpi-dev openmpi-bin doctest-dev libfftw3-dev libfftw3-mpi-dev
      libhdf5-openmpi-dev python3-h5py libcli11-dev pybind11-dev python3-mpi4py python3-numpy python3-pytest
      python3-torch)
[ "${DSP_WITH_BENCH:-0}" = 1 ] && pkgs+=(libbenchmark-dev gnuplot-nox)
[ "${DSP_WITH_FUZZ:-0}" = 1 ] && pkgs+=(clang-14 libclang-rt-14-dev)  # scripts/fuzz.sh (libFuzzer)
[ "${DSP_WITH_DOCS:-0}" = 1 ] && pkgs+=(doxygen)  # the `docs` target (API reference)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "dsp: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
