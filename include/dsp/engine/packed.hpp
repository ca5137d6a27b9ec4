// SPDX-License-Identifier: BSD-3-Clause
// dsp: packed switches. Several tensors of one layout and global extents
// (a batch: Q, K and V) move Sharded<i> -> Sharded<j> with one agreement
// check and one all-to-all-v whose chunk for each peer carries every
// tensor's section in turn; and a float tensor's chunks can travel in a
// low-precision wire type (wire.hpp), converted by the pack and unpack
// kernels. Counts and displacements are in bytes.
//
// Chunk for peer q:  [ tensor 0's section | tensor 1's section | ... ]
// A section is the tensor's elements for q in the element order of the
// 1-D switch (plan_peer_switch), exact or in the wire type.
//
// When every tensor is large enough that its own switch would move without
// copies in user space (pairwise or MPI datatypes), packing would add two
// copies per byte: then the batch keeps its one agreement check but moves
// each tensor with its own plan, the point-to-point ones all posted before
// the others run and before any is waited for.
//
// Packed chunks of tensors whose sections are all the same size go by the
// backend's point-to-point exchange where it has one, instead of one
// all-to-all-v message per peer: a chunk goes as the fewest equal messages
// that each stay under the transport's eager limit (4 KiB for Open MPI's
// shared memory), but never more messages than sections. A small batch then
// avoids the rendezvous round trip one message of its whole chunk would need,
// and takes no more messages than it must (each costs a match and a
// completion); chunks of large sections go as one message per section.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/engine/agree.hpp>
#include <dsp/engine/async.hpp>
#include <dsp/engine/engine.hpp>
#include <dsp/engine/workspace.hpp>
#include <dsp/kernels/convert.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/plan/switch.hpp>
#include <dsp/wire.hpp>

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace dsp::detail {

/// The most tensors one batch carries.
inline constexpr std::size_t kMaxBatch = 16;

/// One tensor of a packed switch.
struct PackedItem {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t eb = 0;  // element bytes
};

struct PackedArgs {
  std::span<const PackedItem> items;
  std::span<const std::size_t> global;
  std::size_t i = 0, j = 0;  // Sharded<i> -> Sharded<j>
  Wire wire = Wire::exact;   // for float tensors only (the front end checks)
};

/// How a packed switch moves data on one rank.
struct PackedPlan {
  PeerPlan peer;                                       // element runs per peer, the same for every tensor
  std::vector<std::size_t> send_elems, recv_elems;     // elements per peer, rank order
  std::vector<std::size_t> sc, sd, rc, rd;             // bytes per peer, rank order (own chunk 0)
  std::size_t send_bytes = 0, recv_bytes = 0;          // workspace
  std::size_t bound = 0;                               // >= every byte count and displacement on every rank
  std::vector<std::shared_ptr<const SwitchPlan>> own;  // non-empty: each tensor its own (copy-free) plan
  bool separate() const { return !own.empty(); }
  // Non-empty (when sectioned): the chunks as byte runs for the backend's
  // point-to-point exchange, each cut into messages (packed_message_bytes).
  std::vector<PeerRuns> section_sends, section_recvs;
  bool sectioned = false;
  // Exact wire: per tensor, the copy tasks between it and its sections of
  // every chunk (section_tasks), and the unit they are in.
  struct Sections {
    std::vector<CopyTask> pack, unpack;
    std::size_t pack_unit = 1, unpack_unit = 1;
  };
  std::vector<Sections> sections;
};

/// Whether a packed batch's chunks go point-to-point (see the
/// top of this file): under the automatic and pairwise settings (the others
/// name a collective, which the batch then uses). Decided from values every
/// rank shares (the element sizes, the backend's capabilities, the
/// setting), so that all ranks take the same exchange; the sections must be
/// one size, for a message to be one tensor's on both sides of every pair.
inline bool packed_sectioned(const PackedArgs& a, int size, Capabilities caps, SwitchAlgorithm setting) {
  if (setting != SwitchAlgorithm::automatic && setting != SwitchAlgorithm::pairwise) return false;
  if (!caps.peer || a.items.size() < 2 || a.i == a.j || size < 2) return false;
  for (const PackedItem& t : a.items)
    if (t.eb != a.items.front().eb) return false;  // a wire needs float, so one size there too
  return true;
}

/// Messages of at most this many bytes go eagerly over Open MPI's shared
/// memory (its 4 KiB limit counts a header of a few dozen bytes).
inline constexpr std::size_t kEagerMessageBytes = 4096 - 128;

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

/// The section offsets of peer q's chunk: tensor t's section starts at
/// displ + sum of the earlier tensors' sections.
inline std::size_t section_bytes(Wire w, std::size_t elems, std::size_t eb) { return wire_section_bytes(w, elems, eb); }

/// Whether the batch moves each tensor with its own plan: exact wire, and
/// every tensor's own switch resolving (under the current setting) to an
/// algorithm without copies in user space, pairwise or datatypes. Packing
/// those would add a copy on each side of every byte; what the batch saves by
/// packing is a collective per tensor, which pays only where each tensor's
/// own switch copies anyway (small tensors go alltoall).
inline bool packed_separately(const PackedArgs& a, int size, Capabilities caps, SwitchAlgorithm setting) {
  if (a.wire != Wire::exact || a.i == a.j || size < 2) return false;
  for (const PackedItem& t : a.items) {
    const SwitchAlgorithm s = choose_switch(a.global, a.i, a.j, size, t.eb, caps, setting);
    if (s != SwitchAlgorithm::pairwise && s != SwitchAlgorithm::datatypes) return false;
  }
  return true;
}

/// The path a batch reports to the agreement check: every rank must move
/// every tensor the same way.
inline Path packed_path(const PackedArgs& a, const PackedPlan& p) {
  if (a.i == a.j) return Path::identity;
  if (!p.separate()) return p.sectioned ? Path::sections : Path::alltoallv;
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
/// table) moves the tensor's sections for all peers.
inline std::size_t section_tasks(std::span<const PeerRuns> chunks, std::span<const std::size_t> displs,
                                 std::span<const PackedItem> items, std::size_t k, Wire w, bool pack,
                                 std::vector<CopyTask>& tasks) {
  auto offset = [&](const PeerRuns& c) {
    std::size_t at = displs[std::size_t(c.peer)];
    for (std::size_t t = 0; t < k; ++t) at += section_bytes(w, c.elems, items[t].eb);
    return at;
  };
  const std::size_t eb = items[k].eb;
  std::size_t u = section_unit(eb, 0);
  for (const PeerRuns& c : chunks)
    if (c.elems) u = section_unit(u, offset(c));
  const std::size_t f = eb / u;
  tasks.clear();
  for (const PeerRuns& c : chunks) {
    if (!c.elems) continue;
    const Runs section = contiguous(offset(c) / u, c.elems * f), tensor = scale_runs(c.runs, f);
    tasks.push_back(pack ? CopyTask{section, tensor, c.elems * f} : CopyTask{tensor, section, c.elems * f});
  }
  return u;
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
      plan.own.push_back(cached_switch_plan(a.global, a.i, a.j, rank, size, t.eb, caps, setting));
    return plan;
  }
  plan.send_elems.assign(n, 0);
  plan.recv_elems.assign(n, 0);
  for (const PeerRuns& s : plan.peer.sends) plan.send_elems[std::size_t(s.peer)] = s.elems;
  for (const PeerRuns& r : plan.peer.recvs) plan.recv_elems[std::size_t(r.peer)] = r.elems;
  auto chunk = [&](std::size_t elems) {
    std::size_t b = 0;
    for (const PackedItem& t : a.items) b += section_bytes(a.wire, elems, t.eb);
    return b;
  };
  plan.sc.assign(n, 0), plan.sd.assign(n, 0), plan.rc.assign(n, 0), plan.rd.assign(n, 0);
  for (std::size_t q = 0; q < n; ++q) {
    plan.sd[q] = plan.send_bytes;
    plan.sc[q] = chunk(plan.send_elems[q]);
    plan.send_bytes += plan.sc[q];
    plan.rd[q] = plan.recv_bytes;
    plan.rc[q] = chunk(plan.recv_elems[q]);
    plan.recv_bytes += plan.rc[q];
  }
  // Rank 0 holds the largest blocks; padding adds at most 8 bytes per section.
  std::vector<std::size_t> in0(a.global.begin(), a.global.end()), out0 = in0;
  in0[a.i] = Partition{a.global[a.i], n}.count(0);
  out0[a.j] = Partition{a.global[a.j], n}.count(0);
  const std::size_t most = std::max(product(in0), product(out0));
  for (const PackedItem& t : a.items) plan.bound += section_bytes(a.wire, most, t.eb) + 8 * n;
  if (a.wire == Wire::exact)
    for (std::size_t k = 0; k < a.items.size(); ++k) {
      PackedPlan::Sections& t = plan.sections.emplace_back();
      t.pack_unit = section_tasks(plan.peer.sends, plan.sd, a.items, k, a.wire, true, t.pack);
      t.unpack_unit = section_tasks(plan.peer.recvs, plan.rd, a.items, k, a.wire, false, t.unpack);
    }
  plan.sectioned = packed_sectioned(a, size, caps, setting);
  if (plan.sectioned)
    for (std::size_t q = 0; q < n; ++q) {
      const std::size_t k = a.items.size();
      if (q == std::size_t(rank)) continue;
      if (plan.sc[q])
        plan.section_sends.push_back(
            {int(q), contiguous(plan.sd[q], plan.sc[q]), packed_message_bytes(plan.sc[q], k), plan.sc[q]});
      if (plan.rc[q])
        plan.section_recvs.push_back(
            {int(q), contiguous(plan.rd[q], plan.rc[q]), packed_message_bytes(plan.rc[q], k), plan.rc[q]});
    }
  return plan;
}

/// The packed plans in use, by (extents, dims, rank, size, wire, element
/// sizes, capabilities, setting); as cached_switch_plan.
inline std::shared_ptr<const PackedPlan> cached_packed_plan(const PackedArgs& a, int rank, int size, Capabilities caps,
                                                            SwitchAlgorithm setting) {
  auto make = [&] { return std::make_shared<const PackedPlan>(plan_packed(a, rank, size, caps, setting)); };
  if (a.global.size() > kMaxRank || a.items.size() > kMaxBatch) return make();
  using Key = std::array<std::size_t, kMaxRank + kMaxBatch + 9>;
  Key key{};
  key[0] = a.global.size();
  std::copy(a.global.begin(), a.global.end(), key.begin() + 1);
  std::size_t* k = key.data() + kMaxRank + 1;
  k[0] = a.i, k[1] = a.j, k[2] = std::size_t(rank), k[3] = std::size_t(size), k[4] = std::size_t(a.wire);
  k[5] = std::size_t(caps.peer) | std::size_t(caps.typed) << 1, k[6] = std::size_t(setting), k[7] = a.items.size();
  for (std::size_t t = 0; t < a.items.size(); ++t) k[8 + t] = a.items[t].eb;
  return cached_plan<PackedPlan>(key, make);
}

/// Execute phase of a batch whose tensors move with their own plans: the
/// point-to-point exchanges are posted first (each after its own block is
/// copied), the others run meanwhile, then the posted ones are waited for.
template <class M, class Comm>
void execute_separately(Comm& comm, const PackedPlan& plan, const PackedArgs& a) {
  auto exec = execution_space_for<M>(comm);
  const std::size_t n = a.items.size();
  std::array<bool, kMaxBatch> posted{};
  if constexpr (AsyncPeerExchange<Comm>) {
    std::vector<std::optional<typename Comm::Pending>> pending(n);
    bool fenced = false;
    for (std::size_t t = 0; t < n; ++t) {
      const auto* p = std::get_if<PeerPlan>(plan.own[t].get());
      if (!p) continue;
      copy_runs(exec, a.items[t].out, a.items[t].in, a.items[t].eb, std::span(&p->self, 1));
      if (!fenced) fence_before_transfer<Comm>(exec), fenced = true;
      pending[t].emplace(comm.post_runs(a.items[t].in, p->sends, a.items[t].out, p->recvs, a.items[t].eb));
      posted[t] = true;
    }
    for (std::size_t t = 0; t < n; ++t)
      if (!posted[t])
        execute_switch<M>(comm, *plan.own[t],
                          SwitchArgs{a.items[t].in, a.items[t].out, a.items[t].eb, a.global, a.i, a.j});
    for (auto& p : pending)
      if (p) comm.wait_runs(*p);
  } else {
    for (std::size_t t = 0; t < n; ++t)
      execute_switch<M>(comm, *plan.own[t],
                        SwitchArgs{a.items[t].in, a.items[t].out, a.items[t].eb, a.global, a.i, a.j});
  }
  fence_after<Comm>(exec);
}

/// Execute phase of an agreed packed switch.
template <class M, class Comm>
void execute_packed(Comm& comm, const PackedPlan& plan, const PackedArgs& a) {
  auto exec = execution_space_for<M>(comm);
  const bool wire = a.wire != Wire::exact;
  const bool moves = a.i != a.j && comm.size() > 1 && product(a.global) > 0;
  if (moves && plan.separate()) return execute_separately<M>(comm, plan, a);
  // Own blocks first (they need nothing from anybody).
  for (const PackedItem& t : a.items) {
    if (wire) wire_round(exec, a.wire, static_cast<float*>(t.out), static_cast<const float*>(t.in), plan.peer.self);
    else copy_runs(exec, t.out, t.in, t.eb, std::span(&plan.peer.self, 1));
  }
  if (!moves) return fence_after<Comm>(exec);
  const Workspace<M>* ws = comm.resources().template find<Workspace<M>>();
  unsigned char* sbuf = ws ? ws->send() : nullptr;
  unsigned char* rbuf = ws ? ws->recv() : nullptr;
  if (wire) {
    for (const PeerRuns& s : plan.peer.sends) {
      std::size_t at = plan.sd[std::size_t(s.peer)];
      for (const PackedItem& t : a.items) {
        wire_pack(exec, a.wire, sbuf + at, static_cast<const float*>(t.in), s.runs, s.elems);
        at += section_bytes(a.wire, s.elems, t.eb);
      }
    }
  } else {
    for (std::size_t k = 0; k < a.items.size(); ++k)
      copy_runs(exec, sbuf, a.items[k].in, plan.sections[k].pack_unit, plan.sections[k].pack);
  }
  fence_before_transfer<Comm>(exec);
  bool sent = false;
  if constexpr (PeerExchange<Comm>)
    if (plan.sectioned) comm.exchange_runs(sbuf, plan.section_sends, rbuf, plan.section_recvs, 1, [] {}), sent = true;
  if (!sent) comm.all_to_all_v(sbuf, plan.sc, plan.sd, rbuf, plan.rc, plan.rd, 1, plan.bound);
  if (wire) {
    for (const PeerRuns& r : plan.peer.recvs) {
      std::size_t at = plan.rd[std::size_t(r.peer)];
      for (const PackedItem& t : a.items) {
        wire_unpack(exec, a.wire, static_cast<float*>(t.out), r.runs, rbuf + at, r.elems);
        at += section_bytes(a.wire, r.elems, t.eb);
      }
    }
  } else {
    for (std::size_t k = 0; k < a.items.size(); ++k)
      copy_runs(exec, a.items[k].out, rbuf, plan.sections[k].unpack_unit, plan.sections[k].unpack);
  }
  fence_after<Comm>(exec);
}

/// A whole packed switch: prepare, agree, execute. Collective. `sig` and
/// `err` come from the front end (its checks of every tensor).
template <class M, class Comm>
void run_packed(Comm comm, Signature sig, std::string err, const PackedArgs& a) {
  Busy busy(comm, op_name(sig.op));
  auto plan = prepare(comm.rank(), sig, err, [&] {
    auto p = cached_packed_plan(a, comm.rank(), comm.size(), capabilities_of<Comm>(), switch_algorithm());
    sig.algorithm = static_cast<std::uint32_t>(packed_path(a, *p));
    if (p->send_bytes || p->recv_bytes) workspace<M>(comm).reserve(p->send_bytes, p->recv_bytes);
    return p;
  });
  agree(comm, sig, err);
  execute_packed<M>(comm, *plan, a);
}

// ---------------------------------------------------------------- gather on a wire

/// A gather Sharded<d> -> Replicated of a float tensor whose blocks travel as
/// `wire`: each rank packs its block into one wire section, one all-gather-v
/// of the sections (bytes), and every section is unpacked into its place. The
/// own block goes through the same rounding, so every rank holds the same values.
struct WireGatherPlan {
  std::vector<std::size_t> counts, displs;  // bytes per rank
  std::vector<Runs> place;                  // where rank q's block lands in the output
  std::vector<std::size_t> elems;           // elements of rank q's block
  std::size_t recv_bytes = 0;
};

inline WireGatherPlan plan_wire_gather(std::span<const std::size_t> global, std::size_t d, int size, Wire w) {
  const std::size_t n = static_cast<std::size_t>(size);
  const Partition pd{global[d], n};
  const Slab g = slab(global, d);
  WireGatherPlan plan;
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t e = g.elems(pd.count(q));
    plan.elems.push_back(e);
    plan.place.push_back(g.runs(pd.offset(q), pd.count(q)));
    plan.displs.push_back(plan.recv_bytes);
    plan.counts.push_back(wire_section_bytes(w, e, sizeof(float)));
    plan.recv_bytes += plan.counts.back();
  }
  return plan;
}

/// A whole gather on a wire: prepare, agree, execute. Collective.
template <class M, class Comm>
void run_wire_gather(Comm comm, Signature sig, std::string err, const float* in, float* out,
                     std::span<const std::size_t> global, std::size_t d, Wire w) {
  Busy busy(comm, op_name(sig.op));
  const std::size_t p = static_cast<std::size_t>(comm.rank());
  sig.algorithm = static_cast<std::uint32_t>(Path::allgather);
  const WireGatherPlan plan = prepare(comm.rank(), sig, err, [&] {
    WireGatherPlan wp = plan_wire_gather(global, d, comm.size(), w);
    if (comm.size() > 1) workspace<M>(comm).reserve(wp.counts[p], wp.recv_bytes);
    return wp;
  });
  agree(comm, sig, err);
  auto exec = execution_space_for<M>(comm);
  const CopyTask own{plan.place[p], contiguous(0, plan.elems[p]), plan.elems[p]};
  wire_round(exec, w, out, in, own);
  if (comm.size() == 1 || product(global) == 0) return fence_after<Comm>(exec);
  const Workspace<M>* ws = comm.resources().template find<Workspace<M>>();
  unsigned char* sbuf = ws ? ws->send() : nullptr;
  unsigned char* rbuf = ws ? ws->recv() : nullptr;
  wire_pack(exec, w, sbuf, in, contiguous(0, plan.elems[p]), plan.elems[p]);
  fence_before_transfer<Comm>(exec);
  comm.all_gather_v(sbuf, plan.counts[p], rbuf, plan.counts, plan.displs, 1);
  for (std::size_t q = 0; q < plan.counts.size(); ++q)
    if (q != p) wire_unpack(exec, w, out, plan.place[q], rbuf + plan.displs[q], plan.elems[q]);
  fence_after<Comm>(exec);
}

}  // namespace dsp::detail
