// SPDX-License-Identifier: BSD-3-Clause
// dsp: the engine of dsp::reshard, a tensor moved between two groups of
// ranks of one parent communicator. Every rank of the parent describes the
// box of the source it holds (if any) and the box of the target it wants (if
// any); one all-gather of those descriptions on the parent's control channel
// gives every rank the whole picture, so every rank computes the same plan
// and reaches the same verdict. Then one all-to-all-v over the parent in
// which each rank sends exactly the intersections of its box with the
// receivers' boxes: a receiver that holds a source box copies from it
// locally; the holders of one replicated source box split each receiver's
// part among themselves.
#pragma once

#include <dsp/core/agree.hpp>
#include <dsp/core/buffers.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/engine/steps.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/partition.hpp>
#include <dsp/plan/boxes.hpp>
#include <dsp/plan/tasks.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dsp::detail {

/// Rank s's part of what receiver r gets from the holders `holders` of the
/// source box `b`: the intersection split along its first dim of at least
/// as many indices as holders (else its longest), one part per holder.
inline RBox holder_part(const RBox& inter, std::size_t rank, std::size_t k, std::size_t which) {
  std::size_t d = rank;
  for (std::size_t e = 0; e < rank; ++e)
    if (inter.cnt[e] >= k) {
      d = e;
      break;
    }
  if (d == rank) {
    d = 0;
    for (std::size_t e = 1; e < rank; ++e)
      if (inter.cnt[e] > inter.cnt[d]) d = e;
  }
  RBox p = inter;
  const Partition part{inter.cnt[d], k};
  p.off[d] = inter.off[d] + part.offset(which);
  p.cnt[d] = part.count(which);
  return p;
}

/// The whole exchange, as every rank computes it from the descriptions.
struct ReshardPlan {
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;  // elements, parent rank order
  std::vector<CopyTask> pack, unpack, local;
  std::size_t send_elems = 0, recv_elems = 0, bound = 0;
  std::vector<std::size_t> sent_by;  // elements each parent rank sends to others (the cost model)
};

/// A description's global extents as text, "[a,b,c]".
inline std::string reshard_extents_text(const ReshardDesc& d) {
  std::string t = "[";
  for (std::size_t e = 0; e < d.rank && e < kMaxRank; ++e) {
    if (e) t += ',';
    t += std::to_string(d.extents[e]);
  }
  return t + "]";
}

/// Some rank passes x and some y, and every rank that passes one agrees on
/// the global extents with the first (`first`, set). Returns why not.
inline std::string reshard_extents_error(std::span<const ReshardDesc> all, std::size_t& first, bool& mismatch) {
  const std::size_t n = all.size();
  first = n;
  bool any_x = false, any_y = false;
  for (std::size_t r = 0; r < n; ++r) {
    if ((all[r].has_x || all[r].has_y) && first == n) first = r;
    any_x = any_x || all[r].has_x, any_y = any_y || all[r].has_y;
  }
  if (!any_x || !any_y)
    return std::string("no rank passed ") + (!any_x ? "a source tensor (x)" : "a target tensor (y)") +
           ": every rank of the parent passes nullptr for it";
  const ReshardDesc& f = all[first];
  for (std::size_t r = 0; r < n; ++r) {
    const ReshardDesc& d = all[r];
    if (!d.has_x && !d.has_y) continue;
    bool same = d.rank == f.rank;
    for (std::size_t e = 0; same && e < f.rank; ++e) same = d.extents[e] == f.extents[e];
    mismatch = !same;
    if (!same)
      return "global extents disagree: rank " + std::to_string(first) + " " + reshard_extents_text(f) + ", rank " +
             std::to_string(r) + " " + reshard_extents_text(d);
  }
  return "";
}

/// Every rank of x's (src) or y's group passes it, and the parent holds the
/// whole group: a group rank that passed nullptr would miss data (x) or keep
/// stale data (y), and a parent smaller than a group cannot hold it.
inline std::string reshard_group_error(std::span<const ReshardDesc> all, bool src, bool& mismatch) {
  const std::size_t n = all.size();
  const char* name = src ? "x" : "y";
  std::size_t holders = 0, group = 0, first_holder = n;
  for (std::size_t r = 0; r < n; ++r) {
    if (!(src ? all[r].has_x : all[r].has_y)) continue;
    const std::size_t g = src ? all[r].x_group : all[r].y_group;
    if (holders == 0) group = g, first_holder = r;
    ++holders;
    if (g != group) {
      mismatch = true;
      return std::string("the ranks that passed ") + name + " disagree on its group's size: rank " +
             std::to_string(first_holder) + " " + std::to_string(group) + ", rank " + std::to_string(r) + " " +
             std::to_string(g) + " (do they pass one tensor?)";
    }
  }
  if (holders == group) return "";
  std::string why = std::string(name) + " lives on a group of " + std::to_string(group) + " ranks, but " +
                    std::to_string(holders) + " rank" + (holders == 1 ? "" : "s") + " of the parent passed it: ";
  if (n < group)
    return why + "the parent (" + std::to_string(n) + " ranks) is smaller than " + name +
           "'s group; pass a parent that contains every rank of both groups";
  return why + "every rank of " + name + "'s group must pass it (" +
         (src ? "the others hold data no rank would send)" : "a rank that passes nullptr would keep stale data)") +
         ", and the parent must contain the whole group";
}

/// One box of a rank's block (global coordinates) and `mem`, the box that
/// box_tasks takes as the block for it: the whole block's counts, its offset
/// along the split dim shifted so that the box's rows land where the block
/// holds them (a Zigzag block's second chunk follows its first).
struct BlockPiece {
  RBox box, mem;
};

/// The non-empty boxes of block `b` (one, or a Zigzag block's two chunks
/// along dim `split`: see ReshardDesc), in the order the block holds them.
inline std::size_t block_pieces(const RBox& b, std::uint64_t split, std::uint64_t first, std::uint64_t second,
                                std::size_t rank, BlockPiece (&out)[2]) {
  if (split >= rank) {
    out[0] = {b, b};
    return 1;
  }
  std::size_t k = 0;
  RBox one = b, two = b, mem2 = b;
  one.cnt[split] = first;
  two.off[split] = second, two.cnt[split] = b.cnt[split] - first;
  mem2.off[split] = second - first;  // >= the first chunk's offset: chunk 2N-1-r starts after chunk r ends
  if (first > 0) out[k++] = {one, b};
  if (two.cnt[split] > 0) out[k++] = {two, mem2};
  return k;
}
inline std::size_t x_pieces(const ReshardDesc& d, std::size_t rank, BlockPiece (&out)[2]) {
  return block_pieces(d.x, d.x_split, d.x_first, d.x_second, rank, out);
}
inline std::size_t y_pieces(const ReshardDesc& d, std::size_t rank, BlockPiece (&out)[2]) {
  return block_pieces(d.y, d.y_split, d.y_first, d.y_second, rank, out);
}

/// A distinct source box, its holders (ascending ranks) and where each holds
/// it (BlockPiece::mem).
struct SourceGroup {
  RBox box;
  std::vector<int> holders;
  std::vector<RBox> mems;
};

/// The distinct source boxes; two holders' boxes must be equal or disjoint,
/// and together cover the tensor. Returns why not.
inline std::string source_groups(std::span<const ReshardDesc> all, const ReshardDesc& f,
                                 std::vector<SourceGroup>& groups) {
  const std::size_t rank = f.rank;
  std::size_t covered = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r].has_x) continue;
    BlockPiece pieces[2];
    const std::size_t np = x_pieces(all[r], rank, pieces);
    for (std::size_t k = 0; k < np; ++k) {
      const BlockPiece& piece = pieces[k];
      bool placed = false;
      for (SourceGroup& g : groups) {
        if (same_box(g.box, piece.box, rank)) {
          g.holders.push_back(int(r));
          g.mems.push_back(piece.mem);
          placed = true;
          break;
        }
        if (box_elems(intersect(g.box, piece.box, rank), rank) != 0)
          return "the source blocks of ranks " + std::to_string(g.holders.front()) + " and " + std::to_string(r) +
                 " overlap without being equal: x's holders do not form one layout";
      }
      if (!placed) {
        groups.push_back({piece.box, {int(r)}, {piece.mem}});
        covered += box_elems(piece.box, rank);
      }
    }
  }
  std::size_t total = 1;
  for (std::size_t e = 0; e < rank; ++e) total *= f.extents[e];
  if (covered != total)
    return "the source blocks cover " + std::to_string(covered) + " of the tensor's " + std::to_string(total) +
           " elements: x must be passed by every rank of its group";
  return "";
}

/// The target side as source_groups checks the source side: two holders'
/// boxes are equal or disjoint and together they cover the tensor (where
/// ranks describe their blocks under different layouts, say Blocks sizes
/// that differ, they do not). Returns why not.
inline std::string target_error(std::span<const ReshardDesc> all, const ReshardDesc& f) {
  const std::size_t rank = f.rank;
  std::vector<std::pair<RBox, int>> distinct;  // each distinct target box and its first holder
  std::size_t covered = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r].has_y) continue;
    BlockPiece pieces[2];
    const std::size_t np = y_pieces(all[r], rank, pieces);
    for (std::size_t k = 0; k < np; ++k) {
      bool placed = false;
      for (const auto& [box, holder] : distinct) {
        if (same_box(box, pieces[k].box, rank)) {
          placed = true;
          break;
        }
        if (box_elems(intersect(box, pieces[k].box, rank), rank) != 0)
          return "the target blocks of ranks " + std::to_string(holder) + " and " + std::to_string(r) +
                 " overlap without being equal: y's holders do not form one layout (do they pass the same dst "
                 "layout, Blocks sizes included?)";
      }
      if (!placed) distinct.push_back({pieces[k].box, int(r)}), covered += box_elems(pieces[k].box, rank);
    }
  }
  std::size_t total = 1;
  for (std::size_t e = 0; e < rank; ++e) total *= f.extents[e];
  if (covered != total)
    return "the target blocks cover " + std::to_string(covered) + " of the tensor's " + std::to_string(total) +
           " elements: y's holders do not form one layout (do they pass the same dst layout, Blocks sizes included?)";
  return "";
}

/// Rank `me`'s part of the exchange. Receivers in rank order; for each, the
/// source groups in order: a holder's part goes into its send buffer in that
/// order, and into the receiver's buffer in (sender rank, group) order.
inline void plan_reshard_exchange(std::span<const ReshardDesc> all, std::size_t rank, int me,
                                  const std::vector<SourceGroup>& groups, ReshardPlan& plan) {
  const std::size_t n = all.size();
  plan.send_counts.assign(n, 0), plan.send_displs.assign(n, 0);
  plan.recv_counts.assign(n, 0), plan.recv_displs.assign(n, 0);
  plan.sent_by.assign(n, 0);
  std::vector<std::size_t> recv_total(n, 0);
  // This rank's receives: per sender, (part, where this rank's y holds it), in the senders' order.
  std::vector<std::vector<std::pair<RBox, RBox>>> from(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (!all[r].has_y) continue;
    BlockPiece ys[2];
    const std::size_t ny = y_pieces(all[r], rank, ys);
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const SourceGroup& g = groups[gi];
      for (std::size_t yk = 0; yk < ny; ++yk) {
        const RBox inter = intersect(g.box, ys[yk].box, rank);
        if (box_elems(inter, rank) == 0) continue;
        const auto held = std::find(g.holders.begin(), g.holders.end(), int(r));
        if (held != g.holders.end()) {
          if (r == std::size_t(me))
            box_tasks(g.mems[std::size_t(held - g.holders.begin())], inter, rank, 0, false, plan.local, &ys[yk].mem);
          continue;
        }
        for (std::size_t h = 0; h < g.holders.size(); ++h) {
          const RBox part = holder_part(inter, rank, g.holders.size(), h);
          const std::size_t e = box_elems(part, rank);
          if (e == 0) continue;
          const std::size_t s = std::size_t(g.holders[h]);
          plan.sent_by[s] += e;
          recv_total[r] += e;
          if (s == std::size_t(me)) {
            plan.send_counts[r] += e;
            box_tasks(g.mems[h], part, rank, plan.send_elems, true, plan.pack);
            plan.send_elems += e;
          }
          if (r == std::size_t(me)) from[s].push_back({part, ys[yk].mem});
        }
      }
    }
  }
  // Send displacements: parts were appended receiver by receiver, in rank order.
  for (std::size_t r = 0, at = 0; r < n; ++r) plan.send_displs[r] = at, at += plan.send_counts[r];
  for (std::size_t s = 0; s < n; ++s) {
    plan.recv_displs[s] = plan.recv_elems;
    for (const auto& [part, mem] : from[s]) {
      box_tasks(mem, part, rank, plan.recv_elems, false, plan.unpack);
      plan.recv_elems += box_elems(part, rank);
      plan.recv_counts[s] += box_elems(part, rank);
    }
  }
  for (std::size_t r = 0; r < n; ++r) plan.bound = std::max({plan.bound, plan.sent_by[r], recv_total[r]});
}

/// Checks the descriptions (the same on every rank, so the verdict is) and
/// plans rank `me`'s part. Returns why the call is invalid ("" when it is
/// not); `mismatch`: because ranks disagree.
inline std::string plan_reshard(std::span<const ReshardDesc> all, int me, ReshardPlan& plan, bool& mismatch) {
  mismatch = false;
  std::size_t first = 0;
  if (std::string why = reshard_extents_error(all, first, mismatch); !why.empty()) return why;
  for (const bool src : {true, false})
    if (std::string why = reshard_group_error(all, src, mismatch); !why.empty()) return why;
  std::vector<SourceGroup> groups;
  if (std::string why = source_groups(all, all[first], groups); !why.empty()) return why;
  if (std::string why = target_error(all, all[first]); !why.empty()) return mismatch = true, why;
  plan_reshard_exchange(all, all[first].rank, me, groups, plan);
  return "";
}

/// dsp::reshard on bytes: `x`/`y` the local blocks (nullptr where a rank has
/// none), `desc` this rank's description, `err` a local failure found by the
/// front end. Collective over `parent`.
template <class M>
void run_reshard(PortOn<M>& parent, Signature sig, std::string err, ReshardDesc desc, const void* x, void* y,
                 std::size_t elem_bytes) {
  ExclusiveUse use(parent, "dsp::reshard");
  agree(parent, sig, err);  // element type, call site, local failures
  const std::size_t n = std::size_t(parent.size());
  thread_local std::vector<ReshardDesc> all;
  all.assign(n, ReshardDesc{});
  parent.control_all_gather(&desc, all.data(), sizeof(ReshardDesc));
  ReshardPlan plan;
  bool mismatch = false;
  if (std::string why = plan_reshard(all, parent.rank(), plan, mismatch); !why.empty()) {
    why = "dsp::reshard: " + why + "; nothing was communicated and the tensors are unchanged";
    if (mismatch) throw MismatchError(why);
    throw InvalidArgument(why);
  }
  // The workspace: a failure here must reach every rank before anything moves.
  std::string alloc;
  Signature again = sig;
  try {
    maybe_inject_fault();
    if (n > 1) workspace<M>(parent).reserve(plan.send_elems * elem_bytes, plan.recv_elems * elem_bytes);
  } catch (const std::exception& e) {
    again.status = static_cast<std::uint32_t>(Status::alloc_failed);
    alloc = failure_text(sig.op, parent.rank(), e);
  }
  agree(parent, again, alloc);
  const auto exec = parent.exec();
  copy_runs(exec, y, x, elem_bytes, plan.local);
  if (n > 1 && plan.bound > 0) {
    const Workspace<M>& ws = workspace<M>(parent);
    copy_runs(exec, ws.send(), x, elem_bytes, plan.pack);
    fence_before_transfer(parent, exec);
    parent.all_to_all_v(ws.send(), plan.send_counts, plan.send_displs, ws.recv(), plan.recv_counts, plan.recv_displs,
                        elem_bytes, plan.bound);
    copy_runs(exec, y, ws.recv(), elem_bytes, plan.unpack);
  }
  fence_after(parent, exec);
}

}  // namespace dsp::detail
