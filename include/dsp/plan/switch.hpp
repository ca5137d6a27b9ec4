// SPDX-License-Identifier: BSD-3-Clause
// dsp: how a switch Sharded<i> -> Sharded<j> moves data, one plan type per
// algorithm. Pure arithmetic over the global extents, the two dims, the rank
// and the rank count: any rank can compute any other rank's plan, which the
// property tests rely on. Counts and displacements are in elements.
#pragma once

#include <dsp/partition.hpp>
#include <dsp/plan/cache.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/settings.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <variant>
#include <vector>

namespace dsp::detail {

/// The communication path a rank resolved for a collective.
enum class Path : std::uint32_t {
  none = 0,
  identity,   // a local copy
  alltoall,   // equal-count all-to-all
  alltoallv,  // all-to-all-v
  pairwise,   // point-to-point run exchange
  datatypes,  // typed run exchange (all-to-all-w)
  allgather,  // all-gather(v)
  peer_gather,
  broadcast,
  scatter,
  per_tensor,  // a batch: each tensor its own pairwise or datatypes exchange
  sections,    // a batch: packed chunks as point-to-point messages (packed_message_bytes)
};

inline const char* path_name(std::uint32_t p) {
  switch (static_cast<Path>(p)) {
    case Path::none: return "none";
    case Path::identity: return "identity copy";
    case Path::alltoall: return "alltoall";
    case Path::alltoallv: return "alltoallv";
    case Path::pairwise: return "pairwise";
    case Path::datatypes: return "datatypes";
    case Path::allgather: return "allgather";
    case Path::peer_gather: return "point-to-point gather";
    case Path::broadcast: return "broadcast";
    case Path::scatter: return "scatter";
    case Path::per_tensor: return "per-tensor pairwise and datatypes";
    case Path::sections: return "packed point-to-point messages";
  }
  return "unknown";
}

/// i == j: one local copy of the block.
struct IdentityPlan {
  CopyTask copy;
};

/// Every chunk, the own one included, through one equal-count all-to-all.
struct AlltoallPlan {
  std::size_t count = 0;                       // elements per peer
  bool send_from_input = false;                // the chunks are contiguous in the input: no pack
  bool recv_into_output = false;               // the blocks land contiguously in the output: no unpack
  std::vector<CopyTask> pack, unpack;          // into / out of the workspace, when needed
  std::size_t send_elems = 0, recv_elems = 0;  // workspace needed (0 when direct)
};

/// One all-to-all-v; the own chunk never enters the communicator.
struct AlltoallvPlan {
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<CopyTask> pack, unpack;
  CopyTask self;
  bool send_from_input = false, recv_into_output = false;
  std::size_t send_elems = 0, recv_elems = 0;
  std::size_t bound = 0;  // >= every count and displacement on every rank (rank 0's blocks are the largest)
};

/// Point-to-point messages straight from the input's runs into the output's
/// runs, the own chunk copied locally (the pairwise switch, the peer gather).
struct PeerPlan {
  std::vector<PeerRuns> sends, recvs;
  CopyTask self;
};

/// The exchange of a PeerPlan as one typed collective (MPI_Alltoallw): the
/// backend packs while it transfers.
struct TypedPlan : PeerPlan {};

using SwitchPlan = std::variant<IdentityPlan, AlltoallPlan, AlltoallvPlan, PeerPlan, TypedPlan>;

/// What the backend offers beyond the Communicator concept.
struct Capabilities {
  bool peer = false;   // PeerExchange
  bool typed = false;  // TypedExchange
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

/// The automatic rule's thresholds (choose_switch, cut_mode), from bench/
/// (docs/benchmarks.md, "The automatic rule, re-measured"): messages of at
/// least kPairwiseBytes go point to point; runs of at least kTypedRunBytes
/// go through the backend's datatypes while a peer's chunk is under
/// kTypedChunkBytes (Open MPI's MPI_Alltoallw copies a larger strided chunk
/// through its shared-memory fragments at about 2 GB/s, where a packed
/// chunk goes by single copy: 1.2 to 4x slower in both of the VM's regimes).
inline constexpr std::size_t kPairwiseBytes = std::size_t(128) << 10;
/// Up to this many bytes per rank, a switch of evenly divided dims is one
/// equal-count all-to-all (fewest calls).
inline constexpr std::size_t kSmallSwitchBytes = std::size_t(8) << 10;
inline constexpr std::size_t kTypedRunBytes = 256;
inline constexpr std::size_t kTypedChunkBytes = std::size_t(512) << 10;
/// One tensor's small exchange (a peer's chunk at most kTypedSmallChunkBytes)
/// takes the datatypes from runs of kTypedSmallRunBytes: measured
/// (docs/benchmarks.md, "Small exchanges: datatypes and eager pieces"), with
/// 128-byte runs in chunks of 4 to 64 KiB MPI_Alltoallw took 0.54-0.90 of
/// the packed all-to-all-v's time at 2 and 4 ranks, in every run of both VM
/// regimes (it packs into eager fragments while it sends); with 32- and
/// 64-byte runs it won or lost by turns. A batch keeps the rule above for its decision to
/// move tensor by tensor (its packed exchange saves a collective per tensor).
inline constexpr std::size_t kTypedSmallRunBytes = 128;
inline constexpr std::size_t kTypedSmallChunkBytes = std::size_t(64) << 10;

/// Whether the automatic rule takes the backend's datatypes for runs of
/// `piece` bytes in chunks of `chunk` bytes (a peer's, on average); `alone`:
/// one tensor's own exchange (else a batch member's, for packed_separately).
constexpr bool typed_by_rule(std::size_t piece, std::size_t chunk, bool alone) {
  return (piece >= kTypedRunBytes && chunk < kTypedChunkBytes) ||
         (alone && piece >= kTypedSmallRunBytes && chunk <= kTypedSmallChunkBytes);
}

/// The algorithm a switch runs, from values equal on every rank and the
/// `setting` (dsp::switch_algorithm()); never `automatic`, and always one the
/// backend offers. Automatic: up to 8 KiB per rank one equal-count
/// all-to-all (fewest calls); messages of kPairwiseBytes or more pairwise (no
/// copies in user space, per-message overhead small); runs of kTypedRunBytes
/// or more in chunks under kTypedChunkBytes, or (`alone`: one tensor's own
/// switch) of kTypedSmallRunBytes in chunks up to kTypedSmallChunkBytes,
/// through the backend's datatypes (MPI packs while it transfers); the rest
/// alltoallv. A forced algorithm
/// that cannot run for this shape or backend resolves to alltoallv.
inline SwitchAlgorithm choose_switch(std::span<const std::size_t> global, std::size_t i, std::size_t j, int size,
                                     std::size_t elem_bytes, Capabilities caps, SwitchAlgorithm setting,
                                     bool alone = true) {
  SwitchAlgorithm a = setting;
  const std::size_t n = static_cast<std::size_t>(size);
  const bool equal = global[i] % n == 0 && global[j] % n == 0;
  // Rank 0 holds the largest blocks: every byte offset of every rank fits an int when its do.
  std::vector<std::size_t> e0(global.begin(), global.end());
  e0[i] = Partition{global[i], n}.count(0);
  const std::size_t in0 = product(e0);
  e0[i] = global[i];
  e0[j] = Partition{global[j], n}.count(0);
  const bool typed_ok = caps.typed && std::max(in0, product(e0)) * elem_bytes <= std::size_t(INT_MAX);
  if (a == SwitchAlgorithm::automatic) {
    const std::size_t per_rank = product(global) / n * elem_bytes;
    const std::size_t piece = min_pairwise_piece(global, i, j, size) * elem_bytes;
    if (size > 1 && equal && per_rank <= kSmallSwitchBytes) a = SwitchAlgorithm::alltoall;
    else if (caps.peer && piece >= kPairwiseBytes) a = SwitchAlgorithm::pairwise;
    else if (typed_ok && typed_by_rule(piece, per_rank / n, alone)) a = SwitchAlgorithm::datatypes;
    else a = SwitchAlgorithm::alltoallv;
  }
  if (a == SwitchAlgorithm::alltoall && (!equal || size < 2)) a = SwitchAlgorithm::alltoallv;
  if (a == SwitchAlgorithm::pairwise && !caps.peer) a = SwitchAlgorithm::alltoallv;
  if (a == SwitchAlgorithm::datatypes && !typed_ok) a = SwitchAlgorithm::alltoallv;
  return a;
}

/// The frame of a switch on rank p: input restricted along j (what goes to
/// each peer) and output restricted along i (where each peer's block lands).
struct SwitchFrame {
  Partition pi, pj;
  Slab s, r;
};
inline SwitchFrame switch_frame(std::span<const std::size_t> global, std::size_t i, std::size_t j, std::size_t p,
                                std::size_t n) {
  const Partition pi{global[i], n}, pj{global[j], n};
  std::vector<std::size_t> in(global.begin(), global.end()), out = in;
  in[i] = pi.count(p);
  out[j] = pj.count(p);
  return {pi, pj, slab(in, j), slab(out, i)};
}

inline IdentityPlan plan_identity(std::span<const std::size_t> global, std::size_t i, int rank, int size) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  const std::size_t total = global[i] == 0 ? 0 : product(global) / global[i] * Partition{global[i], n}.count(p);
  return {CopyTask{contiguous(0, total), contiguous(0, total), total}};
}

inline AlltoallPlan plan_alltoall(std::span<const std::size_t> global, std::size_t i, std::size_t j, int rank,
                                  int size) {
  const std::size_t n = static_cast<std::size_t>(size);
  const SwitchFrame f = switch_frame(global, i, j, static_cast<std::size_t>(rank), n);
  AlltoallPlan plan;
  plan.count = f.s.elems(f.pj.count(0));
  plan.send_from_input = f.s.outer <= 1;
  plan.recv_into_output = f.r.outer <= 1;
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t c = plan.count, at = q * c;
    if (!plan.send_from_input) plan.pack.push_back({contiguous(at, c), f.s.runs(f.pj.offset(q), f.pj.count(q)), c});
    if (!plan.recv_into_output) plan.unpack.push_back({f.r.runs(f.pi.offset(q), f.pi.count(q)), contiguous(at, c), c});
  }
  plan.send_elems = plan.send_from_input ? 0 : n * plan.count;
  plan.recv_elems = plan.recv_into_output ? 0 : n * plan.count;
  return plan;
}

inline AlltoallvPlan plan_alltoallv(std::span<const std::size_t> global, std::size_t i, std::size_t j, int rank,
                                    int size) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  const SwitchFrame f = switch_frame(global, i, j, p, n);
  AlltoallvPlan plan;
  plan.send_counts.assign(n, 0);
  plan.send_displs.assign(n, 0);
  plan.recv_counts.assign(n, 0);
  plan.recv_displs.assign(n, 0);
  plan.send_from_input = f.s.outer <= 1;
  plan.recv_into_output = f.r.outer <= 1;
  for (std::size_t q = 0; q < n; ++q) {
    if (q == p) continue;
    const std::size_t sc = f.s.elems(f.pj.count(q)), rc = f.r.elems(f.pi.count(q));
    plan.send_counts[q] = sc;
    plan.recv_counts[q] = rc;
    if (plan.send_from_input) {
      plan.send_displs[q] = f.pj.offset(q) * f.s.inner;
    } else {
      plan.send_displs[q] = plan.send_elems;
      plan.pack.push_back({contiguous(plan.send_elems, sc), f.s.runs(f.pj.offset(q), f.pj.count(q)), sc});
      plan.send_elems += sc;
    }
    if (plan.recv_into_output) {
      plan.recv_displs[q] = f.pi.offset(q) * f.r.inner;
    } else {
      plan.recv_displs[q] = plan.recv_elems;
      plan.unpack.push_back({f.r.runs(f.pi.offset(q), f.pi.count(q)), contiguous(plan.recv_elems, rc), rc});
      plan.recv_elems += rc;
    }
  }
  std::vector<std::size_t> in0(global.begin(), global.end()), out0 = in0;
  in0[i] = f.pi.count(0);
  out0[j] = f.pj.count(0);
  plan.bound = std::max(product(in0), product(out0));
  plan.self = {f.r.runs(f.pi.offset(p), f.pi.count(p)), f.s.runs(f.pj.offset(p), f.pj.count(p)),
               f.s.elems(f.pj.count(p))};
  return plan;
}

/// The pairwise plan (also the datatypes plan: the same runs, one typed call).
inline PeerPlan plan_peer_switch(std::span<const std::size_t> global, std::size_t i, std::size_t j, int rank,
                                 int size) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  const SwitchFrame f = switch_frame(global, i, j, p, n);
  // Message pieces: the shorter of the sender's and the receiver's runs.
  auto cut = [&](std::size_t a, std::size_t b) {  // pair sender a -> receiver b
    std::vector<std::size_t> e(global.begin(), global.end());
    e[i] = f.pi.count(a);
    const std::size_t send_run = f.pj.count(b) * product(e, j + 1, e.size());
    e[i] = global[i];
    e[j] = f.pj.count(b);
    const std::size_t recv_run = f.pi.count(a) * product(e, i + 1, e.size());
    return std::min(send_run, recv_run);
  };
  PeerPlan plan;
  for (std::size_t k = 1; k < n; ++k) {
    const std::size_t to = (p + k) % n, from = (p + n - k) % n;
    const std::size_t sc = f.s.elems(f.pj.count(to)), rc = f.r.elems(f.pi.count(from));
    if (sc > 0) plan.sends.push_back({int(to), f.s.runs(f.pj.offset(to), f.pj.count(to)), cut(p, to), sc});
    if (rc > 0) plan.recvs.push_back({int(from), f.r.runs(f.pi.offset(from), f.pi.count(from)), cut(from, p), rc});
  }
  plan.self = {f.r.runs(f.pi.offset(p), f.pi.count(p)), f.s.runs(f.pj.offset(p), f.pj.count(p)),
               f.s.elems(f.pj.count(p))};
  return plan;
}

/// The path a switch plan takes, for the agreement check.
inline Path path_of(const SwitchPlan& p) {
  switch (p.index()) {
    case 0: return Path::identity;
    case 1: return Path::alltoall;
    case 2: return Path::alltoallv;
    case 3: return Path::pairwise;
    default: return Path::datatypes;
  }
}

/// The plan of a resolved algorithm (IdentityPlan when i == j).
inline SwitchPlan plan_switch(SwitchAlgorithm a, std::span<const std::size_t> global, std::size_t i, std::size_t j,
                              int rank, int size) {
  if (i == j) return plan_identity(global, i, rank, size);
  switch (a) {
    case SwitchAlgorithm::alltoall: return plan_alltoall(global, i, j, rank, size);
    case SwitchAlgorithm::pairwise: return plan_peer_switch(global, i, j, rank, size);
    case SwitchAlgorithm::datatypes: return TypedPlan{plan_peer_switch(global, i, j, rank, size)};
    default: return plan_alltoallv(global, i, j, rank, size);
  }
}

/// The switch plans in use, by (extents, dims, rank, size, element size,
/// capabilities, setting); see cached_plan.
inline std::shared_ptr<const SwitchPlan> cached_switch_plan(std::span<const std::size_t> global, std::size_t i,
                                                            std::size_t j, int rank, int size, std::size_t elem_bytes,
                                                            Capabilities caps, SwitchAlgorithm setting) {
  auto make = [&] {
    const SwitchAlgorithm a =
        i == j ? SwitchAlgorithm::alltoallv : choose_switch(global, i, j, size, elem_bytes, caps, setting);
    return std::make_shared<const SwitchPlan>(plan_switch(a, global, i, j, rank, size));
  };
  if (global.size() > kMaxRank) return make();
  // A fixed-size key (no allocation per call): rank, kMaxRank extents, then the rest.
  using Key = std::array<std::size_t, kMaxRank + 8>;
  Key key{};
  key[0] = global.size();
  std::copy(global.begin(), global.end(), key.begin() + 1);
  std::size_t* k = key.data() + kMaxRank + 1;
  k[0] = i;
  k[1] = j;
  k[2] = static_cast<std::size_t>(rank);
  k[3] = static_cast<std::size_t>(size);
  k[4] = elem_bytes;
  k[5] = std::size_t(caps.peer) | std::size_t(caps.typed) << 1;
  k[6] = static_cast<std::size_t>(setting);
  return cached_plan<SwitchPlan>(key, make);
}

}  // namespace dsp::detail
