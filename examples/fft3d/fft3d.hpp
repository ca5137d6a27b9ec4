// SPDX-License-Identifier: BSD-3-Clause
// A distributed 3-D complex-to-complex FFT (double complex) of N0 x N1 x N2
// data: FFTW's serial planner does every local transform, dsp does every
// transpose. Two decompositions:
//
//   Slab    a plain communicator of P ranks. The data enter Sharded<0> (planes
//           of dim 0): 2-D FFTs of each local plane (dims 1 and 2), one
//           dynamic_switch<1>, 1-D FFTs along dim 0. The spectrum is left
//           Sharded<1>: one all-to-all per transform.
//   Pencil  a 2-D mesh P0 x P1. The data enter as X-pencils
//           Axes<Sharded<0>, Sharded<1>> (dim 2 whole): FFT along dim 2;
//           redistribute to Axes<Sharded<0>, Sharded<2>> (dim 1 whole; one
//           all-to-all on mesh axis 1); FFT along dim 1; redistribute to
//           Axes<Sharded<1>, Sharded<2>> (dim 0 whole; one all-to-all on axis
//           0); FFT along dim 0. The spectrum is left as Z-pencils.
//
// inverse() runs the same steps backwards with FFTW_BACKWARD plans and
// divides by N0 N1 N2, so inverse(forward(x)) == x.
//
// Every local transform runs in place on the tensor's own row-major block,
// along its own (possibly strided) dims: one FFTW guru plan per stage, made
// once by the constructor, so nothing is copied or transposed locally and
// nothing is allocated after construction (dsp's redistribute into an
// existing tensor allocates nothing once warm). Any extents and any rank
// count work: dsp's partition gives the first E % P ranks one more element,
// and a rank whose block is empty skips its local transforms.
//
// Planner flags: FFTW_MEASURE (the default) times candidate algorithms once
// at construction and overwrites the tensors while doing so: fill the input
// after constructing. It pays when a transform runs many times (it picks the
// loop order and buffering of the strided transforms); FFTW_ESTIMATE plans in
// microseconds without touching the data and suits one-off transforms and
// tests.
#pragma once

#include <dsp/mpi.hpp>

#include <fftw3.h>
#include <mpi.h>

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fft3d {

using Complex = Kokkos::complex<double>;
using Extents = std::array<std::size_t, 3>;
using Comm = dsp::MpiCommunicator;
using Mesh2 = dsp::Mesh<2, Comm>;

static_assert(sizeof(Complex) == sizeof(fftw_complex), "Kokkos::complex<double> must have fftw_complex's layout");

/// An in-place FFTW plan over a row-major block of extents `e`: transforms
/// the dims in `dims` (one or two, increasing), once for every index of the
/// other dims, in the block's own strides. Empty blocks get no plan and
/// run nothing.
class LocalFFT {
 public:
  LocalFFT() = default;
  LocalFFT(Complex* data, const Extents& e, std::vector<int> dims, int sign, unsigned flags) {
    if (e[0] == 0 || e[1] == 0 || e[2] == 0) return;
    const std::array<std::ptrdiff_t, 3> stride{std::ptrdiff_t(e[1] * e[2]), std::ptrdiff_t(e[2]), 1};
    std::vector<fftw_iodim64> t, loop;
    for (int d = 0; d < 3; ++d) {
      const fftw_iodim64 io{std::ptrdiff_t(e[d]), stride[d], stride[d]};
      bool transformed = false;
      for (int x : dims) transformed = transformed || x == d;
      if (transformed) t.push_back(io);
      else if (e[d] > 1) loop.push_back(io);  // a loop of one iteration is no loop
    }
    auto* p = reinterpret_cast<fftw_complex*>(data);
    plan_ = fftw_plan_guru64_dft(int(t.size()), t.data(), int(loop.size()), loop.data(), p, p, sign, flags);
    if (!plan_) throw std::runtime_error("fft3d: FFTW could not plan a transform of extents " + text(e));
  }
  LocalFFT(LocalFFT&& o) noexcept : plan_(std::exchange(o.plan_, nullptr)) {}
  LocalFFT& operator=(LocalFFT&& o) noexcept {
    std::swap(plan_, o.plan_);
    return *this;
  }
  LocalFFT(const LocalFFT&) = delete;
  LocalFFT& operator=(const LocalFFT&) = delete;
  ~LocalFFT() {
    if (plan_) fftw_destroy_plan(plan_);
  }
  void operator()() const {
    if (plan_) fftw_execute(plan_);
  }
  static std::string text(const Extents& e) {
    return std::to_string(e[0]) + "x" + std::to_string(e[1]) + "x" + std::to_string(e[2]);
  }

 private:
  fftw_plan plan_ = nullptr;
};

/// Seconds spent per kind of step by one call of forward() or inverse() on
/// this rank (MPI_Wtime), when asked for.
struct StageTimes {
  double local_fft = 0;  ///< FFTW plans (and the 1/N scaling in inverse())
  double transpose = 0;  ///< dsp's switches / redistributions
};

namespace detail {
template <class X>
Complex* data(const X& x) {
  return x.local().data();
}
template <class X>
void scale(const X& x, double s) {
  Complex* p = data(x);
  const std::size_t n = x.local_size();
  for (std::size_t k = 0; k < n; ++k) p[k] *= s;
}
struct Clock {
  StageTimes* t;
  double t0 = MPI_Wtime();
  void lap(double StageTimes::*field) {
    const double now = MPI_Wtime();
    if (t) t->*field += now - t0;
    t0 = now;
  }
};
}  // namespace detail

/// The slab decomposition on a plain communicator.
class Slab {
 public:
  /// The data in space: planes of dim 0 (forward's input, inverse's output).
  using Space = dsp::DistTensor<Complex, 3, dsp::Sharded<0>, Comm>;
  /// The spectrum: dim 1 sharded (forward's output, inverse's input).
  using Spectrum = dsp::DistTensor<Complex, 3, dsp::Sharded<1>, Comm>;

  /// Collective. Allocates both tensors and makes the four plans (FFTW_MEASURE
  /// overwrites the tensors). On one rank both tensors share one block and no
  /// switch runs.
  Slab(const Comm& comm, const Extents& n, unsigned flags = FFTW_MEASURE)
      : n_(n), x_(comm, n), y_(comm.size() == 1 ? Spectrum(comm, n, x_.local()) : Spectrum(comm, n)) {
    const auto ex = x_.local_extents(), ey = y_.local_extents();
    f12_ = LocalFFT(detail::data(x_), ex, {1, 2}, FFTW_FORWARD, flags);
    f0_ = LocalFFT(detail::data(y_), ey, {0}, FFTW_FORWARD, flags);
    b0_ = LocalFFT(detail::data(y_), ey, {0}, FFTW_BACKWARD, flags);
    b12_ = LocalFFT(detail::data(x_), ex, {1, 2}, FFTW_BACKWARD, flags);
  }

  Space& space() { return x_; }
  Spectrum& spectrum() { return y_; }
  const Extents& extents() const { return n_; }
  bool shared() const { return x_.local().data() == y_.local().data(); }

  /// space() -> spectrum(). Collective. space() is overwritten.
  void forward(StageTimes* t = nullptr) {
    detail::Clock c{t};
    f12_();
    c.lap(&StageTimes::local_fft);
    if (!shared()) dsp::dynamic_switch<1>(x_, y_);
    c.lap(&StageTimes::transpose);
    f0_();
    c.lap(&StageTimes::local_fft);
  }
  /// spectrum() -> space(), divided by N0 N1 N2. Collective. spectrum() is overwritten.
  void inverse(StageTimes* t = nullptr) {
    detail::Clock c{t};
    b0_();
    c.lap(&StageTimes::local_fft);
    if (!shared()) dsp::dynamic_switch<0>(y_, x_);
    c.lap(&StageTimes::transpose);
    b12_();
    detail::scale(x_, 1.0 / double(n_[0] * n_[1] * n_[2]));
    c.lap(&StageTimes::local_fft);
  }

 private:
  Extents n_;
  Space x_;
  Spectrum y_;
  LocalFFT f12_, f0_, b0_, b12_;
};

/// The pencil decomposition on a 2-D mesh P0 x P1.
class Pencil {
 public:
  using XLayout = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>;  ///< dim 2 whole
  using YLayout = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<2>>;  ///< dim 1 whole
  using ZLayout = dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>;  ///< dim 0 whole
  /// The data in space (forward's input, inverse's output).
  using XPencils = dsp::DistTensor<Complex, 3, XLayout, Mesh2>;
  using YPencils = dsp::DistTensor<Complex, 3, YLayout, Mesh2>;
  /// The spectrum (forward's output, inverse's input).
  using ZPencils = dsp::DistTensor<Complex, 3, ZLayout, Mesh2>;

  // Each step is one all-to-all on one mesh axis, as the planner says.
  static_assert(dsp::redistribute_plan<XLayout, YLayout, 3>::collectives() == 1);
  static_assert(dsp::redistribute_plan<YLayout, ZLayout, 3>::collectives() == 1);

  /// Collective. Allocates the three tensors and makes the six plans
  /// (FFTW_MEASURE overwrites the tensors). A mesh axis of extent 1 makes two
  /// consecutive layouts the same block: those tensors then share it and the
  /// redistribution between them is skipped (P0 = 1 or P1 = 1 is a slab
  /// decomposition with dims 2 and 1 transformed one after the other).
  ///
  /// `chunks` (1 by default) > 1 prepares forward_overlapped(): the X -> Y
  /// transpose in that many chunks of this rank's rows of dim 0, each a
  /// split-phase switch on mesh.axis(1), so that the dim-1 FFTs of one chunk
  /// run while the next chunks travel. Collective over each axis-1 group (the
  /// chunk tensors wrap slices of the pencils: an agreement per chunk, once).
  Pencil(const Mesh2& mesh, const Extents& n, unsigned flags = FFTW_MEASURE, std::size_t chunks = 1)
      : n_(n), skip_x_y_(mesh.shape()[1] == 1), skip_y_z_(mesh.shape()[0] == 1), x_(mesh, n),
        y_(skip_x_y_ ? YPencils(mesh, n, x_.local()) : YPencils(mesh, n)),
        z_(skip_y_z_ ? ZPencils(mesh, n, y_.local()) : ZPencils(mesh, n)) {
    const auto ex = x_.local_extents(), ey = y_.local_extents(), ez = z_.local_extents();
    f2_ = LocalFFT(detail::data(x_), ex, {2}, FFTW_FORWARD, flags);
    f1_ = LocalFFT(detail::data(y_), ey, {1}, FFTW_FORWARD, flags);
    f0_ = LocalFFT(detail::data(z_), ez, {0}, FFTW_FORWARD, flags);
    b0_ = LocalFFT(detail::data(z_), ez, {0}, FFTW_BACKWARD, flags);
    b1_ = LocalFFT(detail::data(y_), ey, {1}, FFTW_BACKWARD, flags);
    b2_ = LocalFFT(detail::data(x_), ex, {2}, FFTW_BACKWARD, flags);
    if (chunks > 1 && !skip_x_y_) {
      // Rows [r0, r1) of dim 0 of this rank's block: the same rows on every
      // rank of the axis-1 group (they share coordinate 0), contiguous in
      // both pencils, and the X -> Y switch of those rows is the 1-D switch
      // Sharded<1> -> Sharded<2> of the slice [r1 - r0, N1, N2] on mesh.axis(1).
      const dsp::Partition rows{ex[0], chunks};
      for (std::size_t k = 0; k < chunks; ++k) {
        const std::pair<std::size_t, std::size_t> r{rows.offset(k), rows.offset(k) + rows.count(k)};
        const Extents slice{rows.count(k), n[1], n[2]};
        xc_.emplace_back(mesh.axis(1), slice, Kokkos::subview(x_.local(), r, Kokkos::ALL, Kokkos::ALL));
        yc_.emplace_back(mesh.axis(1), slice, Kokkos::subview(y_.local(), r, Kokkos::ALL, Kokkos::ALL));
        f1c_.emplace_back(detail::data(yc_.back()), yc_.back().local_extents(), std::vector<int>{1}, FFTW_FORWARD,
                          flags);
      }
    }
  }

  XPencils& space() { return x_; }
  ZPencils& spectrum() { return z_; }
  YPencils& middle() { return y_; }
  const Extents& extents() const { return n_; }

  /// space() -> spectrum(). Collective. space() and middle() are overwritten.
  void forward(StageTimes* t = nullptr) {
    detail::Clock c{t};
    f2_();
    c.lap(&StageTimes::local_fft);
    if (!skip_x_y_) dsp::redistribute<YLayout>(x_, y_);
    c.lap(&StageTimes::transpose);
    f1_();
    c.lap(&StageTimes::local_fft);
    if (!skip_y_z_) dsp::redistribute<ZLayout>(y_, z_);
    c.lap(&StageTimes::transpose);
    f0_();
    c.lap(&StageTimes::local_fft);
  }
  /// forward(), with the X -> Y transpose in chunks (the constructor's
  /// `chunks`): every chunk's switch is posted first (dsp::start_switch), then
  /// each chunk is waited for and its dim-1 FFTs run while the later chunks
  /// travel. The blocks of one chunk arrive along dim 1, the dim the next FFT
  /// transforms, so a chunk's FFT needs all of its blocks: the overlap is
  /// between chunks, not within one. The Y -> Z transpose stays blocking (its
  /// untouched dim, 2, is not contiguous in the blocks). Without chunks, forward().
  void forward_overlapped(StageTimes* t = nullptr) {
    if (xc_.empty()) return forward(t);
    detail::Clock c{t};
    f2_();
    c.lap(&StageTimes::local_fft);
    std::vector<decltype(dsp::start_switch<2>(xc_[0], yc_[0]))> h;
    h.reserve(xc_.size());
    for (std::size_t k = 0; k < xc_.size(); ++k) h.push_back(dsp::start_switch<2>(xc_[k], yc_[k]));
    c.lap(&StageTimes::transpose);
    for (std::size_t k = 0; k < xc_.size(); ++k) {
      h[k].wait();
      c.lap(&StageTimes::transpose);
      f1c_[k]();
      c.lap(&StageTimes::local_fft);
    }
    if (!skip_y_z_) dsp::redistribute<ZLayout>(y_, z_);
    c.lap(&StageTimes::transpose);
    f0_();
    c.lap(&StageTimes::local_fft);
  }

  /// spectrum() -> space(), divided by N0 N1 N2. Collective. spectrum() and
  /// middle() are overwritten.
  void inverse(StageTimes* t = nullptr) {
    detail::Clock c{t};
    b0_();
    c.lap(&StageTimes::local_fft);
    if (!skip_y_z_) dsp::redistribute<YLayout>(z_, y_);
    c.lap(&StageTimes::transpose);
    b1_();
    c.lap(&StageTimes::local_fft);
    if (!skip_x_y_) dsp::redistribute<XLayout>(y_, x_);
    c.lap(&StageTimes::transpose);
    b2_();
    detail::scale(x_, 1.0 / double(n_[0] * n_[1] * n_[2]));
    c.lap(&StageTimes::local_fft);
  }

 private:
  Extents n_;
  bool skip_x_y_, skip_y_z_;
  XPencils x_;
  YPencils y_;
  ZPencils z_;
  LocalFFT f2_, f1_, f0_, b0_, b1_, b2_;
  // forward_overlapped(): the X -> Y transpose's chunks on mesh.axis(1), and their dim-1 FFTs.
  std::vector<dsp::DistTensor<Complex, 3, dsp::Sharded<1>, Comm>> xc_;
  std::vector<dsp::DistTensor<Complex, 3, dsp::Sharded<2>, Comm>> yc_;
  std::vector<LocalFFT> f1c_;
};

}  // namespace fft3d
