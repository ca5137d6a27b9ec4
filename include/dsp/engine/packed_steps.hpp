// SPDX-License-Identifier: BSD-3-Clause
// dsp: executing packed plans (plan/packed.hpp): the switch and the gather of
// a batch of tensors, or of tensors on a low-precision wire, on one
// communicator. Generic in the memory space only. The pieces a split-phase
// operation needs (pack and own blocks now, unpack one peer's chunk as it
// lands) are separate functions, so the blocking and the split-phase
// operation run the same code.
#pragma once

#include <dsp/core/buffers.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/steps.hpp>
#include <dsp/kernels/convert.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/plan/packed.hpp>
#include <dsp/wire.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace dsp::detail {

/// A packed plan (switch or gather) with its workspace reserved. May throw.
template <class M>
std::shared_ptr<const PackedPlan> plan_and_reserve_packed(Port& comm, const PackedArgs& a, SwitchAlgorithm setting) {
  auto p = cached_packed_plan(a, comm.rank(), comm.size(), capabilities_of(comm), setting);
  if (p->send_bytes || p->recv_bytes) workspace<M>(comm).reserve(p->send_bytes, p->recv_bytes);
  if (p->separate())
    for (std::size_t t = 0; t < p->own.size(); ++t)
      if (const auto* v = std::get_if<AlltoallvPlan>(p->own[t].get()))
        workspace<M>(comm).reserve(v->send_elems * a.items[t].elem_bytes, v->recv_elems * a.items[t].elem_bytes);
  return p;
}
template <class M>
std::shared_ptr<const PackedGatherPlan> plan_and_reserve_packed_gather(Port& comm, const PackedGatherArgs& a,
                                                                       SwitchAlgorithm setting) {
  auto p = cached_packed_gather_plan(a, comm.rank(), comm.size(), capabilities_of(comm), setting);
  if (comm.size() > 1 && (p->send_bytes || p->recv_bytes)) workspace<M>(comm).reserve(p->send_bytes, p->recv_bytes);
  if (p->separate())
    for (std::size_t t = 0; t < p->own.size(); ++t)
      if (const auto* g = std::get_if<AllgatherPlan>(&p->own[t]); g && comm.size() > 1)
        workspace<M>(comm).reserve(0, g->recv_elems * a.items[t].elem_bytes);
  return p;
}

// ---------------------------------------------------------------- switch

/// The own blocks of a packed switch, exact or through the wire's rounding.
template <class Exec>
void packed_own_blocks(const Exec& exec, const PackedPlan& plan, const PackedArgs& a) {
  for (const PackedItem& t : a.items) {
    if (a.wire != Wire::exact) wire_kernels<Exec>(t).round(exec, a.wire, t.out, t.in, plan.peer.self);
    else copy_runs(exec, t.out, t.in, t.elem_bytes, std::span(&plan.peer.self, 1));
  }
}

/// Packs every tensor's sections of every peer's chunk into `sbuf`.
template <class Exec>
void packed_pack(const Exec& exec, const PackedPlan& plan, const PackedArgs& a, unsigned char* sbuf) {
  if (a.wire != Wire::exact) {
    for (const PeerRuns& s : plan.peer.sends) {
      std::size_t at = plan.send_displs[std::size_t(s.peer)];
      for (const PackedItem& t : a.items) {
        wire_kernels<Exec>(t).pack(exec, a.wire, sbuf + at, t.in, s.runs, s.elems);
        at += wire_section_bytes(a.wire, s.elems, t.elem_bytes);
      }
    }
  } else {
    for (std::size_t k = 0; k < a.items.size(); ++k)
      copy_runs(exec, sbuf, a.items[k].in, plan.sections[k].pack_unit, plan.sections[k].pack);
  }
}

/// Unpacks the chunk of receive r of plan.peer.recvs (every tensor's section)
/// from `rbuf`.
template <class Exec>
void packed_unpack_one(const Exec& exec, const PackedPlan& plan, const PackedArgs& a, const unsigned char* rbuf,
                       std::size_t r) {
  const PeerRuns& rr = plan.peer.recvs[r];
  if (a.wire != Wire::exact) {
    std::size_t at = plan.recv_displs[std::size_t(rr.peer)];
    for (const PackedItem& t : a.items) {
      wire_kernels<Exec>(t).unpack(exec, a.wire, t.out, rr.runs, rbuf + at, rr.elems);
      at += wire_section_bytes(a.wire, rr.elems, t.elem_bytes);
    }
  } else {
    for (std::size_t k = 0; k < a.items.size(); ++k)
      if (const long x = plan.sections[k].unpack_at[r]; x >= 0)
        copy_runs(exec, a.items[k].out, rbuf, plan.sections[k].unpack_unit,
                  std::span(&plan.sections[k].unpack[std::size_t(x)], 1));
  }
}

/// Unpacks every peer's chunk.
template <class Exec>
void packed_unpack(const Exec& exec, const PackedPlan& plan, const PackedArgs& a, const unsigned char* rbuf) {
  if (a.wire != Wire::exact) {
    for (std::size_t r = 0; r < plan.peer.recvs.size(); ++r) packed_unpack_one(exec, plan, a, rbuf, r);
  } else {
    for (std::size_t k = 0; k < a.items.size(); ++k)
      copy_runs(exec, a.items[k].out, rbuf, plan.sections[k].unpack_unit, plan.sections[k].unpack);
  }
}

/// Execute phase of a batch whose tensors move with their own plans: the
/// point-to-point exchanges are posted first (each after its own block is
/// copied), the others run meanwhile, then the posted ones are waited for.
template <class M>
void execute_separately(PortOn<M>& comm, const PackedPlan& plan, const PackedArgs& a) {
  const auto exec = comm.exec();
  const std::size_t n = a.items.size();
  std::vector<std::unique_ptr<PortPending>> pending(n);
  if (comm.caps().async) {
    bool fenced = false;
    for (std::size_t t = 0; t < n; ++t) {
      const auto* p = std::get_if<PeerPlan>(plan.own[t].get());
      if (!p) continue;
      copy_runs(exec, a.items[t].out, a.items[t].in, a.items[t].elem_bytes, std::span(&p->self, 1));
      if (!fenced) fence_before_transfer(comm, exec), fenced = true;
      pending[t] = comm.post_runs(a.items[t].in, p->sends, a.items[t].out, p->recvs, a.items[t].elem_bytes);
    }
  }
  for (std::size_t t = 0; t < n; ++t)
    if (!pending[t])
      execute_switch(comm, *plan.own[t],
                     SwitchArgs{a.items[t].in, a.items[t].out, a.items[t].elem_bytes, a.global, a.i, a.j});
  for (auto& p : pending)
    if (p) comm.wait_runs(*p, [](std::size_t) {});
  fence_after(comm, exec);
}

/// Execute phase of an agreed packed switch.
template <class M>
void execute_packed(PortOn<M>& comm, const PackedPlan& plan, const PackedArgs& a) {
  const auto exec = comm.exec();
  const bool moves = a.i != a.j && comm.size() > 1 && product(a.global) > 0;
  if (moves && plan.separate()) return execute_separately(comm, plan, a);
  packed_own_blocks(exec, plan, a);  // they need nothing from anybody
  if (!moves) return fence_after(comm, exec);
  const auto [sbuf, rbuf] = workspace_buffers<M>(comm);
  packed_pack(exec, plan, a, sbuf);
  fence_before_transfer(comm, exec);
  if (plan.equal_chunk) comm.all_to_all(sbuf, rbuf, plan.equal_chunk, 1);
  else if (plan.sectioned && comm.caps().peer)
    comm.exchange_runs(sbuf, plan.section_sends, rbuf, plan.section_recvs, 1, [] {});
  else
    comm.all_to_all_v(sbuf, plan.send_counts, plan.send_displs, rbuf, plan.recv_counts, plan.recv_displs, 1,
                      plan.bound);
  packed_unpack(exec, plan, a, rbuf);
  fence_after(comm, exec);
}

// ---------------------------------------------------------------- gather

/// The own block of a packed gather (exact, or through the wire's rounding),
/// and this rank's chunk packed into `sbuf` (when it goes anywhere).
template <class Exec>
void packed_gather_own(const Exec& exec, const PackedGatherPlan& plan, const PackedGatherArgs& a, int rank,
                       unsigned char* sbuf) {
  const std::size_t p = std::size_t(rank);
  const CopyTask own{plan.place[p], contiguous(0, plan.elems[p]), plan.elems[p]};
  std::size_t at = 0;
  for (std::size_t k = 0; k < a.items.size(); ++k) {
    const PackedItem& t = a.items[k];
    if (a.wire != Wire::exact) {
      wire_kernels<Exec>(t).round(exec, a.wire, t.out, t.in, own);
      if (sbuf) wire_kernels<Exec>(t).pack(exec, a.wire, sbuf + at, t.in, contiguous(0, plan.elems[p]), plan.elems[p]);
      at += wire_section_bytes(a.wire, plan.elems[p], t.elem_bytes);
    } else {
      copy_runs(exec, t.out, t.in, t.elem_bytes, std::span(&own, 1));
      if (sbuf) copy_runs(exec, sbuf, t.in, plan.sections[k].pack_unit, plan.sections[k].pack);
    }
  }
}

/// Unpacks the chunk of receive r of plan.peer.recvs from `rbuf`.
template <class Exec>
void packed_gather_unpack_one(const Exec& exec, const PackedGatherPlan& plan, const PackedGatherArgs& a,
                              const unsigned char* rbuf, std::size_t r) {
  const PeerRuns& rr = plan.peer.recvs[r];
  const std::size_t q = std::size_t(rr.peer);
  if (a.wire != Wire::exact) {
    std::size_t at = plan.displs[q];
    for (const PackedItem& t : a.items) {
      wire_kernels<Exec>(t).unpack(exec, a.wire, t.out, plan.place[q], rbuf + at, plan.elems[q]);
      at += wire_section_bytes(a.wire, plan.elems[q], t.elem_bytes);
    }
  } else {
    for (std::size_t k = 0; k < a.items.size(); ++k)
      if (const long x = plan.sections[k].unpack_at[r]; x >= 0)
        copy_runs(exec, a.items[k].out, rbuf, plan.sections[k].unpack_unit,
                  std::span(&plan.sections[k].unpack[std::size_t(x)], 1));
  }
}

/// Execute phase of an agreed packed gather.
template <class M>
void execute_packed_gather(PortOn<M>& comm, const PackedGatherPlan& plan, const PackedGatherArgs& a) {
  const auto exec = comm.exec();
  if (plan.separate()) {
    for (std::size_t t = 0; t < a.items.size(); ++t)
      execute_gather(comm, plan.own[t],
                     GatherArgs{a.items[t].in, a.items[t].out, a.items[t].elem_bytes, a.global, a.d});
    return;
  }
  const bool moves = comm.size() > 1 && product(a.global) > 0;
  const auto [sbuf, rbuf] = moves ? workspace_buffers<M>(comm) : WorkspaceBuffers{};
  packed_gather_own(exec, plan, a, comm.rank(), sbuf);
  if (!moves) return fence_after(comm, exec);
  fence_before_transfer(comm, exec);
  comm.all_gather_v(sbuf, plan.counts[std::size_t(comm.rank())], rbuf, plan.counts, plan.displs, 1);
  for (std::size_t r = 0; r < plan.peer.recvs.size(); ++r) packed_gather_unpack_one(exec, plan, a, rbuf, r);
  fence_after(comm, exec);
}

}  // namespace dsp::detail
