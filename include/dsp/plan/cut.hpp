// SPDX-License-Identifier: BSD-3-Clause
// dsp: the plan of an exchange between two placements of one communicator
// whose blocks are cut by any rule (detail::Cut: the Sharded rule, Zigzag,
// run-time Blocks, or whole), along the same dim or two dims. Each rank's
// block is one or two pieces along its dim; a peer receives exactly the
// intersections of the sender's pieces with its own, in one exchange. Pure
// arithmetic over values every rank knows, so every rank can compute every
// other rank's plan (the tests rely on it).
#pragma once

#include <dsp/partition.hpp>
#include <dsp/plan/boxes.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/settings.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace dsp::detail {

/// Rank r's pieces of one side, each as its global box and the block that
/// holds it (its virtual origin: see RBox).
struct SideBoxes {
  std::size_t n = 0;
  RBox part[2], block[2];
};
inline SideBoxes side_boxes(std::span<const std::size_t> global, const CutSide& s, std::size_t r) {
  SideBoxes b;
  Piece p[2];
  b.n = s.cut.pieces(r, p);
  RBox whole;
  for (std::size_t d = 0; d < global.size(); ++d) whole.cnt[d] = global[d];
  RBox local = whole;
  local.cnt[s.dim] = s.cut.count(r);
  std::size_t at = 0;  // local index of the piece's first element along the dim
  for (std::size_t k = 0; k < b.n; ++k) {
    b.part[k] = whole;
    b.part[k].off[s.dim] = p[k].offset;
    b.part[k].cnt[s.dim] = p[k].count;
    b.block[k] = local;
    b.block[k].off[s.dim] = p[k].offset - at;
    at += p[k].count;
  }
  return b;
}

/// The exchange, on one rank. `peer`: point-to-point messages straight
/// between the blocks' runs (several per peer, in an order both sides
/// share); else packed into one all-to-all-v. `self` copies what the rank
/// keeps.
struct CutPlan {
  bool peer = false;
  std::vector<PeerRuns> sends, recvs;
  std::vector<CopyTask> self;
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<CopyTask> pack, unpack;
  std::size_t send_elems = 0, recv_elems = 0, bound = 0;
  std::size_t moved = 0;  // elements this rank sends to others (the cost model)
};

/// The parts sender s gives receiver r (s != r), in the order both use:
/// sender's pieces outer, receiver's inner. `f(part, s_block, r_block)`.
template <class F>
void each_part(std::span<const std::size_t> global, const CutSide& in, const CutSide& out, std::size_t s, std::size_t r,
               F&& f) {
  const SideBoxes a = side_boxes(global, in, s), b = side_boxes(global, out, r);
  for (std::size_t x = 0; x < a.n; ++x)
    for (std::size_t y = 0; y < b.n; ++y) {
      const RBox part = intersect(a.part[x], b.part[y], global.size());
      if (box_elems(part, global.size()) > 0) f(part, a.block[x], b.block[y]);
    }
}

/// The smallest message of the point-to-point exchange over every pair of
/// ranks (0 when nothing moves): equal on every rank. A replicated input
/// moves nothing.
inline std::size_t min_cut_piece(std::span<const std::size_t> global, const CutSide& in, const CutSide& out,
                                 std::size_t n) {
  if (in.cut.kind == Cut::Kind::whole) return 0;
  std::size_t best = 0;
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t r = 0; r < n; ++r) {
      if (s == r) continue;
      each_part(global, in, out, s, r, [&](const RBox& part, const RBox& sb, const RBox& rb) {
        const std::size_t piece = std::min(box_run(sb, part, global.size()), box_run(rb, part, global.size()));
        if (best == 0 || piece < best) best = piece;
      });
    }
  return best;
}

/// Whether the exchange goes point to point: for `setting` pairwise (where
/// the backend can), or automatic with every message 256 KiB or more (the
/// Sharded switch's threshold: docs/benchmarks.md). Else one all-to-all-v.
inline bool cut_goes_peer(std::span<const std::size_t> global, const CutSide& in, const CutSide& out, std::size_t n,
                          std::size_t elem_bytes, bool can_peer, SwitchAlgorithm setting) {
  if (!can_peer || n < 2) return false;
  if (setting == SwitchAlgorithm::pairwise) return true;
  if (setting != SwitchAlgorithm::automatic) return false;
  return min_cut_piece(global, in, out, n) * elem_bytes >= (std::size_t(256) << 10);
}

/// Rank p's plan of the exchange from `in` to `out` over n ranks.
inline CutPlan plan_cut(std::span<const std::size_t> global, const CutSide& in, const CutSide& out, std::size_t p,
                        std::size_t n, bool peer) {
  const std::size_t R = global.size();
  const bool replicated_in = in.cut.kind == Cut::Kind::whole;
  CutPlan plan;
  plan.peer = peer;
  // What this rank keeps: from its own block (a replicated input holds all).
  {
    const SideBoxes a = side_boxes(global, in, replicated_in ? 0 : p), b = side_boxes(global, out, p);
    for (std::size_t x = 0; x < a.n; ++x)
      for (std::size_t y = 0; y < b.n; ++y) {
        const RBox part = intersect(a.part[x], b.part[y], R);
        if (box_elems(part, R) > 0) box_tasks(a.block[x], part, R, 0, false, plan.self, &b.block[y]);
      }
  }
  if (!peer) {
    plan.send_counts.assign(n, 0), plan.send_displs.assign(n, 0);
    plan.recv_counts.assign(n, 0), plan.recv_displs.assign(n, 0);
  }
  if (replicated_in || n < 2) return plan;
  std::vector<CopyTask> tasks;
  for (std::size_t k = 1; k < n; ++k) {
    const std::size_t to = (p + k) % n, from = (p + n - k) % n;
    if (!peer) plan.send_displs[to] = plan.send_elems;
    each_part(global, in, out, p, to, [&](const RBox& part, const RBox& sb, const RBox& rb) {
      const std::size_t e = box_elems(part, R);
      plan.moved += e;
      if (!peer) {
        plan.send_elems = box_tasks(sb, part, R, plan.send_elems, true, plan.pack);
        plan.send_counts[to] += e;
        return;
      }
      const std::size_t piece = std::min(box_run(sb, part, R), box_run(rb, part, R));
      tasks.clear();
      box_tasks(sb, part, R, 0, true, tasks);
      for (const CopyTask& t : tasks) plan.sends.push_back({int(to), t.src, piece, t.elems});
    });
    if (!peer) plan.recv_displs[from] = plan.recv_elems;
    each_part(global, in, out, from, p, [&](const RBox& part, const RBox& sb, const RBox& rb) {
      if (!peer) {
        plan.recv_counts[from] += box_elems(part, R);
        plan.recv_elems = box_tasks(rb, part, R, plan.recv_elems, false, plan.unpack);
        return;
      }
      const std::size_t piece = std::min(box_run(sb, part, R), box_run(rb, part, R));
      tasks.clear();
      box_tasks(rb, part, R, 0, false, tasks);
      for (const CopyTask& t : tasks) plan.recvs.push_back({int(from), t.dst, piece, t.elems});
    });
  }
  if (!peer) {
    // >= every count and displacement on every rank, and equal on all: the
    // largest block of either side.
    auto block = [&](const CutSide& s, std::size_t r) {
      return global[s.dim] == 0 ? 0 : product(global) / global[s.dim] * s.cut.count(r);
    };
    for (std::size_t r = 0; r < n; ++r) plan.bound = std::max({plan.bound, block(in, r), block(out, r)});
  }
  return plan;
}

}  // namespace dsp::detail
