// SPDX-License-Identifier: BSD-3-Clause
// The distributed 3-D FFT of fft3d.hpp, slab and pencil on every mesh shape
// of the rank count, uneven extents and extents below the rank count
// included: the forward spectrum against a serial FFTW transform of the whole
// array (gathered with dsp) and, where FFTW-MPI is installed, against
// FFTW-MPI's own transform of the same data; inverse(forward(x)) == x. Each
// error is asserted below its tolerance, and a last case shows that the
// checks fail on a spectrum that is wrong in one element.
#include "verify.hpp"

#include <doctest/doctest.h>

#include <vector>

namespace {

MPI_Comm world() { return MPI_COMM_WORLD; }
const fft3d::Comm& comm() {
  static fft3d::Comm c{MPI_COMM_WORLD};
  return c;
}

constexpr double kSpectrumTol = 1e-9;    // relative, against FFTW's own transforms
constexpr double kRoundTripTol = 1e-12;  // relative, inverse(forward(x)) against x

// Uneven at 2, 4 and 6 ranks; 5x3x7 and 3x1x2 leave ranks with empty blocks
// (extents below the rank count) and have extents of 1.
const std::vector<fft3d::Extents> kSizes{{12, 10, 9}, {8, 8, 8}, {5, 3, 7}, {3, 1, 2}};

std::vector<std::array<int, 2>> mesh_shapes(int n) {
  std::vector<std::array<int, 2>> s;
  for (int p0 = 1; p0 <= n; ++p0)
    if (n % p0 == 0) s.push_back({p0, n / p0});
  return s;
}

/// Runs the three checks on a decomposition D (Slab or Pencil) built by make().
template <class D, class Make>
void check(Make make, const fft3d::Extents& n, unsigned flags) {
  D fft = make(n, flags);  // FFTW_MEASURE overwrites the tensors: fill after planning
  fft3d::fill(fft.space());
  fft.forward();
  const auto all = fft3d::gather_all(fft.spectrum());
  CHECK(fft3d::serial_error(all, world()) < kSpectrumTol);
#ifdef FFT3D_HAVE_FFTW_MPI
  CHECK(fft3d::fftw_mpi_error(all, world()) < kSpectrumTol);
#endif
  fft.inverse();
  CHECK(fft3d::round_trip_error(fft.space(), world()) < kRoundTripTol);
  // A second forward and inverse with the same plans: nothing is left over from the first.
  fft3d::fill(fft.space());
  fft.forward();
  CHECK(fft3d::serial_error(fft3d::gather_all(fft.spectrum()), world()) < kSpectrumTol);
  fft.inverse();
  CHECK(fft3d::round_trip_error(fft.space(), world()) < kRoundTripTol);
}

}  // namespace

TEST_CASE("slab: spectrum against serial FFTW and FFTW-MPI, round trip") {
  auto make = [](const fft3d::Extents& e, unsigned f) { return fft3d::Slab(comm(), e, f); };
  for (const auto& n : kSizes) {
    INFO("extents ", fft3d::LocalFFT::text(n), ", ranks ", comm().size());
    check<fft3d::Slab>(make, n, FFTW_ESTIMATE);
  }
  // FFTW_MEASURE plans by running transforms on the tensors (other plans than ESTIMATE's); once.
  check<fft3d::Slab>(make, kSizes[0], FFTW_MEASURE);
}

TEST_CASE("pencil on every mesh shape: spectrum against serial FFTW and FFTW-MPI, round trip") {
  for (const auto& shape : mesh_shapes(comm().size())) {
    fft3d::Mesh2 mesh{comm(), shape};
    for (const auto& n : kSizes) {
      INFO("extents ", fft3d::LocalFFT::text(n), ", mesh ", shape[0], "x", shape[1]);
      check<fft3d::Pencil>([&](const fft3d::Extents& e, unsigned f) { return fft3d::Pencil(mesh, e, f); }, n,
                           FFTW_ESTIMATE);
    }
  }
}

TEST_CASE("the checks fail on a spectrum with one wrong element") {
  const fft3d::Extents n{12, 10, 9};
  fft3d::Slab fft(comm(), n, FFTW_ESTIMATE);
  fft3d::fill(fft.space());
  fft.forward();
  REQUIRE(fft3d::serial_error(fft3d::gather_all(fft.spectrum()), world()) < kSpectrumTol);
  // The last rank holding spectrum elements changes its first one by 1e-6 of the spectrum's scale.
  const int holder = int(std::min<std::size_t>(n[1], std::size_t(comm().size()))) - 1;
  if (comm().rank() == holder) fft.spectrum().local().data()[0] += fft3d::Complex(1e-6 * double(n[0] * n[1]), 0);
  const auto all = fft3d::gather_all(fft.spectrum());
  CHECK(fft3d::serial_error(all, world()) > kSpectrumTol);
#ifdef FFT3D_HAVE_FFTW_MPI
  CHECK(fft3d::fftw_mpi_error(all, world()) > kSpectrumTol);
#endif
  // An inverse of the wrong spectrum is not the input.
  fft.inverse();
  CHECK(fft3d::round_trip_error(fft.space(), world()) > kRoundTripTol);
}

TEST_CASE("slab and pencil give the same spectrum as each other, element by element") {
  const fft3d::Extents n{7, 6, 5};
  fft3d::Slab slab(comm(), n, FFTW_ESTIMATE);
  fft3d::fill(slab.space());
  slab.forward();
  const auto a = fft3d::gather_all(slab.spectrum());
  for (const auto& shape : mesh_shapes(comm().size())) {
    fft3d::Pencil pencil(fft3d::Mesh2{comm(), shape}, n, FFTW_ESTIMATE);
    fft3d::fill(pencil.space());
    pencil.forward();
    const auto b = fft3d::gather_all(pencil.spectrum());
    CHECK(fft3d::relative_error(b.local().data(), a.local().data(), a.local_size()) < kSpectrumTol);
  }
}

TEST_CASE("pencil with the X -> Y transpose in overlapped chunks: the same spectrum as forward()") {
  for (const auto& shape : mesh_shapes(comm().size())) {
    fft3d::Mesh2 mesh{comm(), shape};
    for (const fft3d::Extents n : {fft3d::Extents{12, 10, 9}, fft3d::Extents{7, 6, 5}, fft3d::Extents{2, 9, 8}}) {
      INFO("extents ", fft3d::LocalFFT::text(n), ", mesh ", shape[0], "x", shape[1]);
      fft3d::Pencil plain(mesh, n, FFTW_ESTIMATE);
      fft3d::fill(plain.space());
      plain.forward();
      const auto a = fft3d::gather_all(plain.spectrum());
      for (std::size_t chunks : {2u, 3u, 5u}) {  // more chunks than some ranks' rows: empty chunks too
        fft3d::Pencil over(mesh, n, FFTW_ESTIMATE, chunks);
        fft3d::fill(over.space());
        over.forward_overlapped();
        const auto b = fft3d::gather_all(over.spectrum());
        CHECK(fft3d::relative_error(b.local().data(), a.local().data(), a.local_size()) < kSpectrumTol);
        over.inverse();
        CHECK(fft3d::round_trip_error(over.space(), world()) < kRoundTripTol);
      }
    }
  }
}
