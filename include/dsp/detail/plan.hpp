// dsp: what each primitive copies and sends, as run patterns and counts.
// Pure arithmetic over global extents, dims, rank and rank count.
#pragma once

#include <dsp/kernels/copy.hpp>
#include <dsp/partition.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

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

/// A switch Sharded<i> -> Sharded<j> on rank p of n. Counts and displacements
/// are in elements; the chunk a rank keeps never enters the communicator.
struct SwitchPlan {
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<CopyTask> pack, unpack;
  CopyTask self;
  bool send_from_input = false;  // every peer's chunk is contiguous in the input
  bool recv_into_output = false; // every peer's block lands contiguously in the output
  std::size_t send_elems = 0, recv_elems = 0;  // workspace needed (0 when direct)
  std::size_t bound = 0;  // >= every count and displacement on every rank (rank 0's blocks are the largest)
};

inline SwitchPlan plan_switch(std::span<const std::size_t> global, std::size_t i, std::size_t j, int rank, int size) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  const Partition pi{global[i], n}, pj{global[j], n};
  std::vector<std::size_t> in(global.begin(), global.end()), out = in;
  in[i] = pi.count(p);
  out[j] = pj.count(p);
  const Slab s = slab(in, j);   // input restricted along j: what goes to each peer
  const Slab r = slab(out, i);  // output restricted along i: where each peer's block lands

  SwitchPlan plan;
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

/// A gather Sharded<d> -> Replicated on rank p of n.
struct GatherPlan {
  std::vector<std::size_t> counts, displs;
  std::vector<CopyTask> unpack;
  bool recv_into_output = false;
  std::size_t recv_elems = 0;
};

inline GatherPlan plan_gather(std::span<const std::size_t> global, std::size_t d, int size) {
  const std::size_t n = static_cast<std::size_t>(size);
  const Partition pd{global[d], n};
  const Slab g = slab(global, d);
  GatherPlan plan;
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

/// The slice rank p of n keeps when a replicated tensor becomes Sharded<d>.
inline CopyTask plan_split(std::span<const std::size_t> global, std::size_t d, int rank, int size) {
  const Partition pd{global[d], static_cast<std::size_t>(size)};
  const Slab g = slab(global, d);
  const std::size_t p = static_cast<std::size_t>(rank);
  return {contiguous(0, g.elems(pd.count(p))), g.runs(pd.offset(p), pd.count(p)), g.elems(pd.count(p))};
}

}  // namespace dsp::detail
