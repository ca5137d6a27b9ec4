// Checks of the partition and of the switch / gather / split plans, shared by
// the randomized property test (test_plan_property.cpp) and the libFuzzer
// target (fuzz/fuzz_plan.cpp). The includer defines DSP_PLAN_FAIL(message),
// which must not return (doctest's FAIL, or print and abort).
#pragma once

#include <dsp/detail/plan.hpp>
#include <dsp/partition.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
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
using dsp::detail::CopyTask;
using dsp::detail::Runs;
using Ext = std::vector<std::size_t>;

/// What is being checked, for the failure message.
inline std::string& plan_context() {
  static std::string c;
  return c;
}
#define PLAN_CONTEXT(...)                \
  do {                                   \
    std::ostringstream plan_o_;          \
    plan_o_ << __VA_ARGS__;              \
    plan_context() = plan_o_.str();      \
  } while (0)
#define PLAN_FAIL_MSG(...)                                  \
  do {                                                      \
    std::ostringstream plan_o_;                             \
    plan_o_ << plan_context() << ": " << __VA_ARGS__;       \
    DSP_PLAN_FAIL(plan_o_.str());                           \
  } while (0)
// Costs only a branch until it fails (doctest's REQUIRE costs more than the
// arithmetic under test in the hot loops).
#define ENSURE(...) \
  do {              \
    if (!(__VA_ARGS__)) PLAN_FAIL_MSG("ENSURE( " #__VA_ARGS__ " ) failed"); \
  } while (0)
#define PLAN_ENSURE_MSG(cond, ...) \
  do {                             \
    if (!(cond)) PLAN_FAIL_MSG(__VA_ARGS__); \
  } while (0)

namespace {

std::string text(const Ext& e) {
  std::string t = "[";
  for (std::size_t d = 0; d < e.size(); ++d) t += (d ? ", " : "") + std::to_string(e[d]);
  return t + "]";
}

std::size_t product(const Ext& e) {
  std::size_t p = 1;
  for (auto x : e) p *= x;
  return p;
}

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
std::size_t at(const Runs& r, std::size_t e) { return r.base + (e / r.len) * r.stride + e % r.len; }
/// One past the last element of a run pattern covering n elements.
std::size_t end_of(const Runs& r, std::size_t n) { return n == 0 ? 0 : at(r, n - 1) + 1; }

/// What copy_runs requires of a task, and that it stays inside both buffers.
bool check_task(const CopyTask& t, std::size_t dst_size, std::size_t src_size, std::string& why) {
  if (t.elems == 0) return true;
  if (t.dst.len == 0 || t.src.len == 0) return why = "an empty run in a non-empty task", false;
  const std::size_t lo = std::min(t.dst.len, t.src.len), hi = std::max(t.dst.len, t.src.len);
  if (hi % lo != 0) return why = "run lengths " + std::to_string(t.dst.len) + " and " + std::to_string(t.src.len) + " do not divide", false;
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

/// Where element k of the message from rank p (plan P) to rank q (plan Q) is
/// read in p's input and written in q's output: through the pack and unpack
/// tasks, unless the plan sends from the input or receives into the output.
std::pair<std::size_t, std::size_t> trace_message(const dsp::detail::SwitchPlan& P,
                                                  const dsp::detail::SwitchPlan& Q, std::size_t p,
                                                  std::size_t q, std::size_t k) {
  const std::size_t sp = P.send_displs[q] + k, rp = Q.recv_displs[p] + k;
  std::size_t src = sp, dst = rp;
  if (!P.send_from_input) {
    const CopyTask* t = covering(P.pack, true, sp);
    ENSURE(t != nullptr);
    src = at(t->src, sp - t->dst.base);
  }
  if (!Q.recv_into_output) {
    const CopyTask* t = covering(Q.unpack, false, rp);
    ENSURE(t != nullptr);
    dst = at(t->dst, rp - t->src.base);
  }
  return {src, dst};
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
    case 0: e = rng() % 3; break;                        // 0, 1, 2
    case 1: e = n - 1 + rng() % 3; break;                // n - 1, n, n + 1
    case 2: e = n * (1 + rng() % 1000) + rng() % 3; break;  // near a multiple of n
    case 3: e = max - rng() % 2; break;                  // the top of the range
    case 4: e = rng() % (n + 1); break;                  // fewer elements than ranks
    default: e = rng() % (max + 1); break;
  }
  return std::min(e, max);
}

/// The whole exchange of a switch i -> j, simulated index by index, then
/// repeated with the real copy kernel.
void simulate_switch(const Ext& g, std::size_t i, std::size_t j, std::size_t n) {
  PLAN_CONTEXT("switch " << i << " -> " << j << " of extents " << text(g) << " over " << n << " ranks");
  std::vector<dsp::detail::SwitchPlan> plans;
  std::vector<Frame> fin, fout;
  for (std::size_t p = 0; p < n; ++p) {
    plans.push_back(dsp::detail::plan_switch(g, i, j, int(p), int(n)));
    fin.push_back(frame(g, long(i), p, n));
    fout.push_back(frame(g, long(j), p, n));
  }
  std::vector<std::vector<std::size_t>> out(n), in(n);
  std::vector<std::vector<int>> written(n);
  for (std::size_t p = 0; p < n; ++p) {
    in[p].resize(fin[p].size());
    for (std::size_t k = 0; k < in[p].size(); ++k) in[p][k] = global_of(g, fin[p], k);
    out[p].assign(fout[p].size(), ~std::size_t(0));
    written[p].assign(fout[p].size(), 0);
  }
  std::string why;
  for (std::size_t p = 0; p < n; ++p) {
    const auto& P = plans[p];
    ENSURE(P.bound == plans[0].bound);
    const std::size_t isz = fin[p].size(), osz = fout[p].size();
    ENSURE(P.bound >= std::max(isz, osz));
    for (std::size_t q = 0; q < n; ++q) {
      // (an empty tensor never reaches the communicator: its displacements do not matter)
      if (product(g) > 0) {
        ENSURE(P.send_counts[q] <= P.bound);
        ENSURE(P.send_displs[q] <= P.bound);
        ENSURE(P.recv_counts[q] <= P.bound);
        ENSURE(P.recv_displs[q] <= P.bound);
      }
      ENSURE(P.send_counts[q] == plans[q].recv_counts[p]);  // what p sends q is what q expects from p
      if (q == p) ENSURE(P.send_counts[q] == 0);
    }
    for (const CopyTask& t : P.pack) PLAN_ENSURE_MSG(check_task(t, P.send_elems, isz, why), "pack: " << why);
    for (const CopyTask& t : P.unpack) PLAN_ENSURE_MSG(check_task(t, osz, P.recv_elems, why), "unpack: " << why);
    PLAN_ENSURE_MSG(check_task(P.self, osz, isz, why), "self: " << why);
    ENSURE(tiles_contiguously(P.pack, true, P.send_elems));
    ENSURE(tiles_contiguously(P.unpack, false, P.recv_elems));
    if (P.send_from_input) ENSURE(P.pack.empty());
    if (P.recv_into_output) ENSURE(P.unpack.empty());
    // the self chunk
    for (std::size_t e = 0; e < P.self.elems; ++e) {
      const std::size_t d = at(P.self.dst, e), s = at(P.self.src, e);
      out[p][d] = in[p][s];
      ++written[p][d];
    }
  }
  // p's send position -> input index; q's receive position -> output index
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t q = 0; q < n; ++q) {
      if (q == p) continue;
      const auto &P = plans[p], &Q = plans[q];
      for (std::size_t k = 0; k < P.send_counts[q]; ++k) {
        const auto [src, dst] = trace_message(P, Q, p, q, k);
        ENSURE(src < in[p].size());
        ENSURE(dst < out[q].size());
        out[q][dst] = in[p][src];
        ++written[q][dst];
      }
    }
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t k = 0; k < out[p].size(); ++k) {
      if (written[p][k] != 1 || out[p][k] != global_of(g, fout[p], k))
        PLAN_FAIL_MSG("rank " << p << " output element " << k << " written " << written[p][k] << " times, holds "
                     << out[p][k] << ", wants " << global_of(g, fout[p], k));
    }

  // The same exchange through the real copy kernel.
  Kokkos::DefaultHostExecutionSpace exec;
  const std::size_t eb = sizeof(std::size_t);
  std::vector<std::vector<std::size_t>> sbuf(n), rbuf(n), res(n);
  for (std::size_t p = 0; p < n; ++p) {
    sbuf[p].assign(plans[p].send_elems, 0);
    rbuf[p].assign(plans[p].recv_elems, 0);
    res[p].assign(fout[p].size(), ~std::size_t(0));
    dsp::detail::copy_runs(exec, sbuf[p].data(), in[p].data(), eb, plans[p].pack);
    dsp::detail::copy_runs(exec, res[p].data(), in[p].data(), eb, std::span(&plans[p].self, 1));
  }
  exec.fence();
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t q = 0; q < n; ++q) {
      if (q == p || plans[p].send_counts[q] == 0) continue;
      const std::size_t* s = (plans[p].send_from_input ? in[p].data() : sbuf[p].data()) + plans[p].send_displs[q];
      std::size_t* r = (plans[q].recv_into_output ? res[q].data() : rbuf[q].data()) + plans[q].recv_displs[p];
      std::memcpy(r, s, plans[p].send_counts[q] * eb);
    }
  for (std::size_t p = 0; p < n; ++p) dsp::detail::copy_runs(exec, res[p].data(), rbuf[p].data(), eb, plans[p].unpack);
  exec.fence();
  for (std::size_t p = 0; p < n; ++p) ENSURE(res[p] == out[p]);
}

void simulate_gather(const Ext& g, std::size_t d, std::size_t n) {
  PLAN_CONTEXT("gather of Sharded<" << d << "> of extents " << text(g) << " over " << n << " ranks");
  const auto plan = dsp::detail::plan_gather(g, d, int(n));
  const std::size_t total = product(g);
  const std::size_t target = plan.recv_into_output ? total : plan.recv_elems;
  std::vector<std::size_t> recv(target, ~std::size_t(0)), out(total, ~std::size_t(0));
  std::vector<int> placed(target, 0), written(total, 0);
  ENSURE(plan.counts.size() == n);
  for (std::size_t q = 0; q < n; ++q) {
    const Frame f = frame(g, long(d), q, n);
    ENSURE(plan.counts[q] == f.size());
    if (plan.counts[q] > 0) ENSURE(plan.displs[q] + plan.counts[q] <= target);  // a count of 0 never touches memory
    for (std::size_t k = 0; k < plan.counts[q]; ++k) {
      recv[plan.displs[q] + k] = global_of(g, f, k);
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
  // the real kernel
  std::vector<std::size_t> res(total, ~std::size_t(0));
  Kokkos::DefaultHostExecutionSpace exec;
  if (!plan.recv_into_output) {
    dsp::detail::copy_runs(exec, res.data(), recv.data(), sizeof(std::size_t), plan.unpack);
    exec.fence();
    ENSURE(res == out);
  }
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

/// Switch invariants on a huge shape, without allocating: sampled ranks and
/// peers, sampled elements followed from global index to global index.
void check_switch_arithmetic(std::mt19937_64& rng, const Ext& g, std::size_t i, std::size_t j, std::size_t n) {
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
  for (int s = 0; s < 3; ++s) {
    const std::size_t p = sample_rank();
    const auto P = dsp::detail::plan_switch(g, i, j, int(p), int(n));
    const Frame fi = frame(g, long(i), p, n), fo = frame(g, long(j), p, n);
    const std::size_t isz = fi.size(), osz = fo.size();
    // the bound: equal on every rank (from rank 0's blocks, the largest), above everything
    ENSURE(P.bound == std::max(in0.size(), out0.size()));
    ENSURE(P.bound >= std::max(isz, osz));
    std::size_t sent = P.self.elems, received = P.self.elems;
    for (std::size_t q = 0; q < n; ++q) {
      ENSURE(P.send_counts[q] <= P.bound);
      ENSURE(P.recv_counts[q] <= P.bound);
      // a chunk lies inside its buffer (a displacement of a count of 0 is never used)
      if (P.send_counts[q] > 0) ENSURE(P.send_displs[q] + P.send_counts[q] <= (P.send_from_input ? isz : P.send_elems));
      if (P.recv_counts[q] > 0) ENSURE(P.recv_displs[q] + P.recv_counts[q] <= (P.recv_into_output ? osz : P.recv_elems));
      if (product(g) > 0) ENSURE((P.send_displs[q] <= P.bound && P.recv_displs[q] <= P.bound));
      sent += P.send_counts[q];
      received += P.recv_counts[q];
    }
    ENSURE(sent == isz);  // every input element leaves exactly once (self included)
    ENSURE(received == osz);
    for (const CopyTask& t : P.pack) PLAN_ENSURE_MSG(check_task(t, P.send_elems, isz, why), "pack: " << why);
    for (const CopyTask& t : P.unpack) PLAN_ENSURE_MSG(check_task(t, osz, P.recv_elems, why), "unpack: " << why);
    PLAN_ENSURE_MSG(check_task(P.self, osz, isz, why), "self: " << why);
    ENSURE(tiles_contiguously(P.pack, true, P.send_elems));
    ENSURE(tiles_contiguously(P.unpack, false, P.recv_elems));
    // The strided sides (what is read from the input, what is written to the
    // output) tile their tensors exactly: together a bijection.
    if (!P.send_from_input) {
      std::vector<Runs> sides{P.self.src};
      std::vector<std::size_t> el{P.self.elems};
      for (const CopyTask& t : P.pack) sides.push_back(t.src), el.push_back(t.elems);
      PLAN_ENSURE_MSG(strided_sides_tile(sides, el, isz, why), "input side: " << why);
    } else {  // chunks sent straight from the input, plus the self chunk, tile it
      std::vector<Runs> sides{P.self.src};
      std::vector<std::size_t> el{P.self.elems};
      for (std::size_t q = 0; q < n; ++q)
        if (q != p) sides.push_back(dsp::detail::contiguous(P.send_displs[q], P.send_counts[q])), el.push_back(P.send_counts[q]);
      PLAN_ENSURE_MSG(strided_sides_tile(sides, el, isz, why), "input side: " << why);
    }
    if (!P.recv_into_output) {
      std::vector<Runs> sides{P.self.dst};
      std::vector<std::size_t> el{P.self.elems};
      for (const CopyTask& t : P.unpack) sides.push_back(t.dst), el.push_back(t.elems);
      PLAN_ENSURE_MSG(strided_sides_tile(sides, el, osz, why), "output side: " << why);
    } else {
      std::vector<Runs> sides{P.self.dst};
      std::vector<std::size_t> el{P.self.elems};
      for (std::size_t q = 0; q < n; ++q)
        if (q != p) sides.push_back(dsp::detail::contiguous(P.recv_displs[q], P.recv_counts[q])), el.push_back(P.recv_counts[q]);
      PLAN_ENSURE_MSG(strided_sides_tile(sides, el, osz, why), "output side: " << why);
    }
    // self elements keep their global index
    for (int k = 0; k < 4 && P.self.elems > 0; ++k) {
      const std::size_t e = rng() % P.self.elems;
      ENSURE(global_of(g, fi, at(P.self.src, e)) == global_of(g, fo, at(P.self.dst, e)));
    }
    // elements sent to a peer land at the same global index there
    for (int k = 0; k < 4 && n > 1; ++k) {
      std::size_t q = sample_rank();
      if (q == p) q = (p + 1) % n;
      if (P.send_counts[q] == 0) continue;
      const auto Q = dsp::detail::plan_switch(g, i, j, int(q), int(n));
      ENSURE(Q.recv_counts[p] == P.send_counts[q]);
      const auto [src, dst] = trace_message(P, Q, p, q, rng() % P.send_counts[q]);
      ENSURE(global_of(g, fi, src) == global_of(g, frame(g, long(j), q, n), dst));
    }
  }
}


/// Every gather, split and switch of extents g over n ranks, simulated.
void check_small_shape(const Ext& g, std::size_t n) {
  for (std::size_t i = 0; i < g.size(); ++i) {
    simulate_gather(g, i, n);
    simulate_split(g, i, n);
    for (std::size_t j = 0; j < g.size(); ++j)
      if (i != j) simulate_switch(g, i, j, n);
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
  const auto G = dsp::detail::plan_gather(g, d, int(n));
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
}

/// One random small case: every gather, split and switch of a random shape
/// of 1 to 5 dims over 1 to 9 ranks, simulated element by element.
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
