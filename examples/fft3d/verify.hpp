// SPDX-License-Identifier: BSD-3-Clause
// Verification of fft3d.hpp, shared by the fft3d program and its test:
//   - the input: a deterministic pseudo-random value per global index, so
//     every rank and every reference builds the same data;
//   - a serial 3-D FFT of the whole array by FFTW (fftw_plan_dft_3d), on one
//     rank, against dsp's result gathered to Replicated with dsp::redistribute;
//   - FFTW-MPI's own 3-D transform (fftw_mpi_plan_dft_3d) of the same data,
//     where FFTW-MPI was found (FFT3D_HAVE_FFTW_MPI): FFTW-MPI cuts dim 0 into
//     its own slabs (fftw_mpi_local_size_3d), which need not be dsp's, so each
//     rank compares its FFTW-MPI slab with the gathered result per global index.
// Errors are relative: max |a - b| over the elements / max |b|.
#pragma once

#include "fft3d.hpp"

#ifdef FFT3D_HAVE_FFTW_MPI
#include <fftw3-mpi.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace fft3d {

/// The input at linear global index g: real and imaginary parts in [-1, 1)
/// from a 64-bit mix of g (splitmix64's finaliser).
inline Complex sample(std::size_t g) {
  auto mix = [](std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto unit = [](std::uint64_t z) { return double(z >> 11) * 0x1.0p-52 - 1.0; };
  return Complex(unit(mix(2 * std::uint64_t(g))), unit(mix(2 * std::uint64_t(g) + 1)));
}

inline std::size_t linear(const Extents& n, std::size_t i, std::size_t j, std::size_t k) {
  return (i * n[1] + j) * n[2] + k;
}

/// Writes sample() into this rank's block, by global index (dsp::fill).
template <class X>
void fill(const X& x) {
  const auto n = x.global_extents();
  dsp::fill(x, [&](const auto& g) { return sample(linear(n, g[0], g[1], g[2])); });
}

inline double max_all(MPI_Comm comm, double v) {
  double r = 0;
  MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MAX, comm);
  return r;
}

/// Round trip: the relative error of x against the input sample(), max over
/// the ranks of x's world communicator.
template <class X>
double round_trip_error(const X& x, MPI_Comm comm) {
  const auto n = x.global_extents();
  double err = 0, ref = 0;
  dsp::for_each(x, [&](const auto& g, const Complex& v) {
    const Complex s = sample(linear(n, g[0], g[1], g[2]));
    err = std::max(err, Kokkos::abs(v - s));
    ref = std::max(ref, Kokkos::abs(s));
  });
  err = max_all(comm, err), ref = max_all(comm, ref);
  return ref > 0 ? err / ref : err;
}

/// The forward 3-D DFT of the whole sample() array, serial FFTW.
inline std::vector<Complex> serial_forward(const Extents& n) {
  std::vector<Complex> a(n[0] * n[1] * n[2]);
  for (std::size_t g = 0; g < a.size(); ++g) a[g] = sample(g);
  if (a.empty()) return a;
  auto* p = reinterpret_cast<fftw_complex*>(a.data());
  fftw_plan plan = fftw_plan_dft_3d(int(n[0]), int(n[1]), int(n[2]), p, p, FFTW_FORWARD, FFTW_ESTIMATE);
  fftw_execute(plan);
  fftw_destroy_plan(plan);
  return a;
}

/// max |a - b| / max |b| over two whole arrays.
inline double relative_error(const Complex* a, const Complex* b, std::size_t n) {
  double err = 0, ref = 0;
  for (std::size_t k = 0; k < n; ++k) {
    err = std::max(err, Kokkos::abs(a[k] - b[k]));
    ref = std::max(ref, Kokkos::abs(b[k]));
  }
  return ref > 0 ? err / ref : err;
}

/// The whole spectrum of `y` (any layout of a communicator or mesh), gathered
/// to every rank with dsp::redistribute to Replicated (on every mesh axis).
template <class Y>
auto gather_all(const Y& y) {
  using G = typename Y::communicator_type;
  if constexpr (dsp::is_mesh_v<G>) return dsp::redistribute<dsp::Axes<dsp::Replicated, dsp::Replicated>>(y);
  else return dsp::redistribute<dsp::Replicated>(y);
}

/// Check (i): the whole spectrum `all` (gather_all's result) against a serial
/// FFTW transform of the whole array, computed on rank 0 of `comm`. Returns
/// the relative error on every rank.
template <class R>
double serial_error(const R& all, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  double err = 0;
  if (rank == 0) {
    const auto ref = serial_forward(all.global_extents());
    err = relative_error(all.local().data(), ref.data(), ref.size());
  }
  MPI_Bcast(&err, 1, MPI_DOUBLE, 0, comm);
  return err;
}

#ifdef FFT3D_HAVE_FFTW_MPI
/// This rank's slab of FFTW-MPI's forward transform of sample(): rows
/// [start, start + count) of dim 0, FFTW-MPI's own partition.
struct MpiSlab {
  std::size_t start = 0, count = 0;
  std::vector<Complex> data;
};

/// FFTW-MPI's forward 3-D transform (fftw_mpi_plan_dft_3d, default layout,
/// in place, FFTW_ESTIMATE) of the sample() array. Collective over comm.
/// Calls fftw_mpi_init() first (harmless when repeated).
inline MpiSlab fftw_mpi_forward(const Extents& n, MPI_Comm comm) {
  fftw_mpi_init();
  ptrdiff_t local_n0 = 0, start = 0;
  const ptrdiff_t alloc =
      fftw_mpi_local_size_3d(ptrdiff_t(n[0]), ptrdiff_t(n[1]), ptrdiff_t(n[2]), comm, &local_n0, &start);
  fftw_complex* buf = fftw_alloc_complex(std::size_t(std::max<ptrdiff_t>(alloc, 1)));
  fftw_plan plan = fftw_mpi_plan_dft_3d(ptrdiff_t(n[0]), ptrdiff_t(n[1]), ptrdiff_t(n[2]), buf, buf, comm, FFTW_FORWARD,
                                        FFTW_ESTIMATE);
  MpiSlab s{std::size_t(start), std::size_t(local_n0), {}};
  const std::size_t plane = n[1] * n[2];
  auto* c = reinterpret_cast<Complex*>(buf);
  for (std::size_t k = 0; k < s.count * plane; ++k) c[k] = sample(s.start * plane + k);
  fftw_execute(plan);
  s.data.assign(c, c + s.count * plane);
  fftw_destroy_plan(plan);
  fftw_free(buf);
  return s;
}

/// Check (iii): the whole spectrum `all` (gather_all's result) against
/// FFTW-MPI's transform of the same data, per global index: each rank its
/// FFTW-MPI slab against the same rows of `all`. Returns the relative error,
/// max over the ranks, on every rank.
template <class R>
double fftw_mpi_error(const R& all, MPI_Comm comm) {
  const MpiSlab s = fftw_mpi_forward(all.global_extents(), comm);
  const std::size_t plane = all.global_extents()[1] * all.global_extents()[2];
  double err = 0, ref = 0;
  const Complex* a = all.local().data() + s.start * plane;  // the same global indices
  for (std::size_t k = 0; k < s.data.size(); ++k) {
    err = std::max(err, Kokkos::abs(a[k] - s.data[k]));
    ref = std::max(ref, Kokkos::abs(s.data[k]));
  }
  err = max_all(comm, err), ref = max_all(comm, ref);
  return ref > 0 ? err / ref : err;
}
#endif

}  // namespace fft3d
