// dsp: what each primitive copies and sends, as run patterns and counts.
// Pure arithmetic over global extents, dims, rank and rank count.
#pragma once

#include <dsp/kernels/copy.hpp>
#include <dsp/partition.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

namespace dsp {

/// How dynamic_switch moves data between ranks. Every rank must use the same
/// setting (dsp picks from values equal on all ranks, never from local counts).
enum class SwitchAlgorithm {
  automatic,  ///< per shape, from the global extents, element size and rank count (the default)
  alltoall,   ///< pack every chunk, the own one included, into one equal-count all-to-all, unpack:
              ///< the fewest calls, best for small tensors; needs both dims divisible by the rank
              ///< count (otherwise as alltoallv)
  alltoallv,  ///< pack only non-contiguous chunks, one all-to-all-v with the own chunk excluded
              ///< (copied input to output directly), unpack only where needed
  pairwise,   ///< point-to-point messages straight from the input's contiguous runs into the
              ///< output's, no pack or unpack, own chunk copied while they fly; backends without
              ///< point-to-point (exchange_runs) use alltoallv
  datatypes,  ///< one all-to-all-w with a strided datatype per peer: the backend (MPI) packs and
              ///< unpacks while it transfers; backends without it (exchange_runs_typed), or
              ///< tensors whose byte offsets pass INT_MAX, use alltoallv
};

namespace detail {
inline SwitchAlgorithm& switch_algorithm_flag() {
  static SwitchAlgorithm a = [] {
    const char* e = std::getenv("DSP_SWITCH_ALGORITHM");
    const std::string_view v = e ? e : "";
    if (v == "alltoall") return SwitchAlgorithm::alltoall;
    if (v == "alltoallv") return SwitchAlgorithm::alltoallv;
    if (v == "pairwise") return SwitchAlgorithm::pairwise;
    if (v == "datatypes") return SwitchAlgorithm::datatypes;
    return SwitchAlgorithm::automatic;
  }();
  return a;
}
}  // namespace detail

/// Forces the algorithm of every following dynamic_switch (automatic by
/// default; the environment variable DSP_SWITCH_ALGORITHM=alltoall, alltoallv
/// or pairwise sets the start value). Every rank must use the same setting.
inline void set_switch_algorithm(SwitchAlgorithm a) { detail::switch_algorithm_flag() = a; }
/// The algorithm setting dynamic_switch uses.
inline SwitchAlgorithm switch_algorithm() { return detail::switch_algorithm_flag(); }

}  // namespace dsp

namespace dsp::detail {

inline std::size_t product(std::span<const std::size_t> e, std::size_t begin, std::size_t end) {
  std::size_t p = 1;
  for (std::size_t d = begin; d < end; ++d) p *= e[d];
  return p;
}

/// The block of a LayoutRight tensor of extents `e` restricted along dim `d` to
/// [offset, offset + count): outer runs of count * inner elements.
struct Slab {
  std::size_t outer = 0, inner = 0, extent = 0;
  Runs runs(std::size_t offset, std::size_t count) const { return Runs{offset * inner, extent * inner, count * inner}; }
  std::size_t elems(std::size_t count) const { return outer * count * inner; }
};
inline Slab slab(std::span<const std::size_t> e, std::size_t d) {
  return Slab{product(e, 0, d), product(e, d + 1, e.size()), e[d]};
}

/// One peer's chunk as point-to-point messages: the chunk is `runs` of the
/// local tensor (`elems` elements in all), cut into consecutive messages of
/// `piece` elements, the shorter of the sender's and the receiver's
/// contiguous runs, so both sides cut it the same way.
struct PeerRuns {
  int peer = 0;
  Runs runs;
  std::size_t piece = 0, elems = 0;
};

/// A switch Sharded<i> -> Sharded<j> on rank p of n. Counts and displacements
/// are in elements; in the alltoallv and pairwise algorithms the chunk a rank
/// keeps never enters the communicator.
struct SwitchPlan {
  SwitchAlgorithm algorithm = SwitchAlgorithm::alltoallv;  // resolved: never automatic
  std::size_t equal_count = 0;  // alltoall: elements per peer
  std::vector<PeerRuns> sends, recvs;  // pairwise
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<CopyTask> pack, unpack;
  CopyTask self;
  bool send_from_input = false;  // every peer's chunk is contiguous in the input
  bool recv_into_output = false; // every peer's block lands contiguously in the output
  std::size_t send_elems = 0, recv_elems = 0;  // workspace needed (0 when direct)
  std::size_t bound = 0;  // >= every count and displacement on every rank (rank 0's blocks are the largest)
};

/// The smallest message of the pairwise algorithm over all pairs of ranks, in
/// elements (0 when no data moves). From global values only: equal on every rank.
inline std::size_t min_pairwise_piece(std::span<const std::size_t> global, std::size_t i, std::size_t j, int size) {
  const std::size_t n = static_cast<std::size_t>(size);
  const Partition pi{global[i], n}, pj{global[j], n};
  std::vector<std::size_t> e(global.begin(), global.end());
  std::size_t best = 0;
  // Counts take two values (first ranks one more); try every combination.
  for (std::size_t a : {pi.count(0), pi.count(n - 1)})
    for (std::size_t b : {pj.count(0), pj.count(n - 1)}) {
      if (a == 0 || b == 0) continue;
      e[i] = a;  // sender's input, restricted along j to b: runs of b * (product after j)
      e[j] = global[j];
      const std::size_t send_run = b * product(e, j + 1, e.size());
      e[i] = global[i];  // receiver's output, restricted along i to a: runs of a * (product after i)
      e[j] = b;
      const std::size_t recv_run = a * product(e, i + 1, e.size());
      const std::size_t piece = std::min(send_run, recv_run);
      if (piece > 0 && (best == 0 || piece < best)) best = piece;
    }
  return best;
}

/// The algorithm `automatic` resolves to, from values equal on every rank.
/// Thresholds from bench/ (see docs/benchmarks.md): up to 8 KiB per rank one
/// equal-count all-to-all (fewest calls); messages of 256 KiB or more pairwise
/// (no copies in user space, per-message overhead small); runs of 256 bytes or
/// more through the backend's datatypes (MPI packs while it transfers);
/// the rest alltoallv.
inline SwitchAlgorithm choose_switch(std::span<const std::size_t> global, std::size_t i, std::size_t j, int size,
                                     std::size_t elem_bytes, bool has_pairwise, bool has_datatypes = false) {
  SwitchAlgorithm a = switch_algorithm();
  const std::size_t n = static_cast<std::size_t>(size);
  const bool equal = global[i] % n == 0 && global[j] % n == 0;
  // Rank 0 holds the largest blocks: every byte offset of every rank fits an int when its do.
  std::vector<std::size_t> e0(global.begin(), global.end());
  e0[i] = Partition{global[i], n}.count(0);
  const std::size_t in0 = product(e0, 0, e0.size());
  e0[i] = global[i];
  e0[j] = Partition{global[j], n}.count(0);
  const bool typed_ok = has_datatypes && std::max(in0, product(e0, 0, e0.size())) * elem_bytes <= std::size_t(INT_MAX);
  if (a == SwitchAlgorithm::automatic) {
    const std::size_t per_rank = product(global, 0, global.size()) / n * elem_bytes;
    const std::size_t piece = min_pairwise_piece(global, i, j, size) * elem_bytes;
    if (size > 1 && equal && per_rank <= (std::size_t(8) << 10)) a = SwitchAlgorithm::alltoall;
    else if (piece >= (std::size_t(256) << 10)) a = SwitchAlgorithm::pairwise;
    else if (typed_ok && piece >= 256) a = SwitchAlgorithm::datatypes;
    else a = SwitchAlgorithm::alltoallv;
  }
  if (a == SwitchAlgorithm::alltoall && (!equal || size < 2)) a = SwitchAlgorithm::alltoallv;
  if (a == SwitchAlgorithm::pairwise && !has_pairwise) a = SwitchAlgorithm::alltoallv;
  if (a == SwitchAlgorithm::datatypes && !typed_ok) a = SwitchAlgorithm::alltoallv;
  return a;
}

inline SwitchPlan plan_switch(std::span<const std::size_t> global, std::size_t i, std::size_t j, int rank, int size,
                              SwitchAlgorithm algorithm = SwitchAlgorithm::alltoallv) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  const Partition pi{global[i], n}, pj{global[j], n};
  std::vector<std::size_t> in(global.begin(), global.end()), out = in;
  in[i] = pi.count(p);
  out[j] = pj.count(p);
  const Slab s = slab(in, j);   // input restricted along j: what goes to each peer
  const Slab r = slab(out, i);  // output restricted along i: where each peer's block lands

  SwitchPlan plan;
  plan.algorithm = algorithm;
  if (algorithm == SwitchAlgorithm::alltoall) {
    // Every chunk, the own one included, through one equal-count exchange.
    plan.equal_count = s.elems(pj.count(0));
    plan.send_from_input = s.outer <= 1;
    plan.recv_into_output = r.outer <= 1;
    for (std::size_t q = 0; q < n; ++q) {
      const std::size_t c = plan.equal_count, at = q * c;
      if (!plan.send_from_input) plan.pack.push_back({contiguous(at, c), s.runs(pj.offset(q), pj.count(q)), c});
      if (!plan.recv_into_output) plan.unpack.push_back({r.runs(pi.offset(q), pi.count(q)), contiguous(at, c), c});
    }
    plan.send_elems = plan.send_from_input ? 0 : n * plan.equal_count;
    plan.recv_elems = plan.recv_into_output ? 0 : n * plan.equal_count;
    return plan;
  }
  if (algorithm == SwitchAlgorithm::pairwise || algorithm == SwitchAlgorithm::datatypes) {
    // Message pieces: the shorter of the sender's and the receiver's runs.
    auto cut = [&](std::size_t a, std::size_t b) {  // pair sender a -> receiver b
      std::vector<std::size_t> e(global.begin(), global.end());
      e[i] = pi.count(a);
      const std::size_t send_run = pj.count(b) * product(e, j + 1, e.size());
      e[i] = global[i];
      e[j] = pj.count(b);
      const std::size_t recv_run = pi.count(a) * product(e, i + 1, e.size());
      return std::min(send_run, recv_run);
    };
    for (std::size_t k = 1; k < n; ++k) {
      const std::size_t to = (p + k) % n, from = (p + n - k) % n;
      const std::size_t sc = s.elems(pj.count(to)), rc = r.elems(pi.count(from));
      if (sc > 0) plan.sends.push_back({int(to), s.runs(pj.offset(to), pj.count(to)), cut(p, to), sc});
      if (rc > 0) plan.recvs.push_back({int(from), r.runs(pi.offset(from), pi.count(from)), cut(from, p), rc});
    }
    plan.self = {r.runs(pi.offset(p), pi.count(p)), s.runs(pj.offset(p), pj.count(p)), s.elems(pj.count(p))};
    return plan;
  }
  plan.send_counts.assign(n, 0);
  plan.send_displs.assign(n, 0);
  plan.recv_counts.assign(n, 0);
  plan.recv_displs.assign(n, 0);
  plan.send_from_input = s.outer <= 1;
  plan.recv_into_output = r.outer <= 1;
  for (std::size_t q = 0; q < n; ++q) {
    if (q == p) continue;
    const std::size_t sc = s.elems(pj.count(q)), rc = r.elems(pi.count(q));
    plan.send_counts[q] = sc;
    plan.recv_counts[q] = rc;
    if (plan.send_from_input) {
      plan.send_displs[q] = pj.offset(q) * s.inner;
    } else {
      plan.send_displs[q] = plan.send_elems;
      plan.pack.push_back({contiguous(plan.send_elems, sc), s.runs(pj.offset(q), pj.count(q)), sc});
      plan.send_elems += sc;
    }
    if (plan.recv_into_output) {
      plan.recv_displs[q] = pi.offset(q) * r.inner;
    } else {
      plan.recv_displs[q] = plan.recv_elems;
      plan.unpack.push_back({r.runs(pi.offset(q), pi.count(q)), contiguous(plan.recv_elems, rc), rc});
      plan.recv_elems += rc;
    }
  }
  std::vector<std::size_t> in0(global.begin(), global.end()), out0 = in0;
  in0[i] = pi.count(0);
  out0[j] = pj.count(0);
  plan.bound = std::max(product(in0, 0, in0.size()), product(out0, 0, out0.size()));
  plan.self = {r.runs(pi.offset(p), pi.count(p)), s.runs(pj.offset(p), pj.count(p)), s.elems(pj.count(p))};
  return plan;
}

/// The switch plans in use, by (extents, dims, rank, size, element size,
/// pairwise available, algorithm setting): a steady loop plans once. Plans are
/// immutable and shared, so clearing the cache never invalidates one in use.
inline std::shared_ptr<const SwitchPlan> cached_switch_plan(std::span<const std::size_t> global, std::size_t i,
                                                            std::size_t j, int rank, int size, std::size_t elem_bytes,
                                                            bool has_pairwise, bool has_datatypes = false) {
  // A fixed-size key (no allocation per call): rank, 8 extents, then the rest.
  using Key = std::array<std::size_t, 16>;
  struct Cache {
    std::mutex mutex;
    std::map<Key, std::shared_ptr<const SwitchPlan>> plans;
  };
  static Cache cache;
  if (global.size() > 8) return std::make_shared<const SwitchPlan>(
      plan_switch(global, i, j, rank, size, choose_switch(global, i, j, size, elem_bytes, has_pairwise, has_datatypes)));
  Key key{};
  key[0] = global.size();
  std::copy(global.begin(), global.end(), key.begin() + 1);
  key[9] = i;
  key[10] = j;
  key[11] = static_cast<std::size_t>(rank);
  key[12] = static_cast<std::size_t>(size);
  key[13] = elem_bytes;
  key[14] = std::size_t(has_pairwise) | std::size_t(has_datatypes) << 1;
  key[15] = static_cast<std::size_t>(switch_algorithm());
  // The last plan this thread used: a steady loop finds it without a lock.
  thread_local Key last_key{};
  thread_local std::shared_ptr<const SwitchPlan> last_plan;
  if (last_plan && key == last_key) return last_plan;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) {
      last_key = key;
      return last_plan = it->second;
    }
  }
  const SwitchAlgorithm a = choose_switch(global, i, j, size, elem_bytes, has_pairwise, has_datatypes);
  auto plan = std::make_shared<const SwitchPlan>(plan_switch(global, i, j, rank, size, a));
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.plans.size() >= 256) cache.plans.clear();  // bound memory for programs of many shapes
  cache.plans.emplace(key, plan);
  last_key = key;
  return last_plan = plan;
}

/// A gather Sharded<d> -> Replicated on rank p of n.
/// When the blocks do not land contiguously and the pieces are long enough
/// (pairwise), the blocks go point to point straight into the output's runs,
/// with no unpack; otherwise one all-gather(v) into a buffer and an unpack.
struct GatherPlan {
  std::vector<std::size_t> counts, displs;
  std::vector<CopyTask> unpack;
  bool recv_into_output = false;
  std::size_t recv_elems = 0;
  bool pairwise = false;
  std::vector<PeerRuns> sends, recvs;
  CopyTask self;
};

inline GatherPlan plan_gather(std::span<const std::size_t> global, std::size_t d, int size, int rank = 0,
                              bool pairwise = false, std::size_t elem_bytes = 1) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  const Partition pd{global[d], n};
  const Slab g = slab(global, d);
  GatherPlan plan;
  plan.recv_into_output = g.outer <= 1;
  // Global values only (equal on every rank): the shortest run any rank receives.
  const std::size_t shortest = pd.count(n - 1) * g.inner * elem_bytes;
  if (pairwise && !plan.recv_into_output && n > 1 && shortest >= (std::size_t(64) << 10) &&
      switch_algorithm() != SwitchAlgorithm::alltoall && switch_algorithm() != SwitchAlgorithm::alltoallv) {
    plan.pairwise = true;
    const std::size_t mine = g.elems(pd.count(p));
    for (std::size_t k = 1; k < n; ++k) {
      const std::size_t to = (p + k) % n, from = (p + n - k) % n, theirs = g.elems(pd.count(from));
      if (mine > 0) plan.sends.push_back({int(to), contiguous(0, mine), pd.count(p) * g.inner, mine});
      if (theirs > 0) plan.recvs.push_back({int(from), g.runs(pd.offset(from), pd.count(from)), pd.count(from) * g.inner, theirs});
    }
    plan.self = {g.runs(pd.offset(p), pd.count(p)), contiguous(0, mine), mine};
    return plan;
  }
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t c = g.elems(pd.count(q));
    plan.counts.push_back(c);
    if (plan.recv_into_output) {
      plan.displs.push_back(pd.offset(q) * g.inner);
    } else {
      plan.displs.push_back(plan.recv_elems);
      plan.unpack.push_back({g.runs(pd.offset(q), pd.count(q)), contiguous(plan.recv_elems, c), c});
      plan.recv_elems += c;
    }
  }
  return plan;
}

/// The slice rank p of n keeps when a replicated tensor becomes Sharded<d>.
inline CopyTask plan_split(std::span<const std::size_t> global, std::size_t d, int rank, int size) {
  const Partition pd{global[d], static_cast<std::size_t>(size)};
  const Slab g = slab(global, d);
  const std::size_t p = static_cast<std::size_t>(rank);
  return {contiguous(0, g.elems(pd.count(p))), g.runs(pd.offset(p), pd.count(p)), g.elems(pd.count(p))};
}

}  // namespace dsp::detail
