// SPDX-License-Identifier: BSD-3-Clause
// dsp: how a gather Sharded<d> -> Replicated, a scatter from a root (the
// paper's dataloader, dsp::distribute) and a split move data. One plan type
// per algorithm; pure arithmetic, as plan/switch.hpp.
#pragma once

#include <dsp/partition.hpp>
#include <dsp/plan/switch.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/settings.hpp>

#include <cstddef>
#include <span>
#include <variant>
#include <vector>

namespace dsp::detail {

/// One all-gather(v), straight into the output when the blocks land
/// contiguously there, else into a buffer and an unpack.
struct AllgatherPlan {
  std::vector<std::size_t> counts, displs;
  std::vector<CopyTask> unpack;
  bool recv_into_output = false;
  std::size_t recv_elems = 0;
};

/// A gather runs an AllgatherPlan, or a PeerPlan (point to point from each
/// rank's block into the output's runs, no unpack).
using GatherPlan = std::variant<AllgatherPlan, PeerPlan>;

inline AllgatherPlan plan_allgather(std::span<const std::size_t> global, std::size_t d, int size) {
  const std::size_t n = static_cast<std::size_t>(size);
  const Partition pd{global[d], n};
  const Slab g = slab(global, d);
  AllgatherPlan plan;
  plan.recv_into_output = g.outer <= 1;
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

inline PeerPlan plan_peer_gather(std::span<const std::size_t> global, std::size_t d, int rank, int size) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  const Partition pd{global[d], n};
  const Slab g = slab(global, d);
  PeerPlan plan;
  const std::size_t mine = g.elems(pd.count(p));
  for (std::size_t k = 1; k < n; ++k) {
    const std::size_t to = (p + k) % n, from = (p + n - k) % n, theirs = g.elems(pd.count(from));
    if (mine > 0) plan.sends.push_back({int(to), contiguous(0, mine), pd.count(p) * g.inner, mine});
    if (theirs > 0)
      plan.recvs.push_back({int(from), g.runs(pd.offset(from), pd.count(from)), pd.count(from) * g.inner, theirs});
  }
  plan.self = {g.runs(pd.offset(p), pd.count(p)), contiguous(0, mine), mine};
  return plan;
}

/// Whether a gather goes point to point: from global values only (equal on
/// every rank). Only when the blocks do not land contiguously (else the
/// all-gather writes straight into the output) and the shortest run any rank
/// receives is 64 KiB or more (any length when the switch algorithm is
/// forced to pairwise); never when it is forced to alltoall or alltoallv
/// (which then means "collectives only").
inline bool gather_goes_peer(std::span<const std::size_t> global, std::size_t d, int size, std::size_t elem_bytes,
                             Capabilities caps, SwitchAlgorithm setting) {
  const std::size_t n = static_cast<std::size_t>(size);
  const Slab g = slab(global, d);
  const std::size_t shortest = Partition{global[d], n}.count(n - 1) * g.inner * elem_bytes;
  return caps.peer && g.outer > 1 && n > 1 &&
         (shortest >= (std::size_t(64) << 10) || setting == SwitchAlgorithm::pairwise) &&
         setting != SwitchAlgorithm::alltoall && setting != SwitchAlgorithm::alltoallv;
}

inline GatherPlan plan_gather(std::span<const std::size_t> global, std::size_t d, int rank, int size,
                              std::size_t elem_bytes, Capabilities caps, SwitchAlgorithm setting) {
  if (gather_goes_peer(global, d, size, elem_bytes, caps, setting)) return plan_peer_gather(global, d, rank, size);
  return plan_allgather(global, d, size);
}

/// A scatter of a whole tensor on `root` into Sharded<d> blocks: the root
/// packs each rank's block (its own included) and one all-to-all-v delivers
/// them; the others only receive.
struct ScatterPlan {
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<CopyTask> pack;  // root only: whole tensor -> send buffer
  std::size_t send_elems = 0;  // root only
  std::size_t bound = 0;       // the tensor's size: >= every count and displacement, equal everywhere
};

inline ScatterPlan plan_scatter(std::span<const std::size_t> global, std::size_t d, int rank, int size, int root) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  const Partition pd{global[d], n};
  const Slab g = slab(global, d);
  ScatterPlan plan;
  plan.send_counts.assign(n, 0);
  plan.send_displs.assign(n, 0);
  plan.recv_counts.assign(n, 0);
  plan.recv_displs.assign(n, 0);
  plan.recv_counts[static_cast<std::size_t>(root)] = g.elems(pd.count(p));
  plan.bound = product(global);
  if (rank == root)
    for (std::size_t q = 0; q < n; ++q) {
      const std::size_t c = g.elems(pd.count(q));
      plan.send_counts[q] = c;
      plan.send_displs[q] = plan.send_elems;
      plan.pack.push_back({contiguous(plan.send_elems, c), g.runs(pd.offset(q), pd.count(q)), c});
      plan.send_elems += c;
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
