// SPDX-License-Identifier: BSD-3-Clause
// Checks of the partition and of every plan type (switch: alltoall,
// alltoallv, pairwise/datatypes; gather: allgather, peer; scatter; split;
// the packed switch of batches and wires; the exchange between cuts:
// Zigzag, Blocks, the Sharded rule, whole),
// shared by the randomized property test (test_plan_property.cpp) and the
// libFuzzer target (fuzz/fuzz_plan.cpp). The includer defines
// DSP_PLAN_FAIL(message), which must not return (doctest's FAIL, or print and
// abort).
#pragma once

#include <version>
// The packed (batch and wire) checks need the engine, which needs
// std::source_location: clang 14 with libstdc++ 12 (the fuzz build) lacks it.
#if defined(__cpp_lib_source_location)
#include <dsp/kernels/convert.hpp>
#include <dsp/plan/packed.hpp>
#define DSP_PLAN_CHECKS_PACKED 1
#endif
#include <dsp/kernels/copy.hpp>
#include <dsp/partition.hpp>
#include <dsp/plan/cut.hpp>
#include <dsp/plan/gather.hpp>
#include <dsp/plan/switch.hpp>

#include <Kokkos_Core.hpp>

#include <functional>
#include <memory>
#include <optional>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#ifndef DSP_PLAN_FAIL
#error "define DSP_PLAN_FAIL(message) before including plan_checks.hpp"
#endif

using dsp::Partition;
using dsp::Runs;
using dsp::detail::CopyTask;
using Ext = std::vector<std::size_t>;

/// What is being checked, for the failure message.
inline std::string& plan_context() {
  static std::string c;
  return c;
}
#define PLAN_CONTEXT(...)           \
  do {                              \
    std::ostringstream plan_o_;     \
    plan_o_ << __VA_ARGS__;         \
    plan_context() = plan_o_.str(); \
  } while (0)
#define PLAN_FAIL_MSG(...)                            \
  do {                                                \
    std::ostringstream plan_o_;                       \
    plan_o_ << plan_context() << ": " << __VA_ARGS__; \
    DSP_PLAN_FAIL(plan_o_.str());                     \
  } while (0)
// Costs only a branch until it fails (doctest's REQUIRE costs more than the
// arithmetic under test in the hot loops).
#define ENSURE(...)                                                         \
  do {                                                                      \
    if (!(__VA_ARGS__)) PLAN_FAIL_MSG("ENSURE( " #__VA_ARGS__ " ) failed"); \
  } while (0)
#define PLAN_ENSURE_MSG(cond, ...)           \
  do {                                       \
    if (!(cond)) PLAN_FAIL_MSG(__VA_ARGS__); \
  } while (0)

namespace {

std::string text(const Ext& e) { return dsp::detail::text(e); }

std::size_t product(const Ext& e) { return dsp::detail::product(e); }

/// Local extents and offsets of rank p under a layout (-1: Replicated, d: Sharded<d>).
struct Frame {
  Ext ext, off;
  std::size_t size() const { return product(ext); }
};
Frame frame(const Ext& g, long layout, std::size_t p, std::size_t n) {
  Frame f{g, Ext(g.size(), 0)};
  if (layout >= 0) {
    const Partition part{g[std::size_t(layout)], n};
    f.ext[std::size_t(layout)] = part.count(p);
    f.off[std::size_t(layout)] = part.offset(p);
  }
  return f;
}
/// Global linear index of the element at local linear index k of a frame.
std::size_t global_of(const Ext& g, const Frame& f, std::size_t k) {
  Ext idx(g.size());
  for (std::size_t d = g.size(); d-- > 0;) {
    idx[d] = k % f.ext[d] + f.off[d];
    k /= f.ext[d];
  }
  std::size_t lin = 0;
  for (std::size_t d = 0; d < g.size(); ++d) lin = lin * g[d] + idx[d];
  return lin;
}

/// Element e of a run pattern; the copy kernel's mapping when the shorter
/// run length divides the longer (checked by check_task).
std::size_t at(const Runs& r, std::size_t e) { return dsp::detail::element_at(r, e); }
/// One past the last element of a run pattern covering n elements.
std::size_t end_of(const Runs& r, std::size_t n) { return n == 0 ? 0 : at(r, n - 1) + 1; }

/// What copy_runs requires of a task, and that it stays inside both buffers.
bool check_task(const CopyTask& t, std::size_t dst_size, std::size_t src_size, std::string& why) {
  if (t.elems == 0) return true;
  if (t.dst.len == 0 || t.src.len == 0) return why = "an empty run in a non-empty task", false;
  const std::size_t lo = std::min(t.dst.len, t.src.len), hi = std::max(t.dst.len, t.src.len);
  if (hi % lo != 0)
    return why = "run lengths " + std::to_string(t.dst.len) + " and " + std::to_string(t.src.len) + " do not divide",
           false;
  if (t.elems % lo != 0) return why = "elems not a multiple of the run length", false;
  if (t.dst.stride < t.dst.len && t.elems > t.dst.len) return why = "dst runs overlap (stride < len)", false;
  if (t.src.stride < t.src.len && t.elems > t.src.len) return why = "src runs overlap (stride < len)", false;
  if (end_of(t.dst, t.elems) > dst_size) return why = "dst out of bounds", false;
  if (end_of(t.src, t.elems) > src_size) return why = "src out of bounds", false;
  return true;
}

/// The contiguous side of a task that covers position pos, or nullptr.
const CopyTask* covering(const std::vector<CopyTask>& tasks, bool dst_side, std::size_t pos) {
  for (const CopyTask& t : tasks) {
    const Runs& r = dst_side ? t.dst : t.src;
    if (t.elems > 0 && r.base <= pos && pos < r.base + t.elems) return &t;
  }
  return nullptr;
}

/// The tasks' contiguous sides tile [0, total) in order, each as one contiguous run.
bool tiles_contiguously(const std::vector<CopyTask>& tasks, bool dst_side, std::size_t total) {
  std::size_t at_ = 0;
  for (const CopyTask& t : tasks) {
    const Runs& r = dst_side ? t.dst : t.src;
    if (t.elems == 0) continue;
    if (r.base != at_ || r.len != t.elems) return false;
    at_ += t.elems;
  }
  return at_ == total;
}

/// The strided sides of `tasks` (plus `self`) cover [0, size) exactly once:
/// all share one stride S and one run count, S * runs == size, and their
/// [base, base + len) tile [0, S). Without allocating anything.
bool strided_sides_tile(std::vector<Runs> sides, std::vector<std::size_t> elems, std::size_t size, std::string& why) {
  std::vector<std::pair<std::size_t, std::size_t>> iv;  // [base, base+len) within one stride
  std::size_t stride = 0, runs = 0;
  for (std::size_t k = 0; k < sides.size(); ++k) {
    if (elems[k] == 0) continue;
    const Runs& r = sides[k];
    const std::size_t nr = elems[k] / r.len;
    if (stride == 0) stride = r.stride, runs = nr;
    if (nr > 1 && r.stride != stride) return why = "runs with different strides", false;
    if (nr != runs) return why = "blocks with different run counts", false;
    iv.push_back({r.base, r.base + r.len});
  }
  if (iv.empty()) return size == 0 ? true : (why = "nothing covers a non-empty buffer", false);
  if (runs > 1 && stride * runs != size) return why = "stride * runs != buffer size", false;
  std::sort(iv.begin(), iv.end());
  std::size_t at_ = 0;
  for (auto [b, e] : iv) {
    if (b != at_) return why = "blocks do not tile one stride (gap or overlap at " + std::to_string(at_) + ")", false;
    at_ = e;
  }
  const std::size_t span = runs > 1 ? stride : size;
  if (at_ != span) return why = "blocks cover " + std::to_string(at_) + " of " + std::to_string(span), false;
  return true;
}

// ---- one view of every exchange plan ----

/// What one rank's plan sends and receives, whatever its algorithm: the k-th
/// element of the message to (from) a peer is read at send_at(q, k) of the
/// rank's input (written at recv_at(q, k) of its output). The own chunk is a
/// local copy (`self`), or, in the alltoall algorithm, a message to itself.
struct Exchange {
  std::function<std::size_t(std::size_t)> send_count, recv_count;
  std::function<std::size_t(std::size_t, std::size_t)> send_at, recv_at;
  std::optional<CopyTask> self;
  std::vector<CopyTask> pack, unpack;  // buffer copies, when the plan has them
  std::size_t send_elems = 0, recv_elems = 0;
  std::size_t isz = 0, osz = 0;
};

/// Where a buffer position is read from (or written to) through pack (unpack) tasks.
std::size_t through(const std::vector<CopyTask>& tasks, bool buffer_is_dst, std::size_t pos) {
  const CopyTask* t = covering(tasks, buffer_is_dst, pos);
  ENSURE(t != nullptr);
  return buffer_is_dst ? at(t->src, pos - t->dst.base) : at(t->dst, pos - t->src.base);
}

Exchange view_of(const dsp::detail::AlltoallvPlan& P, std::size_t isz, std::size_t osz) {
  Exchange x;
  x.send_count = [&P](std::size_t q) { return P.send_counts[q]; };
  x.recv_count = [&P](std::size_t q) { return P.recv_counts[q]; };
  x.send_at = [&P](std::size_t q, std::size_t k) {
    const std::size_t pos = P.send_displs[q] + k;
    return P.send_from_input ? pos : through(P.pack, true, pos);
  };
  x.recv_at = [&P](std::size_t q, std::size_t k) {
    const std::size_t pos = P.recv_displs[q] + k;
    return P.recv_into_output ? pos : through(P.unpack, false, pos);
  };
  x.self = P.self;
  x.pack = P.pack, x.unpack = P.unpack, x.send_elems = P.send_elems, x.recv_elems = P.recv_elems;
  x.isz = isz, x.osz = osz;
  return x;
}

Exchange view_of(const dsp::detail::AlltoallPlan& P, std::size_t isz, std::size_t osz) {
  Exchange x;
  x.send_count = [&P](std::size_t) { return P.count; };
  x.recv_count = [&P](std::size_t) { return P.count; };
  x.send_at = [&P](std::size_t q, std::size_t k) {
    const std::size_t pos = q * P.count + k;
    return P.send_from_input ? pos : through(P.pack, true, pos);
  };
  x.recv_at = [&P](std::size_t q, std::size_t k) {
    const std::size_t pos = q * P.count + k;
    return P.recv_into_output ? pos : through(P.unpack, false, pos);
  };
  x.pack = P.pack, x.unpack = P.unpack, x.send_elems = P.send_elems, x.recv_elems = P.recv_elems;
  x.isz = isz, x.osz = osz;
  return x;
}

const dsp::PeerRuns* runs_for(const std::vector<dsp::PeerRuns>& v, std::size_t q) {
  for (const auto& pr : v)
    if (std::size_t(pr.peer) == q) return &pr;
  return nullptr;
}

Exchange view_of(const dsp::detail::PeerPlan& P, std::size_t isz, std::size_t osz) {
  // Peers indexed once (a linear search per element would make 4096 ranks quadratic).
  std::size_t n = 0;
  for (const auto& v : {&P.sends, &P.recvs})
    for (const auto& pr : *v) n = std::max(n, std::size_t(pr.peer) + 1);
  auto by = std::make_shared<std::vector<const dsp::PeerRuns*>>(2 * n, nullptr);
  for (const auto& pr : P.sends) (*by)[std::size_t(pr.peer)] = &pr;
  for (const auto& pr : P.recvs) (*by)[n + std::size_t(pr.peer)] = &pr;
  auto get = [by, n](bool recv, std::size_t q) { return q < n ? (*by)[(recv ? n : 0) + q] : nullptr; };
  Exchange x;
  x.send_count = [get](std::size_t q) {
    const auto* r = get(false, q);
    return r ? r->elems : 0;
  };
  x.recv_count = [get](std::size_t q) {
    const auto* r = get(true, q);
    return r ? r->elems : 0;
  };
  x.send_at = [get](std::size_t q, std::size_t k) { return at(get(false, q)->runs, k); };
  x.recv_at = [get](std::size_t q, std::size_t k) { return at(get(true, q)->runs, k); };
  x.self = P.self;
  x.isz = isz, x.osz = osz;
  return x;
}

/// What a rank's Exchange must satisfy on its own: tasks valid and in bounds,
/// buffers tiled, every input element sent once and every output element
/// received once (counted), messages inside their tensors.
void check_exchange_shape(const Exchange& X, std::size_t n, std::size_t p) {
  std::string why;
  for (const CopyTask& t : X.pack) PLAN_ENSURE_MSG(check_task(t, X.send_elems, X.isz, why), "pack: " << why);
  for (const CopyTask& t : X.unpack) PLAN_ENSURE_MSG(check_task(t, X.osz, X.recv_elems, why), "unpack: " << why);
  if (X.self) PLAN_ENSURE_MSG(check_task(*X.self, X.osz, X.isz, why), "self: " << why);
  ENSURE(tiles_contiguously(X.pack, true, X.send_elems));
  ENSURE(tiles_contiguously(X.unpack, false, X.recv_elems));
  std::size_t sent = X.self ? X.self->elems : 0, received = sent;
  for (std::size_t q = 0; q < n; ++q) {
    if (X.self && q == p) ENSURE((X.send_count(q) == 0 && X.recv_count(q) == 0));
    sent += X.send_count(q);
    received += X.recv_count(q);
  }
  ENSURE(sent == X.isz);  // every input element leaves exactly once (the own chunk included)
  ENSURE(received == X.osz);
}

/// Messages of pairwise plans: both sides cut a chunk into the same pieces,
/// each contiguous on both sides (a run of the sender and of the receiver).
void check_pieces(const dsp::PeerRuns& s, const dsp::PeerRuns& r) {
  ENSURE(s.elems == r.elems);
  ENSURE(s.piece == r.piece);
  ENSURE(s.piece > 0);
  ENSURE(s.elems % s.piece == 0);
  ENSURE(s.runs.len % s.piece == 0);
  ENSURE(r.runs.len % r.piece == 0);
}

/// Every rank's Exchange together: counts match pairwise, and each output
/// element is written exactly once with the input element of the same global
/// index. `fin` and `fout` are the ranks' input and output frames.
void simulate_exchange(const Ext& g, const std::vector<Exchange>& X, const std::vector<Frame>& fin,
                       const std::vector<Frame>& fout) {
  const std::size_t n = X.size();
  std::vector<std::vector<std::size_t>> in(n), out(n);
  std::vector<std::vector<int>> written(n);
  for (std::size_t p = 0; p < n; ++p) {
    ENSURE(X[p].isz == fin[p].size());
    ENSURE(X[p].osz == fout[p].size());
    in[p].resize(fin[p].size());
    for (std::size_t k = 0; k < in[p].size(); ++k) in[p][k] = global_of(g, fin[p], k);
    out[p].assign(fout[p].size(), ~std::size_t(0));
    written[p].assign(fout[p].size(), 0);
    check_exchange_shape(X[p], n, p);
    if (X[p].self)
      for (std::size_t e = 0; e < X[p].self->elems; ++e) {
        const std::size_t d = at(X[p].self->dst, e), s = at(X[p].self->src, e);
        out[p][d] = in[p][s];
        ++written[p][d];
      }
  }
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t q = 0; q < n; ++q) {
      ENSURE(X[p].send_count(q) == X[q].recv_count(p));  // what p sends q is what q expects from p
      for (std::size_t k = 0; k < X[p].send_count(q); ++k) {
        const std::size_t src = X[p].send_at(q, k), dst = X[q].recv_at(p, k);
        ENSURE(src < in[p].size());
        ENSURE(dst < out[q].size());
        out[q][dst] = in[p][src];
        ++written[q][dst];
      }
    }
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t k = 0; k < out[p].size(); ++k)
      if (written[p][k] != 1 || out[p][k] != global_of(g, fout[p], k))
        PLAN_FAIL_MSG("rank " << p << " output element " << k << " written " << written[p][k] << " times, holds "
                              << out[p][k] << ", wants " << global_of(g, fout[p], k));
}

/// Buffers of global indices, one per rank, for the real-kernel runs.
std::vector<std::vector<std::size_t>> indices(const Ext& g, const std::vector<Frame>& f) {
  std::vector<std::vector<std::size_t>> v(f.size());
  for (std::size_t p = 0; p < f.size(); ++p) {
    v[p].resize(f[p].size());
    for (std::size_t k = 0; k < v[p].size(); ++k) v[p][k] = global_of(g, f[p], k);
  }
  return v;
}

/// An all-to-all(v) plan run with the real copy kernel, the transfer as
/// memcpy of each (count, displacement) pair, as the backend would.
template <class Plan, class Count, class SendDispl, class RecvDispl>
void run_buffered(const Ext& g, const std::vector<Plan>& plans, const std::vector<Frame>& fin,
                  const std::vector<Frame>& fout, bool own_through_exchange, Count count, SendDispl sdispl,
                  RecvDispl rdispl) {
  Kokkos::DefaultHostExecutionSpace exec;
  const std::size_t n = plans.size(), eb = sizeof(std::size_t);
  auto in = indices(g, fin);
  std::vector<std::vector<std::size_t>> sbuf(n), rbuf(n), res(n);
  for (std::size_t p = 0; p < n; ++p) {
    sbuf[p].assign(plans[p].send_elems, 0);
    rbuf[p].assign(plans[p].recv_elems, 0);
    res[p].assign(fout[p].size(), ~std::size_t(0));
    dsp::detail::copy_runs(exec, sbuf[p].data(), in[p].data(), eb, plans[p].pack);
    if constexpr (requires { plans[p].self; })
      dsp::detail::copy_runs(exec, res[p].data(), in[p].data(), eb, std::span(&plans[p].self, 1));
  }
  exec.fence();
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t q = 0; q < n; ++q) {
      if ((q == p && !own_through_exchange) || count(plans[p], q) == 0) continue;
      const std::size_t* s = (plans[p].send_from_input ? in[p].data() : sbuf[p].data()) + sdispl(plans[p], q);
      std::size_t* r = (plans[q].recv_into_output ? res[q].data() : rbuf[q].data()) + rdispl(plans[q], p);
      std::memcpy(r, s, count(plans[p], q) * eb);
    }
  for (std::size_t p = 0; p < n; ++p) dsp::detail::copy_runs(exec, res[p].data(), rbuf[p].data(), eb, plans[p].unpack);
  exec.fence();
  for (std::size_t p = 0; p < n; ++p) ENSURE(res[p] == indices(g, {fout[p]})[0]);
}

/// A pairwise plan run with the real copy kernel for the own chunk and
/// memcpy per message piece, as exchange_runs posts them.
void run_peer(const Ext& g, const std::vector<dsp::detail::PeerPlan>& plans, const std::vector<Frame>& fin,
              const std::vector<Frame>& fout) {
  Kokkos::DefaultHostExecutionSpace exec;
  const std::size_t n = plans.size(), eb = sizeof(std::size_t);
  auto in = indices(g, fin);
  std::vector<std::vector<std::size_t>> res(n);
  for (std::size_t p = 0; p < n; ++p) {
    res[p].assign(fout[p].size(), ~std::size_t(0));
    dsp::detail::copy_runs(exec, res[p].data(), in[p].data(), eb, std::span(&plans[p].self, 1));
  }
  exec.fence();
  for (std::size_t p = 0; p < n; ++p)
    for (const auto& s : plans[p].sends) {
      const auto* r = runs_for(plans[std::size_t(s.peer)].recvs, p);
      ENSURE(r != nullptr);
      check_pieces(s, *r);
      for (std::size_t e = 0; e < s.elems; e += s.piece)
        std::memcpy(res[std::size_t(s.peer)].data() + at(r->runs, e), in[p].data() + at(s.runs, e), s.piece * eb);
    }
  for (std::size_t p = 0; p < n; ++p) ENSURE(res[p] == indices(g, {fout[p]})[0]);
}

// ---- random shapes ----

std::size_t pick_ranks(std::mt19937_64& rng, std::size_t max) {
  static constexpr std::size_t special[] = {1, 2, 3, 4, 5, 7, 8, 64, 255, 256, 1000, 4095, 4096};
  std::size_t n = rng() % 3 == 0 ? special[rng() % std::size(special)] : 1 + rng() % max;
  return std::min(n, max);
}

/// An extent in [0, max], biased toward the edges of the partition arithmetic.
std::size_t pick_extent(std::mt19937_64& rng, std::size_t n, std::size_t max) {
  std::size_t e = 0;
  switch (rng() % 8) {
    case 0: e = rng() % 3; break;                           // 0, 1, 2
    case 1: e = n - 1 + rng() % 3; break;                   // n - 1, n, n + 1
    case 2: e = n * (1 + rng() % 1000) + rng() % 3; break;  // near a multiple of n
    case 3: e = max - rng() % 2; break;                     // the top of the range
    case 4: e = rng() % (n + 1); break;                     // fewer elements than ranks
    default: e = rng() % (max + 1); break;
  }
  return std::min(e, max);
}

/// Every switch algorithm's plans for i -> j, simulated index by index, then
/// run with the real copy kernel.
void simulate_switch(const Ext& g, std::size_t i, std::size_t j, std::size_t n) {
  std::vector<Frame> fin, fout;
  for (std::size_t p = 0; p < n; ++p) {
    fin.push_back(frame(g, long(i), p, n));
    fout.push_back(frame(g, long(j), p, n));
  }
  using namespace dsp::detail;
  // alltoallv
  PLAN_CONTEXT("alltoallv switch " << i << " -> " << j << " of extents " << text(g) << " over " << n << " ranks");
  std::vector<AlltoallvPlan> v;
  for (std::size_t p = 0; p < n; ++p) v.push_back(plan_alltoallv(g, i, j, int(p), int(n)));
  {
    std::vector<Exchange> X;
    for (std::size_t p = 0; p < n; ++p) {
      const auto& P = v[p];
      ENSURE(P.bound == v[0].bound);  // equal on every rank: every rank takes the same MPI path
      ENSURE(P.bound >= std::max(fin[p].size(), fout[p].size()));
      if (product(g) > 0)  // (an empty tensor never reaches the communicator)
        for (std::size_t q = 0; q < n; ++q)
          for (std::size_t x : {P.send_counts[q], P.send_displs[q], P.recv_counts[q], P.recv_displs[q]})
            ENSURE(x <= P.bound);
      if (P.send_from_input) ENSURE(P.pack.empty());
      if (P.recv_into_output) ENSURE(P.unpack.empty());
      X.push_back(view_of(P, fin[p].size(), fout[p].size()));
    }
    simulate_exchange(g, X, fin, fout);
    run_buffered(
        g, v, fin, fout, false, [](const auto& P, std::size_t q) { return P.send_counts[q]; },
        [](const auto& P, std::size_t q) { return P.send_displs[q]; },
        [](const auto& P, std::size_t q) { return P.recv_displs[q]; });
  }
  // alltoall: only for counts divisible by the rank count (choose_switch's rule)
  if (n > 1 && g[i] % n == 0 && g[j] % n == 0) {
    PLAN_CONTEXT("alltoall switch " << i << " -> " << j << " of extents " << text(g) << " over " << n << " ranks");
    std::vector<AlltoallPlan> a;
    std::vector<Exchange> X;
    for (std::size_t p = 0; p < n; ++p) a.push_back(plan_alltoall(g, i, j, int(p), int(n)));
    for (std::size_t p = 0; p < n; ++p) {
      ENSURE(a[p].count == a[0].count);  // equal counts: one MPI_Alltoall
      X.push_back(view_of(a[p], fin[p].size(), fout[p].size()));
    }
    simulate_exchange(g, X, fin, fout);
    run_buffered(
        g, a, fin, fout, true, [](const auto& P, std::size_t) { return P.count; },
        [](const auto& P, std::size_t q) { return q * P.count; },
        [](const auto& P, std::size_t q) { return q * P.count; });
  }
  // pairwise (and datatypes: the same runs in one typed call)
  PLAN_CONTEXT("pairwise switch " << i << " -> " << j << " of extents " << text(g) << " over " << n << " ranks");
  std::vector<PeerPlan> peer;
  std::vector<Exchange> X;
  for (std::size_t p = 0; p < n; ++p) peer.push_back(plan_peer_switch(g, i, j, int(p), int(n)));
  for (std::size_t p = 0; p < n; ++p) X.push_back(view_of(peer[p], fin[p].size(), fout[p].size()));
  simulate_exchange(g, X, fin, fout);
  run_peer(g, peer, fin, fout);
  // the variant a resolved algorithm gives holds the plan of that algorithm
  for (auto alg : {dsp::SwitchAlgorithm::alltoallv, dsp::SwitchAlgorithm::pairwise, dsp::SwitchAlgorithm::datatypes}) {
    const SwitchPlan sp = plan_switch(alg, g, i, j, 0, int(n));
    ENSURE(sp.index() == (alg == dsp::SwitchAlgorithm::alltoallv  ? 2u
                          : alg == dsp::SwitchAlgorithm::pairwise ? 3u
                                                                  : 4u));
  }
}

void simulate_gather(const Ext& g, std::size_t d, std::size_t n) {
  using namespace dsp::detail;
  std::vector<Frame> fin, fout;
  for (std::size_t p = 0; p < n; ++p) {
    fin.push_back(frame(g, long(d), p, n));
    fout.push_back(frame(g, -1, p, n));
  }
  PLAN_CONTEXT("allgather of Sharded<" << d << "> of extents " << text(g) << " over " << n << " ranks");
  const auto plan = plan_allgather(g, d, int(n));
  const std::size_t total = product(g);
  const std::size_t target = plan.recv_into_output ? total : plan.recv_elems;
  std::vector<std::size_t> recv(target, ~std::size_t(0)), out(total, ~std::size_t(0));
  std::vector<int> placed(target, 0), written(total, 0);
  ENSURE(plan.counts.size() == n);
  for (std::size_t q = 0; q < n; ++q) {
    ENSURE(plan.counts[q] == fin[q].size());
    if (plan.counts[q] > 0) ENSURE(plan.displs[q] + plan.counts[q] <= target);  // a count of 0 never touches memory
    for (std::size_t k = 0; k < plan.counts[q]; ++k) {
      recv[plan.displs[q] + k] = global_of(g, fin[q], k);
      ++placed[plan.displs[q] + k];
    }
  }
  for (int c : placed) ENSURE(c == 1);
  std::string why;
  ENSURE(tiles_contiguously(plan.unpack, false, plan.recv_elems));
  if (plan.recv_into_output) {
    out = recv;
    written = placed;
  } else {
    for (const CopyTask& t : plan.unpack) {
      PLAN_ENSURE_MSG(check_task(t, total, plan.recv_elems, why), why);
      for (std::size_t e = 0; e < t.elems; ++e) {
        out[at(t.dst, e)] = recv[at(t.src, e)];
        ++written[at(t.dst, e)];
      }
    }
  }
  for (std::size_t k = 0; k < total; ++k) ENSURE((written[k] == 1 && out[k] == k));
  if (!plan.recv_into_output) {  // the real kernel
    std::vector<std::size_t> res(total, ~std::size_t(0));
    Kokkos::DefaultHostExecutionSpace exec;
    dsp::detail::copy_runs(exec, res.data(), recv.data(), sizeof(std::size_t), plan.unpack);
    exec.fence();
    ENSURE(res == out);
  }
  // the point-to-point gather: every rank's block straight into the others' runs
  PLAN_CONTEXT("peer gather of Sharded<" << d << "> of extents " << text(g) << " over " << n << " ranks");
  std::vector<PeerPlan> peer;
  std::vector<Exchange> X;
  for (std::size_t p = 0; p < n; ++p) peer.push_back(plan_peer_gather(g, d, int(p), int(n)));
  for (std::size_t p = 0; p < n; ++p) X.push_back(view_of(peer[p], fin[p].size(), fout[p].size()));
  // a gather sends its block to every peer: n - 1 copies leave, the output is the whole tensor
  for (std::size_t p = 0; p < n; ++p) {
    std::size_t received = peer[p].self.elems;
    for (std::size_t q = 0; q < n; ++q) received += X[p].recv_count(q);
    ENSURE(received == total);
    for (std::size_t q = 0; q < n; ++q) ENSURE(X[p].send_count(q) == (q == p ? 0 : fin[p].size()));
    for (std::size_t q = 0; q < n; ++q) ENSURE(X[p].send_count(q) == X[q].recv_count(p));
  }
  std::vector<std::vector<std::size_t>> res(n, std::vector<std::size_t>(total, ~std::size_t(0)));
  std::vector<std::vector<int>> count(n, std::vector<int>(total, 0));
  for (std::size_t p = 0; p < n; ++p) {
    const auto in = indices(g, {fin[p]})[0];
    for (std::size_t e = 0; e < peer[p].self.elems; ++e) {
      res[p][at(peer[p].self.dst, e)] = in[at(peer[p].self.src, e)];
      ++count[p][at(peer[p].self.dst, e)];
    }
    for (const auto& s : peer[p].sends) {
      const auto* r = runs_for(peer[std::size_t(s.peer)].recvs, p);
      ENSURE(r != nullptr);
      check_pieces(s, *r);
      for (std::size_t e = 0; e < s.elems; ++e) {
        res[std::size_t(s.peer)][at(r->runs, e)] = in[at(s.runs, e)];
        ++count[std::size_t(s.peer)][at(r->runs, e)];
      }
    }
  }
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t k = 0; k < total; ++k) ENSURE((count[p][k] == 1 && res[p][k] == k));
}

void simulate_split(const Ext& g, std::size_t d, std::size_t n) {
  PLAN_CONTEXT("split to Sharded<" << d << "> of extents " << text(g) << " over " << n << " ranks");
  const std::size_t total = product(g);
  std::vector<std::size_t> whole(total);
  for (std::size_t k = 0; k < total; ++k) whole[k] = k;
  std::size_t sum = 0;
  std::string why;
  for (std::size_t p = 0; p < n; ++p) {
    const Frame f = frame(g, long(d), p, n);
    const CopyTask t = dsp::detail::plan_split(g, d, int(p), int(n));
    ENSURE(t.elems == f.size());
    PLAN_ENSURE_MSG(check_task(t, f.size(), total, why), why);
    std::vector<std::size_t> res(f.size(), ~std::size_t(0));
    Kokkos::DefaultHostExecutionSpace exec;
    dsp::detail::copy_runs(exec, res.data(), whole.data(), sizeof(std::size_t), std::span(&t, 1));
    exec.fence();
    for (std::size_t k = 0; k < f.size(); ++k) {
      ENSURE(at(t.dst, k) == k);
      ENSURE(whole[at(t.src, k)] == global_of(g, f, k));
      ENSURE(res[k] == global_of(g, f, k));
    }
    sum += t.elems;
  }
  ENSURE(sum == total);
}

/// The scatter of a whole tensor from a root into Sharded<d> blocks.
void simulate_scatter(const Ext& g, std::size_t d, std::size_t n, std::size_t root) {
  PLAN_CONTEXT("scatter from root " << root << " to Sharded<" << d << "> of extents " << text(g) << " over " << n
                                    << " ranks");
  const std::size_t total = product(g);
  std::vector<std::size_t> whole(total);
  for (std::size_t k = 0; k < total; ++k) whole[k] = k;
  const auto R = dsp::detail::plan_scatter(g, d, int(root), int(n), int(root));
  std::string why;
  for (const CopyTask& t : R.pack) PLAN_ENSURE_MSG(check_task(t, R.send_elems, total, why), "pack: " << why);
  ENSURE(tiles_contiguously(R.pack, true, R.send_elems));
  ENSURE(R.send_elems == total);
  std::vector<std::size_t> sbuf(total, 0);
  Kokkos::DefaultHostExecutionSpace exec;
  dsp::detail::copy_runs(exec, sbuf.data(), whole.data(), sizeof(std::size_t), R.pack);
  exec.fence();
  for (std::size_t p = 0; p < n; ++p) {
    const auto P = dsp::detail::plan_scatter(g, d, int(p), int(n), int(root));
    const Frame f = frame(g, long(d), p, n);
    ENSURE(P.bound == R.bound);
    for (std::size_t q = 0; q < n; ++q) ENSURE(P.recv_counts[q] == (q == root ? f.size() : 0));
    if (p != root) ENSURE((P.pack.empty() && P.send_elems == 0));
    ENSURE(R.send_counts[p] == f.size());
    for (std::size_t k = 0; k < f.size(); ++k) ENSURE(sbuf[R.send_displs[p] + k] == global_of(g, f, k));
    if (total > 0) ENSURE(R.send_displs[p] + R.send_counts[p] <= R.bound);
  }
}

/// Switch invariants on a huge shape, without allocating: sampled ranks and
/// peers, sampled elements followed from global index to global index, for
/// the alltoallv, alltoall (when counts are equal) and pairwise plans.
void check_switch_arithmetic(std::mt19937_64& rng, const Ext& g, std::size_t i, std::size_t j, std::size_t n) {
  using namespace dsp::detail;
  PLAN_CONTEXT("switch " << i << " -> " << j << " of extents " << text(g) << " over " << n << " ranks");
  auto sample_rank = [&] {
    switch (rng() % 4) {
      case 0: return std::size_t(0);
      case 1: return n - 1;
      default: return std::size_t(rng() % n);
    }
  };
  const Frame in0 = frame(g, long(i), 0, n), out0 = frame(g, long(j), 0, n);
  std::string why;
  const bool equal = n > 1 && g[i] % n == 0 && g[j] % n == 0;
  for (int s = 0; s < 3; ++s) {
    const std::size_t p = sample_rank();
    const auto P = plan_alltoallv(g, i, j, int(p), int(n));
    const Frame fi = frame(g, long(i), p, n), fo = frame(g, long(j), p, n);
    const std::size_t isz = fi.size(), osz = fo.size();
    // the bound: equal on every rank (from rank 0's blocks, the largest), above everything
    ENSURE(P.bound == std::max(in0.size(), out0.size()));
    ENSURE(P.bound >= std::max(isz, osz));
    const Exchange X = view_of(P, isz, osz);
    check_exchange_shape(X, n, p);
    for (std::size_t q = 0; q < n; ++q) {
      // a chunk lies inside its buffer (a displacement of a count of 0 is never used)
      if (P.send_counts[q] > 0) ENSURE(P.send_displs[q] + P.send_counts[q] <= (P.send_from_input ? isz : P.send_elems));
      if (P.recv_counts[q] > 0)
        ENSURE(P.recv_displs[q] + P.recv_counts[q] <= (P.recv_into_output ? osz : P.recv_elems));
      if (product(g) > 0) ENSURE((P.send_displs[q] <= P.bound && P.recv_displs[q] <= P.bound));
    }
    // The strided sides (what is read from the input, what is written to the
    // output) tile their tensors exactly: together a bijection.
    {
      std::vector<Runs> sides{P.self.src};
      std::vector<std::size_t> el{P.self.elems};
      if (!P.send_from_input)
        for (const CopyTask& t : P.pack) sides.push_back(t.src), el.push_back(t.elems);
      else
        for (std::size_t q = 0; q < n; ++q)
          if (q != p) sides.push_back(contiguous(P.send_displs[q], P.send_counts[q])), el.push_back(P.send_counts[q]);
      PLAN_ENSURE_MSG(strided_sides_tile(sides, el, isz, why), "input side: " << why);
    }
    {
      std::vector<Runs> sides{P.self.dst};
      std::vector<std::size_t> el{P.self.elems};
      if (!P.recv_into_output)
        for (const CopyTask& t : P.unpack) sides.push_back(t.dst), el.push_back(t.elems);
      else
        for (std::size_t q = 0; q < n; ++q)
          if (q != p) sides.push_back(contiguous(P.recv_displs[q], P.recv_counts[q])), el.push_back(P.recv_counts[q]);
      PLAN_ENSURE_MSG(strided_sides_tile(sides, el, osz, why), "output side: " << why);
    }
    // self elements keep their global index
    for (int k = 0; k < 4 && P.self.elems > 0; ++k) {
      const std::size_t e = rng() % P.self.elems;
      ENSURE(global_of(g, fi, at(P.self.src, e)) == global_of(g, fo, at(P.self.dst, e)));
    }
    const auto Pp = plan_peer_switch(g, i, j, int(p), int(n));
    check_exchange_shape(view_of(Pp, isz, osz), n, p);
    std::optional<AlltoallPlan> Pa;
    if (equal) {
      Pa = plan_alltoall(g, i, j, int(p), int(n));
      check_exchange_shape(view_of(*Pa, isz, osz), n, p);
    }
    // elements sent to a peer land at the same global index there, by every algorithm
    for (int k = 0; k < 4 && n > 1; ++k) {
      std::size_t q = sample_rank();
      if (q == p) q = (p + 1) % n;
      const Frame fq = frame(g, long(j), q, n);
      const std::size_t qo = fq.size(), qi = frame(g, long(i), q, n).size();
      const auto Q = plan_alltoallv(g, i, j, int(q), int(n));
      ENSURE(Q.recv_counts[p] == P.send_counts[q]);
      if (P.send_counts[q] > 0) {
        const Exchange XQ = view_of(Q, qi, qo);
        const std::size_t e = rng() % P.send_counts[q];
        ENSURE(global_of(g, fi, X.send_at(q, e)) == global_of(g, fq, XQ.recv_at(p, e)));
      }
      const auto Qp = plan_peer_switch(g, i, j, int(q), int(n));
      const auto* s = runs_for(Pp.sends, q);
      const auto* r = runs_for(Qp.recvs, p);
      ENSURE((s == nullptr) == (r == nullptr));
      if (s) {
        check_pieces(*s, *r);
        const std::size_t e = rng() % s->elems;
        ENSURE(global_of(g, fi, at(s->runs, e)) == global_of(g, fq, at(r->runs, e)));
      }
      if (Pa && Pa->count > 0) {
        const auto Qa = plan_alltoall(g, i, j, int(q), int(n));
        const std::size_t e = rng() % Pa->count;
        ENSURE(global_of(g, fi, view_of(*Pa, isz, osz).send_at(q, e)) ==
               global_of(g, fq, view_of(Qa, qi, qo).recv_at(p, e)));
      }
    }
  }
}

#if defined(DSP_PLAN_CHECKS_PACKED)
/// A packed (batched) switch of tensors of element sizes 1, 2, 8 and 4 bytes
/// (so sections start at offsets their element size does not divide), and of
/// a float tensor on each low-precision wire: every rank's plan, the byte
/// counts matched pairwise and tiling the buffers, the bound above every
/// count, and the exact data moved byte by byte through the engine's own pack
/// and unpack code. For the wires, the element arrives as the wire's rounding.
void simulate_packed(const Ext& g, std::size_t i, std::size_t j, std::size_t n) {
  using namespace dsp::detail;
  const std::size_t R = g.size();
  auto local_of = [&](std::size_t d, std::size_t p) {
    Ext e = g;
    e[d] = Partition{g[d], n}.count(p);
    return e;
  };
  auto offset_of = [&](std::size_t d, std::size_t p) { return Partition{g[d], n}.offset(p); };
  // Global linear index of local element k of rank p's block along d.
  auto global_index = [&](std::size_t d, std::size_t p, std::size_t k) {
    const Ext e = local_of(d, p);
    std::size_t gi = 0, rem = k;
    Ext idx(R);
    for (std::size_t a = R; a-- > 0;) {
      idx[a] = rem % e[a];
      rem /= e[a];
    }
    idx[d] += offset_of(d, p);
    for (std::size_t a = 0; a < R; ++a) gi = gi * g[a] + idx[a];
    return gi;
  };
  auto byte_of = [](std::size_t gi, std::size_t t, std::size_t b) {
    return static_cast<unsigned char>((gi * 0x9E3779B97F4A7C15ull + t * 131 + b * 7) >> 29);
  };
  const Kokkos::DefaultHostExecutionSpace exec;
  for (int mode = 0; mode < 4; ++mode) {
    const dsp::Wire w = mode == 0 ? dsp::Wire::exact : dsp::Wire(mode);
    const std::vector<std::size_t> ebs =
        w == dsp::Wire::exact ? std::vector<std::size_t>{1, 2, 8, 4} : std::vector<std::size_t>{4, 4};
    PLAN_CONTEXT("packed switch " << text(g) << " " << i << "->" << j << " over " << n << " wire "
                                  << dsp::wire_name(w));
    std::vector<std::vector<std::vector<unsigned char>>> in(n), out(n);  // [rank][tensor] bytes
    std::vector<PackedPlan> plans;
    std::vector<std::vector<PackedItem>> items(n);
    for (std::size_t p = 0; p < n; ++p) {
      const std::size_t ni = product(local_of(i, p)), no = product(local_of(j, p));
      for (std::size_t t = 0; t < ebs.size(); ++t) {
        std::vector<unsigned char> x(ni * ebs[t]);
        for (std::size_t k = 0; k < ni; ++k) {
          const std::size_t gi = global_index(i, p, k);
          if (w == dsp::Wire::exact) {
            for (std::size_t b = 0; b < ebs[t]; ++b) x[k * ebs[t] + b] = byte_of(gi, t, b);
          } else {
            const float v = float(int(gi % 1999) - 999) * (t ? 0.37f : 1.1f);
            std::memcpy(&x[k * 4], &v, 4);
          }
        }
        in[p].push_back(std::move(x));
        out[p].emplace_back(no * ebs[t], 0);
      }
      for (std::size_t t = 0; t < ebs.size(); ++t)
        items[p].push_back(PackedItem{in[p][t].data(), out[p][t].data(), ebs[t]});
      plans.push_back(plan_packed(PackedArgs{items[p], g, i, j, w}, int(p), int(n), Capabilities{},
                                  dsp::SwitchAlgorithm::automatic));
    }
    // Counts match pairwise, tile the buffers (an equal-count plan: one slot of
    // equal_chunk bytes per peer, the own one unused), and stay under the bound.
    for (std::size_t p = 0; p < n && i != j; ++p) {
      const PackedPlan& P = plans[p];
      ENSURE(!P.separate());                          // no point-to-point or typed capability offered
      ENSURE(P.equal_chunk == plans[0].equal_chunk);  // every rank takes the same exchange
      const std::size_t c = P.equal_chunk;
      std::size_t at_s = 0, at_r = 0;
      for (std::size_t q = 0; q < n; ++q) {
        ENSURE(P.send_counts[q] == plans[q].recv_counts[p]);
        ENSURE(P.send_displs[q] == at_s && P.recv_displs[q] == at_r);
        if (c) ENSURE(q == p || (P.send_counts[q] == c && P.recv_counts[q] == c));
        at_s += c ? c : P.send_counts[q], at_r += c ? c : P.recv_counts[q];
        ENSURE(P.send_counts[q] <= P.bound && P.send_displs[q] <= P.bound && P.recv_displs[q] <= P.bound);
        ENSURE(P.bound == plans[0].bound);
      }
      ENSURE(P.send_counts[p] == 0 && P.recv_counts[p] == 0);
      ENSURE(at_s == P.send_bytes && at_r == P.recv_bytes);
    }
    // Pack, exchange, unpack with the engine's own section code.
    std::vector<std::vector<unsigned char>> sbuf(n), rbuf(n);
    for (std::size_t p = 0; p < n; ++p) {
      const PackedPlan& P = plans[p];
      for (std::size_t t = 0; t < ebs.size(); ++t) {
        if (w == dsp::Wire::exact)
          copy_runs(exec, out[p][t].data(), in[p][t].data(), ebs[t], std::span(&P.peer.self, 1));
        else wire_round(exec, w, dsp::ElemKind::f32, out[p][t].data(), in[p][t].data(), P.peer.self);
      }
      if (i == j) continue;
      sbuf[p].assign(P.send_bytes, 0);
      for (const auto& snd : P.peer.sends) {
        std::size_t at = P.send_displs[std::size_t(snd.peer)];
        for (std::size_t t = 0; t < ebs.size(); ++t) {
          if (w != dsp::Wire::exact)
            wire_pack(exec, w, dsp::ElemKind::f32, sbuf[p].data() + at, in[p][t].data(), snd.runs, snd.elems);
          at += wire_section_bytes(w, snd.elems, ebs[t]);
        }
        ENSURE(at == P.send_displs[std::size_t(snd.peer)] + P.send_counts[std::size_t(snd.peer)]);
      }
      if (w == dsp::Wire::exact)  // as the engine: one copy_runs per tensor over every peer's section
        for (std::size_t t = 0; t < ebs.size(); ++t) {
          std::vector<CopyTask> tasks;
          const std::size_t u = section_tasks(P.peer.sends, P.send_displs, items[p], t, w, true, tasks);
          copy_runs(exec, sbuf[p].data(), in[p][t].data(), u, tasks);
        }
    }
    for (std::size_t q = 0; q < n && i != j; ++q) {
      rbuf[q].assign(plans[q].recv_bytes, 0);
      for (std::size_t p = 0; p < n; ++p)
        if (plans[p].send_counts[q])
          std::memcpy(rbuf[q].data() + plans[q].recv_displs[p], sbuf[p].data() + plans[p].send_displs[q],
                      plans[p].send_counts[q]);
    }
    for (std::size_t q = 0; q < n && i != j; ++q) {
      const PackedPlan& Q = plans[q];
      for (const auto& rcv : Q.peer.recvs) {
        std::size_t at = Q.recv_displs[std::size_t(rcv.peer)];
        for (std::size_t t = 0; t < ebs.size(); ++t) {
          if (w != dsp::Wire::exact)
            wire_unpack(exec, w, dsp::ElemKind::f32, out[q][t].data(), rcv.runs, rbuf[q].data() + at, rcv.elems);
          at += wire_section_bytes(w, rcv.elems, ebs[t]);
        }
      }
      if (w == dsp::Wire::exact)
        for (std::size_t t = 0; t < ebs.size(); ++t) {
          std::vector<CopyTask> tasks;
          const std::size_t u = section_tasks(Q.peer.recvs, Q.recv_displs, items[q], t, w, false, tasks);
          copy_runs(exec, out[q][t].data(), rbuf[q].data(), u, tasks);
        }
    }
    // Every output element holds its global element (exact), or a rounding
    // within the wire's bound (the inputs are integers times a constant, well
    // inside every format's normal range).
    exec.fence();
    for (std::size_t q = 0; q < n; ++q) {
      const std::size_t no = product(local_of(j, q));
      for (std::size_t t = 0; t < ebs.size(); ++t)
        for (std::size_t k = 0; k < no; ++k) {
          const std::size_t gi = global_index(j, q, k);
          if (w == dsp::Wire::exact) {
            for (std::size_t b = 0; b < ebs[t]; ++b)
              PLAN_ENSURE_MSG(out[q][t][k * ebs[t] + b] == byte_of(gi, t, b),
                              "tensor " << t << " rank " << q << " element " << k << " byte " << b);
          } else {
            float v;
            std::memcpy(&v, &out[q][t][k * 4], 4);
            const double want = double(float(int(gi % 1999) - 999) * (t ? 0.37f : 1.1f));
            const double tol = w == dsp::Wire::bf16   ? std::ldexp(std::fabs(want), -8)
                               : w == dsp::Wire::fp16 ? std::ldexp(std::fabs(want), -11)
                                                      : std::ldexp(std::fabs(want), -4) + 1100.0 / 448 / 1024;
            PLAN_ENSURE_MSG(std::fabs(double(v) - want) <= tol * (1 + 1e-6),
                            "tensor " << t << " rank " << q << " element " << k << ": " << v << " for " << want);
          }
        }
    }
  }
}

#endif

/// The global linear indices of rank p's block under `side`, row-major.
std::vector<std::size_t> cut_block(const Ext& g, const dsp::detail::CutSide& side, std::size_t p) {
  dsp::detail::Piece pc[2];
  const std::size_t k = side.cut.pieces(p, pc);
  std::vector<std::size_t> along;  // the global indices of the cut dim, in the block's order
  for (std::size_t q = 0; q < k; ++q)
    for (std::size_t x = 0; x < pc[q].count; ++x) along.push_back(pc[q].offset + x);
  Ext le = g;
  le[side.dim] = along.size();
  std::size_t total = 1;
  for (auto e : le) total *= e;
  std::vector<std::size_t> out(total);
  Ext idx(g.size(), 0);
  for (std::size_t e = 0; e < total; ++e) {
    std::size_t lin = 0;
    for (std::size_t d = 0; d < g.size(); ++d) lin = lin * g[d] + (d == side.dim ? along[idx[d]] : idx[d]);
    out[e] = lin;
    for (std::size_t d = g.size(); d-- > 0;) {
      if (++idx[d] < le[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

/// The exchange from cut `a` to cut `b` of extents g over n ranks, in every
/// mode, simulated index by index: every output element written once with
/// the input element of its global index; the messages of both sides cut the
/// same way (point to point); the elements moved between ranks the fewest
/// (those whose holder changes).
void simulate_cut(const Ext& g, const dsp::detail::CutSide& a, const dsp::detail::CutSide& b, std::size_t n) {
  using namespace dsp::detail;
  std::vector<std::vector<std::size_t>> in(n), want(n);
  for (std::size_t p = 0; p < n; ++p)
    in[p] = cut_block(g, a, a.cut.kind == Cut::Kind::whole ? 0 : p), want[p] = cut_block(g, b, p);
  // The fewest: per rank, the output elements it did not hold.
  std::size_t fewest = 0;
  if (a.cut.kind != Cut::Kind::whole)
    for (std::size_t p = 0; p < n; ++p) {
      std::vector<std::size_t> mine = in[p];
      std::sort(mine.begin(), mine.end());
      for (std::size_t x : want[p]) fewest += !std::binary_search(mine.begin(), mine.end(), x);
    }
  for (const CutMode mode : {CutMode::packed, CutMode::peer, CutMode::typed, CutMode::staged_send, CutMode::staged_recv,
                             CutMode::typed_staged}) {
    PLAN_CONTEXT("cut exchange (mode " << int(mode) << ") dims " << a.dim << " -> " << b.dim << " kinds "
                                       << int(a.cut.kind) << " -> " << int(b.cut.kind) << " of extents " << text(g)
                                       << " over " << n << " ranks");
    std::vector<CutPlan> plans;
    for (std::size_t p = 0; p < n; ++p) plans.push_back(plan_cut(g, a, b, p, n, mode));
    std::vector<std::vector<std::size_t>> res(n);
    std::vector<std::vector<int>> written(n);
    auto put = [&](std::size_t q, std::size_t d, std::size_t v) {
      ENSURE(d < res[q].size());
      res[q][d] = v;
      ++written[q][d];
    };
    std::size_t moved = 0;
    for (std::size_t p = 0; p < n; ++p) {
      res[p].assign(want[p].size(), ~std::size_t(0));
      written[p].assign(want[p].size(), 0);
      moved += plans[p].moved;
      for (const CopyTask& t : plans[p].self)
        for (std::size_t e = 0; e < t.elems; ++e) {
          ENSURE(at(t.src, e) < in[p].size());
          put(p, at(t.dst, e), in[p][at(t.src, e)]);
        }
    }
    ENSURE(moved == fewest);
    if (mode == CutMode::packed) {
      std::vector<std::vector<std::size_t>> sbuf(n), rbuf(n);
      for (std::size_t p = 0; p < n; ++p) {
        sbuf[p].assign(plans[p].send_elems, ~std::size_t(0));
        rbuf[p].assign(plans[p].recv_elems, ~std::size_t(0));
        ENSURE(plans[p].bound >= plans[p].send_elems);
        ENSURE(plans[p].bound >= plans[p].recv_elems);
        for (const CopyTask& t : plans[p].pack)
          for (std::size_t e = 0; e < t.elems; ++e) sbuf[p].at(at(t.dst, e)) = in[p].at(at(t.src, e));
      }
      for (std::size_t p = 0; p < n; ++p)
        for (std::size_t q = 0; q < n; ++q) {
          if (a.cut.kind == Cut::Kind::whole) break;
          const std::size_t c = plans[p].send_counts[q];
          ENSURE(c == plans[q].recv_counts[p]);
          const auto& src = plans[p].send_from_input ? in[p] : sbuf[p];
          for (std::size_t e = 0; e < c; ++e) {
            const std::size_t s = plans[p].send_displs[q] + e, d = plans[q].recv_displs[p] + e;
            if (plans[q].recv_into_output) put(q, d, src.at(s));
            else rbuf[q].at(d) = src.at(s);
          }
        }
      for (std::size_t p = 0; p < n; ++p)
        for (const CopyTask& t : plans[p].unpack)
          for (std::size_t e = 0; e < t.elems; ++e) put(p, at(t.dst, e), rbuf[p].at(at(t.src, e)));
    } else {
      // The staged side: the sender's workspace packed first; the receiver's unpacked last. typed_staged:
      // a rank packs its sends exactly where its typed parts for some peer are more than one run.
      const bool stage_recv = mode == CutMode::staged_recv;
      std::vector<bool> stage_send(n, mode == CutMode::staged_send);
      std::vector<std::vector<std::size_t>> sbuf(n), rbuf(n);
      for (std::size_t p = 0; p < n; ++p) {
        if (mode == CutMode::typed_staged) {
          const CutPlan typed = plan_cut(g, a, b, p, n, CutMode::typed);
          stage_send[p] = !one_run_per_peer(typed.sends);
          ENSURE(stage_send[p] || (plans[p].sends.size() == typed.sends.size() && plans[p].pack.empty()));
          if (stage_send[p]) {  // one contiguous section per peer, the sections one after another
            std::size_t at = 0;
            for (const dsp::PeerRuns& r : plans[p].sends) {
              ENSURE(r.runs.base == at && r.runs.len == r.elems && r.runs.stride == r.elems);
              at += r.elems;
            }
            ENSURE(at == plans[p].send_elems);
          }
        }
        ENSURE(stage_send[p] || (plans[p].pack.empty() && plans[p].send_elems == 0));
        ENSURE(stage_recv || (plans[p].unpack.empty() && plans[p].recv_elems == 0));
        sbuf[p].assign(plans[p].send_elems, ~std::size_t(0));
        rbuf[p].assign(plans[p].recv_elems, ~std::size_t(0));
        for (const CopyTask& t : plans[p].pack)
          for (std::size_t e = 0; e < t.elems; ++e) sbuf[p].at(at(t.dst, e)) = in[p].at(at(t.src, e));
      }
      for (std::size_t p = 0; p < n; ++p)
        for (std::size_t q = 0; q < n; ++q) {
          // p's sends to q and q's receives from p, in list order: the same elements, the same messages.
          std::vector<std::size_t> from, to, cuts_s, cuts_r;
          for (const dsp::PeerRuns& r : plans[p].sends)
            if (std::size_t(r.peer) == q) {
              ENSURE(r.piece > 0 && r.elems % r.piece == 0);
              ENSURE(r.runs.len % r.piece == 0);  // a message never crosses a run (post_into sends it contiguous)
              for (std::size_t e = 0; e < r.elems; ++e)
                from.push_back(stage_send[p] ? sbuf[p].at(at(r.runs, e)) : in[p].at(at(r.runs, e)));
              for (std::size_t e = 0; e < r.elems; e += r.piece) cuts_s.push_back(r.piece);
            }
          for (const dsp::PeerRuns& r : plans[q].recvs)
            if (std::size_t(r.peer) == p) {
              ENSURE(r.piece > 0 && r.elems % r.piece == 0);
              ENSURE(r.runs.len % r.piece == 0);
              for (std::size_t e = 0; e < r.elems; ++e) to.push_back(at(r.runs, e));
              for (std::size_t e = 0; e < r.elems; e += r.piece) cuts_r.push_back(r.piece);
            }
          ENSURE(from.size() == to.size());
          if (!cut_typed(mode)) ENSURE(cuts_s == cuts_r);  // point to point: messages match
          for (std::size_t e = 0; e < from.size(); ++e) {
            if (stage_recv) rbuf[q].at(to[e]) = from[e];
            else put(q, to[e], from[e]);
          }
        }
      for (std::size_t p = 0; p < n; ++p)
        for (const CopyTask& t : plans[p].unpack)
          for (std::size_t e = 0; e < t.elems; ++e) put(p, at(t.dst, e), rbuf[p].at(at(t.src, e)));
    }
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t k = 0; k < want[p].size(); ++k)
        if (written[p][k] != 1 || res[p][k] != want[p][k])
          PLAN_FAIL_MSG("rank " << p << " output element " << k << " written " << written[p][k] << " times, holds "
                                << res[p][k] << ", wants " << want[p][k]);
  }
}

/// Block sizes for Blocks over n ranks, summing to e: uneven, zeros among
/// them, a function of (e, n) only.
std::vector<std::size_t> cut_starts(std::size_t e, std::size_t n) {
  std::vector<std::size_t> starts{0};
  std::size_t left = e;
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t take = r + 1 == n ? left : (r % 3 == 1 ? 0 : std::min(left, (e * 2 + r) / (n + 1)));
    starts.push_back(starts.back() + take);
    left -= take;
  }
  return starts;
}

/// The exchanges between every pair of cuts (Zigzag, Blocks, the Sharded
/// rule, whole) of every pair of dims of extents g over n ranks.
void check_cuts(const Ext& g, std::size_t n) {
  using dsp::detail::Cut;
  using dsp::detail::CutSide;
  std::vector<std::vector<std::size_t>> starts;
  for (std::size_t d = 0; d < g.size(); ++d) starts.push_back(cut_starts(g[d], n));
  auto side = [&](std::size_t d, Cut::Kind k) {
    return CutSide{d, Cut{k, g[d], n, k == Cut::Kind::blocks ? starts[d].data() : nullptr}};
  };
  const Cut::Kind kinds[] = {Cut::Kind::whole, Cut::Kind::even, Cut::Kind::zigzag, Cut::Kind::blocks};
  std::size_t total = 1;
  for (auto e : g) total *= e;
  if (total > 20000) return;  // simulated element by element: small shapes only
  for (std::size_t i = 0; i < g.size(); ++i)
    for (std::size_t j = 0; j < g.size(); ++j)
      for (Cut::Kind ki : kinds)
        for (Cut::Kind kj : kinds) {
          if ((ki == Cut::Kind::whole && i > 0) || (kj == Cut::Kind::whole && j > 0)) continue;  // one whole side
          if (g.size() > 3 && j != i && j != (i + 1) % g.size()) continue;  // rank 4 and 5: neighbouring dims
          simulate_cut(g, side(i, ki), side(j, kj), n);
        }
}

/// Every gather, split, scatter and switch of extents g over n ranks, simulated.
/// A Zigzag or a Blocks on a mesh axis (partition.hpp nested_block): on
/// every 2-axis mesh of n ranks, each rank's block of an extent e, cut by
/// Zigzag on one axis and Sharded or nothing on the other (either order), or
/// by Blocks (sizes from e and the axis, empty ones included) on the first
/// axis and Sharded, Zigzag or nothing on the other, is the nested rule's,
/// simulated on index lists; at most two ranges; each index held by the
/// ranks of the axes that do not cut it.
void check_nested_cuts(std::size_t e, std::size_t n) {
  using dsp::detail::kReplicated;
  const long z = dsp::detail::kZigzag, b = dsp::detail::kBlocks;  // Zigzag<0>, Blocks<0>
  for (std::size_t n0 = 1; n0 <= n; ++n0) {
    if (n % n0 != 0) continue;
    const std::vector<int> shape{int(n0), int(n / n0)};
    std::vector<std::size_t> starts{0};  // Blocks sizes: cut points spread by a hash of e and k
    for (std::size_t k = 1; k < n0; ++k) starts.push_back((k * e * 7 + 3 * k) % (e + 1));
    std::sort(starts.begin(), starts.end());
    starts.push_back(e);
    for (const std::vector<long>& codes :
         {std::vector<long>{z, 0}, std::vector<long>{0, z}, std::vector<long>{z, kReplicated},
          std::vector<long>{kReplicated, z}, std::vector<long>{b, 0}, std::vector<long>{b, z},
          std::vector<long>{b, kReplicated}, std::vector<long>{kReplicated, b}}) {
      if (codes[1] == b && n / n0 != n0) continue;  // the sizes above are axis 0's
      PLAN_CONTEXT("nested cut: extent " << e << " on mesh {" << n0 << ", " << n / n0 << "}, codes {" << codes[0]
                                         << ", " << codes[1] << "}");
      std::vector<std::size_t> seen(e, 0);
      for (std::size_t r = 0; r < n; ++r) {
        const std::vector<int> coords{int(r / (n / n0)), int(r % (n / n0))};
        std::vector<std::size_t> idx(e);
        for (std::size_t i = 0; i < e; ++i) idx[i] = i;
        for (std::size_t a = 0; a < 2; ++a) {
          if (codes[a] == kReplicated) continue;
          const std::size_t m = std::size_t(shape[a]), c = std::size_t(coords[a]);
          std::vector<std::size_t> next;
          if (codes[a] == b) {
            for (std::size_t i = starts[c]; i < starts[c + 1]; ++i) next.push_back(idx[i]);
          } else {
            const dsp::Partition p{idx.size(), codes[a] == z ? 2 * m : m};
            for (const std::size_t k :
                 codes[a] == z ? std::vector<std::size_t>{c, 2 * m - 1 - c} : std::vector<std::size_t>{c})
              for (std::size_t i = p.offset(k); i < p.offset(k) + p.count(k); ++i) next.push_back(idx[i]);
          }
          idx = next;
        }
        const auto blk = dsp::detail::nested_block(std::array<std::size_t, 1>{e}, codes, shape, coords,
                                                   dsp::detail::CutSizes{starts.data()});
        ENSURE(blk.box.count[0] == idx.size());
        for (std::size_t i = 0; i < idx.size(); ++i) {
          const bool second = blk.split.dim == 0 && i >= blk.split.first;
          ENSURE(idx[i] == (second ? blk.split.second + (i - blk.split.first) : blk.box.offset[0] + i));
          ++seen[idx[i]];
        }
      }
      const std::size_t copies = codes[0] == kReplicated ? n0 : codes[1] == kReplicated ? n / n0 : 1;
      for (const std::size_t c : seen) ENSURE(c == copies);
    }
  }
}

void check_small_shape(const Ext& g, std::size_t n) {
  check_cuts(g, n);
  for (const std::size_t e : g) check_nested_cuts(e, n);
  for (std::size_t i = 0; i < g.size(); ++i) {
    simulate_gather(g, i, n);
    simulate_split(g, i, n);
    simulate_scatter(g, i, n, n - 1);
    for (std::size_t j = 0; j < g.size(); ++j)
      if (i != j) simulate_switch(g, i, j, n);
#if defined(DSP_PLAN_CHECKS_PACKED)
    for (std::size_t j = 0; j < g.size(); ++j) simulate_packed(g, i, j, n);
#endif
  }
}

/// Halves random extents of g until its element count is at most cap.
void shrink_to(std::mt19937_64& rng, Ext& g, std::size_t cap) {
  auto fits = [&] {
    std::size_t t = 1;
    for (auto x : g) {
      if (x > 1 && t > cap / x) return false;
      t *= x ? x : 1;
    }
    return true;
  };
  while (!fits()) {
    std::size_t d = rng() % g.size();
    g[d] = (g[d] + 1) / 2;
  }
}

/// A switch i -> j and a gather of Sharded<d>, of huge extents g over n ranks.
void check_huge_shape(std::mt19937_64& rng, const Ext& g, std::size_t i, std::size_t j, std::size_t d, std::size_t n) {
  check_switch_arithmetic(rng, g, i, j, n);
  // gather: counts and displacements of every rank, from the one plan
  PLAN_CONTEXT("gather of Sharded<" << d << "> of extents " << text(g) << " over " << n << " ranks");
  const auto G = dsp::detail::plan_allgather(g, d, int(n));
  std::size_t sum = 0;
  for (std::size_t q = 0; q < n; ++q) {
    ENSURE(G.counts[q] == frame(g, long(d), q, n).size());
    if (G.recv_into_output && G.counts[q] > 0) ENSURE(G.displs[q] == sum);
    sum += G.counts[q];
  }
  ENSURE(sum == product(g));
  if (!G.recv_into_output) {
    ENSURE(G.recv_elems == sum);
    std::vector<Runs> sides;
    std::vector<std::size_t> el;
    for (const CopyTask& t : G.unpack) sides.push_back(t.dst), el.push_back(t.elems);
    std::string why;
    PLAN_ENSURE_MSG(strided_sides_tile(sides, el, sum, why), "gather output side: " << why);
  }
  // the peer gather of a sampled rank: its runs tile the output with the own block
  const std::size_t p = rng() % n;
  const auto P = dsp::detail::plan_peer_gather(g, d, int(p), int(n));
  std::vector<Runs> sides{P.self.dst};
  std::vector<std::size_t> el{P.self.elems};
  for (const auto& r : P.recvs) sides.push_back(r.runs), el.push_back(r.elems);
  for (int k = 0; k < 3 && !P.recvs.empty(); ++k) {  // sampled senders cut their messages the same way
    const auto& r = P.recvs[rng() % P.recvs.size()];
    const auto Q = dsp::detail::plan_peer_gather(g, d, r.peer, int(n));
    const auto* s = runs_for(Q.sends, p);
    ENSURE(s != nullptr);
    check_pieces(*s, r);
  }
  std::string why;
  PLAN_ENSURE_MSG(strided_sides_tile(sides, el, sum, why), "peer gather output side: " << why);
}

/// One random small case: every gather, split, scatter and switch of a random
/// shape of 1 to 5 dims over 1 to 9 ranks, simulated element by element.
void check_small_case(std::mt19937_64& rng) {
  const std::size_t rank = 1 + rng() % 5, n = 1 + rng() % 9;
  Ext g(rank);
  for (auto& x : g) x = pick_extent(rng, n, 11);
  while (product(g) > 3000) g[rng() % rank] /= 2;
  if (rng() % 5 == 0) g[rng() % rank] = 0;  // empty tensors too
  check_small_shape(g, n);
}

/// One random huge case: a switch between two random dims and a gather, with
/// extents up to 1e9, up to 4096 ranks, 2 to 8 dims, by arithmetic alone.
void check_huge_case(std::mt19937_64& rng) {
  const std::size_t cap = std::size_t(1) << 52;  // total elements: beyond any memory, far from wrapping
  const std::size_t rank = 2 + rng() % 7, n = pick_ranks(rng, 4096);
  const std::size_t i = rng() % rank;
  std::size_t j = rng() % rank;
  if (j == i) j = (i + 1) % rank;
  Ext g(rank, 1);
  g[i] = pick_extent(rng, n, 1000000000);
  g[j] = pick_extent(rng, n, 1000000000);
  for (std::size_t d = 0; d < rank; ++d)
    if (d != i && d != j) g[d] = pick_extent(rng, n, rng() % 2 ? 7 : 5000);
  shrink_to(rng, g, cap);  // keeps the plans' products from wrapping
  check_huge_shape(rng, g, i, j, rng() % rank, n);
}

}  // namespace
