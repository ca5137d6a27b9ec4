// SPDX-License-Identifier: BSD-3-Clause
// Shared by dsp's benchmarks: timing over MPI ranks and the reference
// collectives dsp is compared against.
#pragma once

#include <dsp/mpi.hpp>

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace dsp_bench {

/// One timed iteration on every rank: barrier, run, then the slowest rank's
/// time (MPI_MAX), so every rank sees the same number.
template <class F>
double time_max(MPI_Comm comm, F&& f) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  f();
  double dt = MPI_Wtime() - t0, mx = 0;
  MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, comm);
  return mx;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

inline std::size_t block_count(std::size_t e, int n, int q) {  // dsp's partition: first e % n ranks get one more
  return e / n + (static_cast<std::size_t>(q) < e % n ? 1 : 0);
}
inline std::size_t block_offset(std::size_t e, int n, int q) {
  return static_cast<std::size_t>(q) * (e / n) + std::min<std::size_t>(q, e % n);
}

/// MPI_Alltoallw with one subarray datatype per peer: the switch Sharded<i> ->
/// Sharded<j> of a float tensor of global extents `g`, done by MPI's datatype
/// engine straight from the input into the output (self included).
class AlltoallwSwitch {
 public:
  AlltoallwSwitch(MPI_Comm comm, const std::vector<std::size_t>& g, int i, int j) : comm_(comm) {
    int n = 0, p = 0;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &p);
    const int r = static_cast<int>(g.size());
    std::vector<int> in(g.begin(), g.end()), out(g.begin(), g.end());
    in[i] = static_cast<int>(block_count(g[i], n, p));
    out[j] = static_cast<int>(block_count(g[j], n, p));
    for (int q = 0; q < n; ++q) {
      std::vector<int> ssub = in, soff(r, 0), rsub = out, roff(r, 0);
      ssub[j] = static_cast<int>(block_count(g[j], n, q));
      soff[j] = static_cast<int>(block_offset(g[j], n, q));
      rsub[i] = static_cast<int>(block_count(g[i], n, q));
      roff[i] = static_cast<int>(block_offset(g[i], n, q));
      MPI_Datatype s, t;
      MPI_Type_create_subarray(r, in.data(), ssub.data(), soff.data(), MPI_ORDER_C, MPI_FLOAT, &s);
      MPI_Type_create_subarray(r, out.data(), rsub.data(), roff.data(), MPI_ORDER_C, MPI_FLOAT, &t);
      MPI_Type_commit(&s);
      MPI_Type_commit(&t);
      stypes_.push_back(s);
      rtypes_.push_back(t);
    }
    ones_.assign(n, 1);
    zeros_.assign(n, 0);
  }
  ~AlltoallwSwitch() {
    for (auto& t : stypes_) MPI_Type_free(&t);
    for (auto& t : rtypes_) MPI_Type_free(&t);
  }
  AlltoallwSwitch(const AlltoallwSwitch&) = delete;
  AlltoallwSwitch& operator=(const AlltoallwSwitch&) = delete;
  void operator()(const float* in, float* out) {
    MPI_Alltoallw(in, ones_.data(), zeros_.data(), stypes_.data(), out, ones_.data(), zeros_.data(), rtypes_.data(),
                  comm_);
  }

 private:
  MPI_Comm comm_;
  std::vector<MPI_Datatype> stypes_, rtypes_;
  std::vector<int> ones_, zeros_;
};

}  // namespace dsp_bench
