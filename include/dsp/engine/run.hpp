// SPDX-License-Identifier: BSD-3-Clause
// dsp: the one operation every front end runs, blocking; its pieces are
// engine/prepare.hpp, engine/execute.hpp, engine/measure.hpp (Planning::
// measure), and for split-phase calls engine/flight.hpp. What moves (one tensor or a
// batch of up to 16, element types may differ), to which placement (a plan
// of steps, each one collective or none on one mesh axis; a plain
// communicator is the mesh of one axis), on which wire, and completed how:
// blocking (run_operation), or split-phase (start_operation returns a Flight
// that completes later, reporting the last step's blocks as they land).
//
// Generic in the memory space only: communicators are Ports, tensors are
// PackedItems (pointers and element sizes), the plan and the extents are
// values. So every element type, tensor rank, layout, batch size and backend
// runs the same engine code, compiled once per memory space.
//
//   prepare  every step's plan and workspace, the blocks between steps; a
//            local failure is recorded, not thrown;
//   agree    one agreement check on the world communicator, for the whole
//            operation: every rank goes on, or every rank raises;
//   execute  the steps in turn; a batch moves step by step, each step's
//            exchanges of all its tensors posted together (one packed
//            exchange, or each tensor's point-to-point exchange in flight at
//            once); split-phase: the last step is posted and completes in
//            Flight::complete.
#pragma once

#include <dsp/core/agree.hpp>
#include <dsp/core/buffers.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/engine/execute.hpp>
#include <dsp/engine/measure.hpp>
#include <dsp/engine/prepare.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <utility>

namespace dsp::detail {

/// A whole operation, blocking: prepare, agree on the world communicator,
/// the steps. Collective over the group. `sig` and `err` come from the
/// front end (its checks); prepare records the resolved path in `sig`.
template <class M>
void run_operation(const OpGroup<M>& g, const OpArgs& a, Signature& sig, std::string err) {
  ExclusiveUseGroup use(g, a.steps, op_name(sig.op));
  PreparedOp op;
  prepare_operation(op, g, a, sig, err, false);
  if (err.empty()) {
    sig.path = static_cast<std::uint32_t>(op.path);
    try {
      maybe_inject_fault();
      if (op.size > 1) {
        Scratch<M>& s = g.world->resources().template slot<Scratch<M>>();
        watch_kokkos_finalize();
        s.reserve(0, op.scratch_bytes[0]);
        s.reserve(1, op.scratch_bytes[1]);
      }
    } catch (const std::exception& e) {
      sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
      err = failure_text(sig.op, g.world->rank(), e);
    }
  }
  // Under Planning::measure, the path depends on decisions that may differ
  // between ranks until they measure together: the plan word says.
  sig.plan = op.plan;
  if (op.plan != 0) sig.path = 0;
  const bool plans_agree = agree(*g.world, sig, err);
  if (op.size == 0) return execute_identity(g, a);
  // Every rank measures when one lacks a decision or their decisions differ.
  const bool measure = op.plan != 0 && (op.plan == 1 || !plans_agree);
  const Scratch<M>* scratch = op.size > 1 ? g.world->resources().template find<Scratch<M>>() : nullptr;
  std::array<PackedItem, kMaxBatch> items{};
  for (std::size_t t = 0; t < op.size; ++t) {
    step_items(op, a, t, scratch, items);
    const std::span<const PackedItem> its(items.data(), a.items.size());
    if (measure && op.step(t).decidable) measure_step(g, op, a, t, its);
    else execute_step(g, op, a, t, its);
  }
}

/// The signature, the local checks and the items of a call, from its facts.
struct PreparedCall {
  Signature sig;
  std::string err;
  std::array<PackedItem, kMaxBatch> items{};
  std::array<std::size_t, kMaxBatch * kMaxRank> each{};  // a batch of different extents: every tensor's
  OpArgs args;
};
inline void prepare_call(const CallFacts& f, PreparedCall& c) {
  Signature& s = c.sig;
  s.op = static_cast<std::uint32_t>(f.op);
  s.type_hash = f.type_hash;
  s.elem_bytes = f.elem_bytes;
  std::memcpy(s.type, f.type_name, strnlen(f.type_name, sizeof s.type - 1));
  set_extents(s, std::span<const std::size_t>(f.t[0].extents, f.tensor_rank));
  s.mesh_axes = f.mesh_axes;
  for (std::size_t a = 0; a < (f.mesh_axes ? f.mesh_axes : 1); ++a) {
    s.src_layout[a] = f.src_codes[a];
    if (f.mesh_axes) s.mesh_shape[a] = f.mesh_shape[a];
  }
  s.dst_layout[0] = f.dst;
  if (f.dst_codes)
    for (std::size_t a = 0; a < f.axes; ++a) s.dst_layout[a] = f.dst_codes[a];
  set_site(s, f.loc);
  s.arg = f.arg;
  if (f.n > 1) {
    ShapeHash h;
    for (std::size_t k = 0; k < f.n; ++k) h.add(std::span<const std::size_t>(f.t[k].extents, f.tensor_rank));
    s.shapes = h.h;
  }
  s.shapes ^= f.t[0].sizes_hash;
  s.wire = static_cast<std::uint32_t>(f.wire);
  if (f.error) {
    c.err = f.error;
    s.status = static_cast<std::uint32_t>(Status::bad_argument);
  }
  for (std::size_t k = 0; k < f.n && c.err.empty(); ++k) {
    const TensorFacts& t = f.t[k];
    const std::span<const std::size_t> e(t.extents, f.tensor_rank), ye(t.out_extents, f.tensor_rank);
    const bool overlap = ranges_overlap(t.in_range, t.out_range);
    if (!std::equal(e.begin(), e.end(), ye.begin()) || !t.out_same_group || overlap) {
      c.err = output_error(op_name(s.op), f.rank, e, ye, t.out_same_group, overlap, f.n > 1 ? long(k) : -1);
      s.status = static_cast<std::uint32_t>(Status::bad_output);
    }
  }
  if (c.err.empty() && f.n > 1) {
    Status st = Status::ok;
    c.err = batch_error(f, st);
    if (!c.err.empty()) s.status = static_cast<std::uint32_t>(st);
  }
  for (std::size_t k = 0; k < f.n && c.err.empty() && f.wire != Wire::exact; ++k)
    if (!wire_carries(f.wire, f.t[k].kind)) {
      c.err = wire_error(op_name(s.op), f.rank, f.wire, f.t[k].kind, f.n > 1 ? long(k) : -1);
      s.status = static_cast<std::uint32_t>(Status::bad_argument);
    }
  for (std::size_t k = 0; k < f.n; ++k)
    c.items[k] = PackedItem{f.t[k].in, f.t[k].out, f.t[k].elem_bytes, f.t[k].kind, f.t[k].wire};
  c.args = OpArgs{std::span<const PackedItem>(c.items.data(), f.n),
                  std::span<const std::size_t>(f.t[0].extents, f.tensor_rank),
                  std::span<const MeshStep>(f.steps, f.n_steps),
                  std::span<const long>(f.from, f.axes),
                  f.wire,
                  f.rtype,
                  f.recut,
                  f.sizes,
                  {}};
  const std::size_t r = f.tensor_rank;
  bool mixed = false;
  for (std::size_t k = 1; k < f.n; ++k)
    mixed = mixed || !std::equal(f.t[k].extents, f.t[k].extents + r, f.t[0].extents);
  if (mixed) {
    for (std::size_t k = 0; k < f.n; ++k) std::copy(f.t[k].extents, f.t[k].extents + r, c.each.begin() + k * r);
    c.args.each = std::span<const std::size_t>(c.each.data(), f.n * r);
  }
}

template <class M>
void run_call(const OpGroup<M>& g, const CallFacts& f) {
  PreparedCall c;
  prepare_call(f, c);
  run_operation(g, c.args, c.sig, std::move(c.err));
}

}  // namespace dsp::detail
