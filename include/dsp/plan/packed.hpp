// SPDX-License-Identifier: BSD-3-Clause
// dsp: plans of packed collectives. Several tensors of one layout and global
// extents (a batch: Q, K and V) move with one exchange whose chunk for each
// peer carries every tensor's section in turn; and a float tensor's chunks
// can travel in a low-precision wire type (wire.hpp). Counts and
// displacements are in bytes. Pure arithmetic, like plan/switch.hpp.
//
// Switch chunk for peer q:  [ tensor 0's section | tensor 1's section | ... ]
// A section is the tensor's elements for q in the element order of the 1-D
// switch (plan_peer_switch), exact or in the wire type. A gather's chunk is
// the same for every peer: each tensor's whole block in turn.
//
// When every tensor is large enough that its own collective would move
// without copies in user space, packing would add two copies per byte: then
// the plan keeps one plan per tensor instead (`own`), and the engine posts
// their exchanges together. Packed switch chunks of one element size go
// through the backend's point-to-point exchange where it has one, cut into
// the fewest equal messages under the transport's eager limit (4 KiB for
// Open MPI's shared memory) but never more messages than sections: a small
// batch avoids the rendezvous round trip one message of its whole chunk
// would need, and takes no more messages than it must.
#pragma once

#include <dsp/partition.hpp>
#include <dsp/plan/cache.hpp>
#include <dsp/plan/gather.hpp>
#include <dsp/plan/switch.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/settings.hpp>
#include <dsp/wire.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <variant>
#include <vector>

namespace dsp::detail {

struct PackedArgs {
  std::span<const PackedItem> items;
  std::span<const std::size_t> global;
  std::size_t i = 0, j = 0;  // Sharded<i> -> Sharded<j>
  Wire wire = Wire::exact;   // for float tensors only (the front end checks)
};

/// Per tensor of an exact packed plan: the copy tasks between the tensor and
/// its sections of every chunk (section_tasks), the unit they are in, and,
/// per receive of the plan's peer list, the index of its unpack task (-1:
/// an empty block), for unpacking one peer's sections as they land.
struct Sections {
  std::vector<CopyTask> pack, unpack;
  std::size_t pack_unit = 1, unpack_unit = 1;
  std::vector<long> unpack_at;
};

/// How a packed switch moves data on one rank.
struct PackedPlan {
  PeerPlan peer;                                       // element runs per peer, the same for every tensor
  std::vector<std::size_t> send_elems, recv_elems;     // elements per peer, rank order
  std::vector<std::size_t> send_counts, send_displs;   // bytes per peer, rank order (own chunk 0)
  std::vector<std::size_t> recv_counts, recv_displs;   //
  std::size_t send_bytes = 0, recv_bytes = 0;          // workspace
  std::size_t bound = 0;                               // >= every byte count and displacement on every rank
  std::vector<std::shared_ptr<const SwitchPlan>> own;  // non-empty: each tensor its own (copy-free) plan
  bool separate() const { return !own.empty(); }
  // > 0: every chunk has this many bytes, at displacement peer * equal_chunk
  // (the own slot left unused), and a blocking exchange is one equal-count
  // all-to-all (packed_equal_chunk).
  std::size_t equal_chunk = 0;
  // The chunks as byte runs for the backend's point-to-point exchange, each
  // cut into messages (packed_message_bytes); in the order of peer.sends and
  // peer.recvs, empty chunks left out (message_of maps a receive of
  // peer.recvs to its index here, -1 when empty). A blocking exchange uses
  // them when `sectioned`, a split-phase one always.
  std::vector<PeerRuns> section_sends, section_recvs;
  std::vector<long> message_of;
  bool sectioned = false;
  std::vector<Sections> sections;  // exact wire: one per tensor
};

/// Messages of at most this many bytes go eagerly over Open MPI's shared
/// memory (its 4 KiB limit counts a header of a few dozen bytes).
inline constexpr std::size_t kEagerMessageBytes = 4096 - 128;

/// The most messages a chunk is cut into to stay under kEagerMessageBytes; a
/// larger chunk goes whole.
inline constexpr std::size_t kMaxEagerPieces = 16;

/// The size of the messages a chunk of `bytes` is cut into: the fewest of at
/// most kEagerMessageBytes that divide it evenly (up to kMaxEagerPieces of
/// them), or else the whole chunk. Both sides of a pair compute it from the
/// same byte count.
inline std::size_t chunk_piece_bytes(std::size_t bytes) {
  for (std::size_t m = (bytes + kEagerMessageBytes - 1) / kEagerMessageBytes; m > 1 && m <= kMaxEagerPieces; ++m)
    if (bytes % m == 0) return bytes / m;
  return bytes;
}

/// One tensor's exchange whose largest chunk (bytes one rank sends another)
/// is past the eager limit but at most this goes, under the automatic
/// setting, as packed chunks cut into eager messages (chunk_piece_bytes),
/// point to point, instead of one all-to-all(-v) whose messages would each
/// wait for the receiver (rendezvous). Measured (docs/benchmarks.md, "Small
/// exchanges: datatypes and eager pieces"): chunks of 4 and 8 KiB moved in
/// 0.68-0.98 of the collective's time at 2 and 4 ranks, 16 KiB chunks in
/// 1.08-1.11, and chunks already under the limit 1.4-1.6x slower as messages
/// than as one MPI_Alltoall.
inline constexpr std::size_t kEagerPiecesChunkBytes = std::size_t(8) << 10;
inline constexpr bool eager_pieces_chunk(std::size_t chunk_bytes) {
  return chunk_bytes > kEagerMessageBytes && chunk_bytes <= kEagerPiecesChunkBytes;
}

/// The largest chunk of a switch Sharded<i> -> Sharded<j> over n ranks, in
/// bytes (rank 0's blocks are the largest on both sides): equal on every rank.
inline std::size_t largest_switch_chunk(std::span<const std::size_t> global, std::size_t i, std::size_t j,
                                        std::size_t n, std::size_t elem_bytes) {
  std::size_t c = elem_bytes;
  for (std::size_t d = 0; d < global.size(); ++d) c *= d == i || d == j ? Partition{global[d], n}.count(0) : global[d];
  return c;
}

/// Whether one tensor's blocking switch goes in eager pieces (see
/// kEagerPiecesChunkBytes): the automatic setting would run a packing
/// collective (`chosen`: alltoall or alltoallv), the backend has
/// point-to-point exchange, and the largest chunk is in the window. From
/// values every rank shares.
inline bool switch_in_eager_pieces(std::span<const std::size_t> global, std::size_t i, std::size_t j, int size,
                                   std::size_t elem_bytes, Capabilities caps, SwitchAlgorithm setting,
                                   SwitchAlgorithm chosen) {
  return setting == SwitchAlgorithm::automatic && caps.peer && size > 1 && i != j &&
         (chosen == SwitchAlgorithm::alltoall || chosen == SwitchAlgorithm::alltoallv) &&
         eager_pieces_chunk(largest_switch_chunk(global, i, j, std::size_t(size), elem_bytes));
}

/// Whether a packed batch's chunks go point-to-point in a blocking switch:
/// under the automatic and pairwise settings (the others name a collective,
/// which the batch then uses). Decided from values every rank shares (the
/// element sizes, the backend's capabilities, the setting), so that all ranks
/// take the same exchange; the sections must be one size, for a message to be
/// one tensor's on both sides of every pair. One tensor goes so only in eager
/// pieces (switch_in_eager_pieces), its chunks cut by chunk_piece_bytes.
inline bool packed_sectioned(const PackedArgs& a, int size, Capabilities caps, SwitchAlgorithm setting) {
  if (setting != SwitchAlgorithm::automatic && setting != SwitchAlgorithm::pairwise) return false;
  if (a.items.size() == 1)  // one tensor: only in eager pieces (plan_switch_step)
    return a.wire == Wire::exact &&
           switch_in_eager_pieces(a.global, a.i, a.j, size, a.items[0].elem_bytes, caps, setting,
                                  choose_switch(a.global, a.i, a.j, size, a.items[0].elem_bytes, caps, setting));
  if (!caps.peer || a.i == a.j || size < 2) return false;
  for (const PackedItem& t : a.items)
    if (t.elem_bytes != a.items.front().elem_bytes) return false;  // (on a wire too: a mixed batch takes the v path)
  return true;
}

/// Under the alltoall setting, a packed batch of evenly divided dims goes as
/// one equal-count all-to-all of its chunks (the own slot unused), not an
/// all-to-all-v. Automatic keeps the point-to-point sections: measured
/// (docs/benchmarks.md, "Agreement mode first_call"), three 4 KiB float
/// tensors at 2 ranks moved in 5.1 us as sections and 5.9 us as one
/// MPI_Alltoall of 6 KiB messages, which pass Open MPI's 4 KiB eager limit.
/// Decided from values every rank shares.
inline bool packed_equal(const PackedArgs& a, int size, SwitchAlgorithm setting) {
  const std::size_t n = static_cast<std::size_t>(size);
  return setting == SwitchAlgorithm::alltoall && size > 1 && a.i != a.j && a.global[a.i] % n == 0 &&
         a.global[a.j] % n == 0;
}

/// The size of the messages a chunk of `sections` equal sections is cut into:
/// the fewest messages of at most kEagerMessageBytes that divide the chunk
/// evenly, or else one message per section. Both sides of a pair compute it
/// from the same chunk size, so they cut it the same way.
inline std::size_t packed_message_bytes(std::size_t chunk, std::size_t sections) {
  for (std::size_t m = std::max<std::size_t>(1, (chunk + kEagerMessageBytes - 1) / kEagerMessageBytes); m < sections;
       ++m)
    if (chunk % m == 0) return chunk / m;
  return chunk / sections;
}

/// Whether the batch moves each tensor with its own plan: exact wire, and
/// every tensor's own switch resolving (under the current setting) to an
/// algorithm without copies in user space, pairwise or datatypes. Packing
/// those would add a copy on each side of every byte; what the batch saves by
/// packing is a collective per tensor, which pays only where each tensor's
/// own switch copies anyway (small tensors go alltoall).
inline bool packed_separately(const PackedArgs& a, int size, Capabilities caps, SwitchAlgorithm setting) {
  if (a.wire != Wire::exact || a.i == a.j || size < 2) return false;
  for (const PackedItem& t : a.items) {
    const SwitchAlgorithm s = choose_switch(a.global, a.i, a.j, size, t.elem_bytes, caps, setting, false);
    if (s != SwitchAlgorithm::pairwise && s != SwitchAlgorithm::datatypes) return false;
  }
  return true;
}

/// The path a batch reports to the agreement check: every rank must move
/// every tensor the same way.
inline Path packed_path(const PackedArgs& a, const PackedPlan& p) {
  if (a.i == a.j) return Path::identity;
  if (!p.separate()) return p.equal_chunk ? Path::alltoall : p.sectioned ? Path::sections : Path::alltoallv;
  for (const auto& o : p.own)
    if (o->index() != p.own.front()->index()) return Path::per_tensor;
  return std::holds_alternative<PeerPlan>(*p.own.front()) ? Path::pairwise : Path::datatypes;
}

/// The widest power-of-two unit dividing both `unit` (a power of two, or an
/// element size) and a section's byte offset: an exact section is copied in
/// that unit, so a section need not start at a multiple of its element size
/// (tensors of several element types).
inline std::size_t section_unit(std::size_t unit, std::size_t byte_offset) {
  std::size_t u = unit & (~unit + 1);  // the largest power of two dividing unit
  while (byte_offset % u) u /= 2;
  return u;
}
inline Runs scale_runs(const Runs& r, std::size_t f) { return Runs{r.base * f, r.stride * f, r.len * f}; }

/// The copy tasks between tensor k's element runs and its exact section of
/// every chunk in `chunks` (the chunk for peer q starts at byte displs[q]):
/// `pack` from the tensor into the buffer, else back. Returns the unit they
/// are in, the widest dividing the element size and every section's offset,
/// so that one copy_runs call (one kernel launch on a device, one task
/// table) moves the tensor's sections for all peers. `at` (when given)
/// receives, per chunk, the index of its task or -1 for an empty chunk.
inline std::size_t section_tasks(std::span<const PeerRuns> chunks, std::span<const std::size_t> displs,
                                 std::span<const PackedItem> items, std::size_t k, Wire w, bool pack,
                                 std::vector<CopyTask>& tasks, std::vector<long>* at = nullptr) {
  auto offset = [&](const PeerRuns& c) {
    std::size_t o = displs[std::size_t(c.peer)];
    for (std::size_t t = 0; t < k; ++t) o += wire_section_bytes(w, c.elems, items[t].elem_bytes);
    return o;
  };
  const std::size_t elem_bytes = items[k].elem_bytes;
  std::size_t u = section_unit(elem_bytes, 0);
  for (const PeerRuns& c : chunks)
    if (c.elems) u = section_unit(u, offset(c));
  const std::size_t f = elem_bytes / u;
  tasks.clear();
  if (at) at->clear();
  for (const PeerRuns& c : chunks) {
    if (at) at->push_back(c.elems ? long(tasks.size()) : -1);
    if (!c.elems) continue;
    const Runs section = contiguous(offset(c) / u, c.elems * f), tensor = scale_runs(c.runs, f);
    tasks.push_back(pack ? CopyTask{section, tensor, c.elems * f} : CopyTask{tensor, section, c.elems * f});
  }
  return u;
}

/// The byte runs of `chunks` (elements per peer, `counts` bytes at `displs`)
/// as point-to-point messages of one or more pieces; `index` (one per chunk)
/// receives each chunk's message number, -1 when empty.
inline void chunk_messages(std::span<const PeerRuns> chunks, std::span<const std::size_t> counts,
                           std::span<const std::size_t> displs, std::size_t sections, std::vector<PeerRuns>& out,
                           std::vector<long>* index = nullptr) {
  out.clear();
  if (index) index->clear();
  for (const PeerRuns& c : chunks) {
    const std::size_t q = std::size_t(c.peer), bytes = counts[q];
    if (index) index->push_back(bytes ? long(out.size()) : -1);
    if (!bytes) continue;
    std::size_t piece = packed_message_bytes(bytes, sections ? sections : 1);
    if (piece == 0 || bytes % piece) piece = bytes;  // sections of several sizes: one message
    out.push_back({c.peer, contiguous(displs[q], bytes), piece, bytes});
  }
}

inline PackedPlan plan_packed(const PackedArgs& a, int rank, int size, Capabilities caps, SwitchAlgorithm setting) {
  const std::size_t n = static_cast<std::size_t>(size);
  PackedPlan plan;
  if (a.i == a.j) {
    plan.peer.self = plan_identity(a.global, a.i, rank, size).copy;
    return plan;
  }
  plan.peer = plan_peer_switch(a.global, a.i, a.j, rank, size);
  if (packed_separately(a, size, caps, setting)) {
    for (const PackedItem& t : a.items)
      plan.own.push_back(cached_switch_plan(a.global, a.i, a.j, rank, size, t.elem_bytes, caps, setting));
    return plan;
  }
  plan.send_elems.assign(n, 0);
  plan.recv_elems.assign(n, 0);
  for (const PeerRuns& s : plan.peer.sends) plan.send_elems[std::size_t(s.peer)] = s.elems;
  for (const PeerRuns& r : plan.peer.recvs) plan.recv_elems[std::size_t(r.peer)] = r.elems;
  auto chunk = [&](std::size_t elems) {
    std::size_t b = 0;
    for (const PackedItem& t : a.items) b += wire_section_bytes(a.wire, elems, t.elem_bytes);
    return b;
  };
  plan.send_counts.assign(n, 0), plan.send_displs.assign(n, 0);
  plan.recv_counts.assign(n, 0), plan.recv_displs.assign(n, 0);
  // Equal chunks: every peer's slot (the own one too, unused) at peer * chunk.
  const bool equal = packed_equal(a, size, setting);
  if (equal) plan.equal_chunk = chunk(product(a.global) / (n * n));
  for (std::size_t q = 0; q < n; ++q) {
    plan.send_displs[q] = equal ? q * plan.equal_chunk : plan.send_bytes;
    plan.send_counts[q] = chunk(plan.send_elems[q]);
    plan.send_bytes = equal ? (q + 1) * plan.equal_chunk : plan.send_bytes + plan.send_counts[q];
    plan.recv_displs[q] = equal ? q * plan.equal_chunk : plan.recv_bytes;
    plan.recv_counts[q] = chunk(plan.recv_elems[q]);
    plan.recv_bytes = equal ? (q + 1) * plan.equal_chunk : plan.recv_bytes + plan.recv_counts[q];
  }
  // Rank 0 holds the largest blocks; padding adds at most 8 bytes per section.
  std::vector<std::size_t> in0(a.global.begin(), a.global.end()), out0 = in0;
  in0[a.i] = Partition{a.global[a.i], n}.count(0);
  out0[a.j] = Partition{a.global[a.j], n}.count(0);
  const std::size_t most = std::max(product(in0), product(out0));
  for (const PackedItem& t : a.items) plan.bound += wire_section_bytes(a.wire, most, t.elem_bytes) + 8 * n;
  if (a.wire == Wire::exact)
    for (std::size_t k = 0; k < a.items.size(); ++k) {
      Sections& t = plan.sections.emplace_back();
      t.pack_unit = section_tasks(plan.peer.sends, plan.send_displs, a.items, k, a.wire, true, t.pack);
      t.unpack_unit =
          section_tasks(plan.peer.recvs, plan.recv_displs, a.items, k, a.wire, false, t.unpack, &t.unpack_at);
    }
  plan.sectioned = !equal && packed_sectioned(a, size, caps, setting);
  if (size > 1) {
    chunk_messages(plan.peer.sends, plan.send_counts, plan.send_displs, a.items.size(), plan.section_sends);
    chunk_messages(plan.peer.recvs, plan.recv_counts, plan.recv_displs, a.items.size(), plan.section_recvs,
                   &plan.message_of);
    if (plan.sectioned && a.items.size() == 1)  // one tensor in eager pieces
      for (auto* list : {&plan.section_sends, &plan.section_recvs})
        for (PeerRuns& m : *list) m.piece = chunk_piece_bytes(m.elems);
  }
  return plan;
}

/// The cache key of a packed plan: extents, dims, rank, size, wire, element
/// sizes, capabilities, setting, and what kind of plan (switch, gather).
template <class Args>
std::array<std::size_t, kMaxRank + kMaxBatch + 10> packed_key(const Args& a, std::size_t i, std::size_t j, int rank,
                                                              int size, Capabilities caps, SwitchAlgorithm setting,
                                                              std::size_t kind) {
  std::array<std::size_t, kMaxRank + kMaxBatch + 10> key{};
  key[0] = a.global.size();
  std::copy(a.global.begin(), a.global.end(), key.begin() + 1);
  std::size_t* k = key.data() + kMaxRank + 1;
  k[0] = i, k[1] = j, k[2] = std::size_t(rank), k[3] = std::size_t(size), k[4] = std::size_t(a.wire);
  k[5] = std::size_t(caps.peer) | std::size_t(caps.typed) << 1, k[6] = std::size_t(setting), k[7] = a.items.size();
  k[8] = kind;
  for (std::size_t t = 0; t < a.items.size(); ++t) k[9 + t] = a.items[t].elem_bytes;
  return key;
}

/// The packed plans in use; as cached_switch_plan.
inline std::shared_ptr<const PackedPlan> cached_packed_plan(const PackedArgs& a, int rank, int size, Capabilities caps,
                                                            SwitchAlgorithm setting) {
  auto make = [&] { return std::make_shared<const PackedPlan>(plan_packed(a, rank, size, caps, setting)); };
  if (a.global.size() > kMaxRank || a.items.size() > kMaxBatch) return make();
  return cached_plan<PackedPlan>(packed_key(a, a.i, a.j, rank, size, caps, setting, 0), make);
}

// ---------------------------------------------------------------- gathers

struct PackedGatherArgs {
  std::span<const PackedItem> items;
  std::span<const std::size_t> global;
  std::size_t d = 0;  // Sharded<d> -> Replicated
  Wire wire = Wire::exact;
  bool pack = false;  // pack even where each tensor's own gather would copy nothing (split-phase chunks)
};

/// A gather Sharded<d> -> Replicated of a batch, or on a wire: every rank
/// packs its block of each tensor into one chunk (each tensor a section,
/// exact or in the wire type), one all-gather-v of the chunks in bytes, and
/// every chunk is unpacked into its place. On a wire the own block goes
/// through the same rounding, so every rank holds the same values. An exact
/// batch whose tensors' own gathers copy nothing keeps one plan per tensor.
struct PackedGatherPlan {
  PeerPlan peer;                               // element runs: sends (my block), recvs (where each lands)
  std::vector<std::size_t> counts, displs;     // bytes of each rank's chunk, rank order
  std::vector<std::size_t> elems;              // elements of each rank's block
  std::vector<Runs> place;                     // where rank q's block lands in the output, elements
  std::size_t send_bytes = 0, recv_bytes = 0;  // workspace
  std::vector<GatherPlan> own;                 // non-empty: each tensor its own gather
  bool separate() const { return !own.empty(); }
  std::vector<Sections> sections;                      // exact: per tensor
  std::vector<PeerRuns> section_sends, section_recvs;  // for a split-phase exchange
  std::vector<long> message_of;
};

inline PackedGatherPlan plan_packed_gather(const PackedGatherArgs& a, int rank, int size, Capabilities caps,
                                           SwitchAlgorithm setting) {
  const std::size_t n = static_cast<std::size_t>(size), p = static_cast<std::size_t>(rank);
  PackedGatherPlan plan;
  if (a.wire == Wire::exact && a.items.size() > 1 && !a.pack) {
    bool copy_free = n > 1;
    for (const PackedItem& t : a.items) {
      GatherPlan g = plan_gather(a.global, a.d, rank, size, t.elem_bytes, caps, setting);
      const auto* ag = std::get_if<AllgatherPlan>(&g);
      copy_free = copy_free && (!ag || ag->recv_into_output);
      plan.own.push_back(std::move(g));
    }
    if (copy_free) return plan;
    plan.own.clear();
  }
  plan.peer = plan_peer_gather(a.global, a.d, rank, size);
  const Partition pd{a.global[a.d], n};
  const Slab g = slab(a.global, a.d);
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t e = g.elems(pd.count(q));
    std::size_t b = 0;
    for (const PackedItem& t : a.items) b += wire_section_bytes(a.wire, e, t.elem_bytes);
    plan.elems.push_back(e);
    plan.place.push_back(g.runs(pd.offset(q), pd.count(q)));
    plan.displs.push_back(plan.recv_bytes);
    plan.counts.push_back(b);
    plan.recv_bytes += b;
  }
  plan.send_bytes = plan.counts[p];
  if (a.wire == Wire::exact) {
    // My block into the send buffer (the chunk for every peer is the same, at 0).
    const std::vector<std::size_t> zero(n, 0);
    const PeerRuns mine{rank, contiguous(0, plan.elems[p]), 0, plan.elems[p]};
    for (std::size_t k = 0; k < a.items.size(); ++k) {
      Sections& t = plan.sections.emplace_back();
      t.pack_unit = section_tasks(std::span(&mine, 1), zero, a.items, k, a.wire, true, t.pack);
      t.unpack_unit = section_tasks(plan.peer.recvs, plan.displs, a.items, k, a.wire, false, t.unpack, &t.unpack_at);
    }
  }
  if (n > 1) {
    const std::vector<std::size_t> zero(n, 0);
    std::vector<std::size_t> mine(n, plan.counts[p]);
    chunk_messages(plan.peer.sends, mine, zero, a.items.size(), plan.section_sends);
    chunk_messages(plan.peer.recvs, plan.counts, plan.displs, a.items.size(), plan.section_recvs, &plan.message_of);
  }
  return plan;
}

inline std::shared_ptr<const PackedGatherPlan> cached_packed_gather_plan(const PackedGatherArgs& a, int rank, int size,
                                                                         Capabilities caps, SwitchAlgorithm setting) {
  auto make = [&] {
    return std::make_shared<const PackedGatherPlan>(plan_packed_gather(a, rank, size, caps, setting));
  };
  if (a.global.size() > kMaxRank || a.items.size() > kMaxBatch) return make();
  return cached_plan<PackedGatherPlan>(packed_key(a, a.d, a.d, rank, size, caps, setting, a.pack ? 2 : 1), make);
}

}  // namespace dsp::detail
