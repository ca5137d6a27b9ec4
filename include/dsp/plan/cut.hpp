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
#include <dsp/plan/switch.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/settings.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <memory>
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

/// A peer's chunk of an exchange into `out` over n ranks, on average, in
/// elements: a block's share per peer, or (into Replicated) the whole block.
/// Equal on every rank.
inline std::size_t average_cut_chunk(std::span<const std::size_t> global, const CutSide& out, std::size_t n) {
  return product(global) / (out.cut.kind == Cut::Kind::whole ? n : n * n);
}

/// How a cut exchange moves data: point-to-point messages straight between
/// the blocks' runs (`peer`), the same runs as one typed collective in which
/// the backend packs while it transfers (`typed`: MPI_Alltoallw), packed
/// into one all-to-all-v (`packed`), or point-to-point messages of one side's
/// long runs with the other side's short runs staged through the workspace
/// (`staged_send`: the sender packs each part, the messages land straight in
/// the receiver's runs; `staged_recv`: they leave straight from the sender's
/// runs, the receiver unpacks), or the typed collective with each rank whose
/// part for some peer is several runs sending from its parts packed into the
/// workspace (`typed_staged`: a rank whose parts are one run each sends
/// straight, as `typed`). Where a Zigzag or Blocks block's part is two
/// runs per peer, all-to-all-v cannot take it straight (one displacement per
/// peer) and packed pays a copy that the Sharded switch does not.
enum class CutMode : unsigned char { packed, peer, typed, staged_send, staged_recv, typed_staged };

/// Whether a mode's plan lists messages (PeerRuns) rather than counts.
constexpr bool cut_messages(CutMode m) { return m != CutMode::packed; }
/// Whether a mode is point to point with one side staged.
constexpr bool cut_staged(CutMode m) { return m == CutMode::staged_send || m == CutMode::staged_recv; }
/// Whether a mode is the typed collective.
constexpr bool cut_typed(CutMode m) { return m == CutMode::typed || m == CutMode::typed_staged; }

/// The typed collective's sends staged (`typed_staged`) where a peer's chunk
/// is at most kStagedTypedChunkBytes on average and every run of the
/// senders' parts at least kStagedTypedRunBytes (a few long runs, packed at
/// copy speed): measured with MPI_Isend/Irecv pairs of one chunk at 2 ranks,
/// a strided receive of 128-byte runs (docs/benchmarks.md, "Small typed
/// exchanges: a sender's two runs packed"), packing a peer's two runs
/// first and sending them contiguous took 0.8-0.9x the time of one strided
/// send of both for 2 KiB runs, for 4 KiB runs about its time in the VM's
/// fast regime and 0.83-0.87x in the slow one; two 8 KiB runs tied; with two
/// 16 KiB runs packing lost (1.05-1.14x the strided send).
inline constexpr std::size_t kStagedTypedChunkBytes = std::size_t(16) << 10;
inline constexpr std::size_t kStagedTypedRunBytes = std::size_t(2) << 10;

/// The exchange, on one rank. `peer`, `typed` and the staged modes: the runs
/// of each peer's parts (several entries per peer, in an order both sides
/// share; a staged side's entries in the workspace, with `pack` or `unpack`
/// tasks and send_elems or recv_elems its size); `packed`:
/// counts, displacements and the copy tasks into and out of the workspace.
/// `self` copies what the rank keeps.
struct CutPlan {
  CutMode mode = CutMode::packed;
  std::vector<PeerRuns> sends, recvs;
  std::vector<CopyTask> self;
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<CopyTask> pack, unpack;
  std::size_t send_elems = 0, recv_elems = 0, bound = 0;
  bool send_from_input = false, recv_into_output = false;  // packed: no copy where each peer's part is one run
  // packed: each peer's pack and unpack tasks, [first[q], end[q]) (a batch rebases them into its sections)
  std::vector<std::size_t> pack_first, pack_end, unpack_first, unpack_end;
  std::size_t moved = 0;  // elements this rank sends to others (the cost model)
  // A direct packed plan whose average chunk is in the eager-pieces window (plan/packed.hpp): the same
  // exchange with its copies kept (direct = false), which the engine sends in eager pieces; else null.
  std::shared_ptr<const CutPlan> copies_kept;
};

/// A packed plan's side straight from (or into) the block: when every
/// peer's part is one contiguous run of it (its tasks [first[q], end[q])
/// contiguous and one after the other), the displacements point into the
/// block and the copies go.
/// `send`: the tasks' block side is their source.
inline bool direct_side(std::vector<CopyTask>& tasks, const std::vector<std::size_t>& first,
                        const std::vector<std::size_t>& end, const std::vector<std::size_t>& counts,
                        std::vector<std::size_t>& displs, bool send) {
  for (std::size_t q = 0; q < counts.size(); ++q) {
    if (counts[q] == 0) continue;
    std::size_t next = send ? tasks[first[q]].src.base : tasks[first[q]].dst.base;  // where the run must go on
    for (std::size_t t = first[q]; t < end[q]; ++t) {
      const Runs& r = send ? tasks[t].src : tasks[t].dst;
      if ((r.len < tasks[t].elems && r.stride != r.len) || r.base != next) return false;
      next += tasks[t].elems;
    }
  }
  for (std::size_t q = 0; q < counts.size(); ++q)
    if (counts[q] != 0) displs[q] = send ? tasks[first[q]].src.base : tasks[first[q]].dst.base;
  tasks.clear();
  return true;
}

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

/// The shortest runs of the exchange's parts over every pair of ranks, in
/// the senders' blocks and in the receivers' (0 when nothing moves): equal
/// on every rank. A replicated input moves nothing.
struct CutRuns {
  std::size_t send = 0, recv = 0;
  std::size_t piece() const { return std::min(send, recv); }  // the point-to-point exchange's smallest message
};
inline CutRuns min_cut_runs(std::span<const std::size_t> global, const CutSide& in, const CutSide& out, std::size_t n) {
  CutRuns best;
  if (in.cut.kind == Cut::Kind::whole) return best;
  auto least = [](std::size_t& b, std::size_t v) { b = b == 0 ? v : std::min(b, v); };
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t r = 0; r < n; ++r) {
      if (s == r) continue;
      each_part(global, in, out, s, r, [&](const RBox& part, const RBox& sb, const RBox& rb) {
        least(best.send, box_run(sb, part, global.size()));
        least(best.recv, box_run(rb, part, global.size()));
      });
    }
  return best;
}

/// Rank r's block under side s, in elements.
inline std::size_t cut_block_elems(std::span<const std::size_t> global, const CutSide& s, std::size_t r) {
  return global[s.dim] == 0 ? 0 : product(global) / global[s.dim] * s.cut.count(r);
}

/// The largest block of either side, in elements: equal on every rank.
inline std::size_t largest_cut_block(std::span<const std::size_t> global, const CutSide& in, const CutSide& out,
                                     std::size_t n) {
  std::size_t most = 0;
  for (std::size_t r = 0; r < n; ++r)
    most = std::max({most, cut_block_elems(global, in, r), cut_block_elems(global, out, r)});
  return most;
}

/// How the exchange runs, from values equal on every rank, as the Sharded
/// switch chooses (choose_switch): under `automatic`, point to point when
/// every message is kPairwiseBytes or more, the typed collective when every
/// byte offset fits an int and the runs and a peer's chunk (on average) pass
/// typed_by_rule (`alone`: one tensor's own exchange), point to point with
/// one side staged where the other side's runs are all kPairwiseBytes or
/// more, else packed (the typed collective's sends staged where its chunks
/// are small and its senders' runs long: kStagedTypedChunkBytes); a
/// forced setting where the backend can (pairwise: peer, datatypes: typed),
/// else packed.
inline CutMode cut_mode(std::span<const std::size_t> global, const CutSide& in, const CutSide& out, std::size_t n,
                        std::size_t elem_bytes, Capabilities caps, SwitchAlgorithm setting, bool alone = true) {
  if (n < 2 || in.cut.kind == Cut::Kind::whole) return CutMode::packed;
  const bool typed_ok = caps.typed && largest_cut_block(global, in, out, n) * elem_bytes <= std::size_t(INT_MAX);
  if (setting == SwitchAlgorithm::pairwise) return caps.peer ? CutMode::peer : CutMode::packed;
  if (setting == SwitchAlgorithm::datatypes) return typed_ok ? CutMode::typed : CutMode::packed;
  if (setting != SwitchAlgorithm::automatic) return CutMode::packed;
  const CutRuns runs = min_cut_runs(global, in, out, n);
  const std::size_t piece = runs.piece() * elem_bytes;
  if (caps.peer && piece >= kPairwiseBytes) return CutMode::peer;
  const std::size_t chunk = average_cut_chunk(global, out, n) * elem_bytes;
  // Up to kSmallSwitchBytes per rank packed, as the switch takes its one all-to-all there (and a
  // chunk past the eager limit then goes in eager pieces: engine/recut.hpp).
  if (product(global) / n * elem_bytes <= kSmallSwitchBytes) return CutMode::packed;
  // typed_staged: one tensor's own exchange (a batch's decision to move tensor by tensor reads its
  // members as typed: each then stages on its own), not into Replicated (each peer's part is the
  // whole block: n - 1 copies of it).
  if (typed_ok && typed_by_rule(piece, chunk, alone))
    return alone && out.cut.kind != Cut::Kind::whole && chunk <= kStagedTypedChunkBytes &&
                   runs.send * elem_bytes >= kStagedTypedRunBytes
               ? CutMode::typed_staged
               : CutMode::typed;
  // One side's runs all long enough to go point to point, the other's not: that side staged.
  if (caps.peer && runs.recv * elem_bytes >= kPairwiseBytes) return CutMode::staged_send;
  if (caps.peer && runs.send * elem_bytes >= kPairwiseBytes) return CutMode::staged_recv;
  return CutMode::packed;
}

/// Appends a peer's run pattern to an exchange's list, merged into the last
/// entry where it continues that entry's pattern (same peer, message size
/// and run length, the next run at the pattern's stride, or two single runs
/// that set one): a Zigzag block's two chunks often lie end to end, and one
/// pattern is one strided datatype where two were a struct. The elements and
/// their order, so the messages, are unchanged.
inline void append_runs(std::vector<PeerRuns>& list, const PeerRuns& e) {
  if (!list.empty()) {
    PeerRuns& b = list.back();
    const std::size_t len = b.runs.len;
    if (b.peer == e.peer && b.piece == e.piece && len > 0 && e.runs.len == len && b.elems % len == 0 &&
        e.elems % len == 0 && e.runs.base >= b.runs.base + len) {
      const std::size_t kb = b.elems / len, ke = e.elems / len;
      // The stride the merged pattern must have: b's (several runs), else e's (several runs), else the gap.
      const std::size_t stride = kb > 1 ? b.runs.stride : ke > 1 ? e.runs.stride : e.runs.base - b.runs.base;
      if (stride >= len && e.runs.base == b.runs.base + kb * stride && (ke == 1 || e.runs.stride == stride)) {
        b.runs.stride = stride;
        b.elems += e.elems;
        return;
      }
    }
  }
  list.push_back(e);
}

/// Whether each peer's entries in a run list (a peer's entries consecutive)
/// are one contiguous run.
inline bool one_run_per_peer(std::span<const PeerRuns> list) {
  for (std::size_t k = 0; k < list.size(); ++k) {
    const PeerRuns& e = list[k];
    if (e.elems > e.runs.len && e.runs.stride != e.runs.len) return false;
    if (k > 0 && list[k - 1].peer == e.peer && list[k - 1].runs.base + list[k - 1].elems != e.runs.base) return false;
  }
  return true;
}

/// Rank p's plan of the exchange from `in` to `out` over n ranks.
/// `direct`: a packed plan may send from the input and receive into the
/// output (one tensor); a batch's plans keep their copies.
/// The staged modes: each part one entry per side, its messages the direct
/// side's runs; the staged side's entry a contiguous section of the workspace
/// (send_elems, recv_elems), filled by `pack` or emptied by `unpack`.
/// `typed_staged`: the typed lists, except on a rank whose part for some peer
/// is more than one run: its sends each peer's parts packed into one
/// contiguous section of the workspace.
inline CutPlan plan_cut(std::span<const std::size_t> global, const CutSide& in, const CutSide& out, std::size_t p,
                        std::size_t n, CutMode mode, bool direct = true) {
  const std::size_t R = global.size();
  const bool replicated_in = in.cut.kind == Cut::Kind::whole;
  const bool peer = cut_messages(mode);  // run lists (point to point or typed)
  const bool stage_send = mode == CutMode::staged_send, stage_recv = mode == CutMode::staged_recv;
  const bool typed_staged = mode == CutMode::typed_staged;
  std::vector<PeerRuns> packed_sends;  // typed_staged: each peer's section of the workspace
  std::vector<CopyTask> packed_tasks;
  std::size_t packed_elems = 0;
  CutPlan plan;
  plan.mode = mode;
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
  std::vector<std::size_t> send_first(n, 0), send_end(n, 0), recv_first(n, 0), recv_end(n, 0);  // tasks per peer
  // A part's messages: the shorter run of the two blocks, or (staged) the direct side's run.
  auto piece_of = [&](const RBox& part, const RBox& sb, const RBox& rb) {
    const std::size_t s = box_run(sb, part, R), r = box_run(rb, part, R);
    return stage_send ? r : stage_recv ? s : std::min(s, r);
  };
  for (std::size_t k = 1; k < n; ++k) {
    const std::size_t to = (p + k) % n, from = (p + n - k) % n;
    if (!peer) plan.send_displs[to] = plan.send_elems, send_first[to] = plan.pack.size();
    const std::size_t section = packed_elems;
    each_part(global, in, out, p, to, [&](const RBox& part, const RBox& sb, const RBox& rb) {
      const std::size_t e = box_elems(part, R);
      plan.moved += e;
      if (!peer) {
        plan.send_elems = box_tasks(sb, part, R, plan.send_elems, true, plan.pack);
        plan.send_counts[to] += e;
        return;
      }
      const std::size_t piece = piece_of(part, sb, rb);
      if (stage_send) {
        plan.sends.push_back({int(to), contiguous(plan.send_elems, e), piece, e});
        plan.send_elems = box_tasks(sb, part, R, plan.send_elems, true, plan.pack);
        return;
      }
      if (typed_staged) packed_elems = box_tasks(sb, part, R, packed_elems, true, packed_tasks);
      tasks.clear();
      box_tasks(sb, part, R, 0, true, tasks);
      for (const CopyTask& t : tasks) append_runs(plan.sends, {int(to), t.src, piece, t.elems});
    });
    if (const std::size_t e = packed_elems - section; e > 0)
      packed_sends.push_back({int(to), contiguous(section, e), e, e});
    if (!peer) {
      send_end[to] = plan.pack.size();
      plan.recv_displs[from] = plan.recv_elems, recv_first[from] = plan.unpack.size();
    }
    each_part(global, in, out, from, p, [&](const RBox& part, const RBox& sb, const RBox& rb) {
      if (!peer) {
        plan.recv_counts[from] += box_elems(part, R);
        plan.recv_elems = box_tasks(rb, part, R, plan.recv_elems, false, plan.unpack);
        return;
      }
      const std::size_t piece = piece_of(part, sb, rb);
      if (stage_recv) {
        plan.recvs.push_back({int(from), contiguous(plan.recv_elems, box_elems(part, R)), piece, box_elems(part, R)});
        plan.recv_elems = box_tasks(rb, part, R, plan.recv_elems, false, plan.unpack);
        return;
      }
      tasks.clear();
      box_tasks(rb, part, R, 0, false, tasks);
      for (const CopyTask& t : tasks) append_runs(plan.recvs, {int(from), t.dst, piece, t.elems});
    });
    if (!peer) recv_end[from] = plan.unpack.size();
  }
  if (typed_staged && !one_run_per_peer(plan.sends)) {
    plan.sends = std::move(packed_sends);
    plan.pack = std::move(packed_tasks);
    plan.send_elems = packed_elems;
  }
  if (!peer) {
    // >= every count and displacement on every rank, and equal on all: a sender's buffer holds its block
    // once per receiver that wants all of it (n - 1 of them for a whole output), a receiver's at most
    // its block.
    const std::size_t copies = out.cut.kind == Cut::Kind::whole ? n - 1 : 1;
    for (std::size_t r = 0; r < n; ++r)
      plan.bound = std::max({plan.bound, cut_block_elems(global, in, r) * copies, cut_block_elems(global, out, r)});
    plan.pack_first = send_first, plan.pack_end = send_end, plan.unpack_first = recv_first, plan.unpack_end = recv_end;
    if (!direct) return plan;
    plan.send_from_input = direct_side(plan.pack, send_first, send_end, plan.send_counts, plan.send_displs, true);
    if (plan.send_from_input) plan.send_elems = 0;
    plan.recv_into_output = direct_side(plan.unpack, recv_first, recv_end, plan.recv_counts, plan.recv_displs, false);
    if (plan.recv_into_output) plan.recv_elems = 0;
  }
  return plan;
}

}  // namespace dsp::detail
