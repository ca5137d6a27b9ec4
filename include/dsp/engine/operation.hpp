// SPDX-License-Identifier: BSD-3-Clause
// dsp: the one operation every front end runs. What moves (one tensor or a
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

#include <dsp/comm/port.hpp>
#include <dsp/engine/agree.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/engine/engine.hpp>
#include <dsp/engine/packed.hpp>
#include <dsp/engine/workspace.hpp>
#include <dsp/kernels/convert.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/partition.hpp>
#include <dsp/plan/packed.hpp>
#include <dsp/plan/redistribute.hpp>
#include <dsp/wisdom.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dsp::detail {

/// The extents of this rank's box under placement `codes` (the nested rule).
inline std::array<std::size_t, kMaxRank> box_count(std::span<const std::size_t> global, std::span<const long> codes,
                                                   std::span<const int> shape, std::span<const int> coords) {
  std::array<std::size_t, kMaxRank> c{};
  for (std::size_t d = 0; d < global.size() && d < kMaxRank; ++d) c[d] = global[d];
  for (std::size_t a = 0; a < codes.size(); ++a) {
    if (codes[a] < 0) continue;
    const std::size_t d = std::size_t(codes[a]);
    c[d] = Partition{c[d], std::size_t(shape[a])}.count(std::size_t(coords[a]));
  }
  return c;
}

constexpr ReduceOp reduce_op_of_code(long code) {
  return code == kPartialMax ? ReduceOp::max : code == kPartialMin ? ReduceOp::min : ReduceOp::sum;
}

/// Two grow-only buffers for the blocks between the steps of a plan, used in
/// turn. The blocking operation keeps one pair in the world communicator's
/// resources (a steady loop allocates nothing); a split-phase operation takes
/// a private set (FlightBuffers) that lives until it completes.
template <class M>
struct Scratch {
  using Buffer = Kokkos::View<unsigned char*, M>;
  Buffer buf[2];
  void reserve(std::size_t k, std::size_t bytes) {
    if (buf[k].extent(0) >= bytes) return;
    buf[k] = Buffer();
    buf[k] = Buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("dsp::scratch")), bytes);
  }
};

/// The buffers of one split-phase operation in flight: the blocks between
/// steps, and the packed chunks of its last step. Other collectives may run
/// on the same communicators before it completes, so it cannot use their
/// workspaces. Recycled through the world communicator's FlightPool.
template <class M>
struct FlightBuffers {
  Scratch<M> steps;
  Scratch<M> chunks;  // [0] send, [1] receive
};
template <class M>
class FlightPool {
 public:
  std::shared_ptr<FlightBuffers<M>> take() {
    std::lock_guard<std::mutex> lock(m_);
    for (auto& b : idle_)
      if (b.use_count() == 1) return b;
    auto b = std::make_shared<FlightBuffers<M>>();
    if (idle_.size() < 4) idle_.push_back(b);
    return b;
  }

 private:
  std::mutex m_;
  std::vector<std::shared_ptr<FlightBuffers<M>>> idle_;
};

/// Everything one step needs at execution, fixed in the prepare phase.
struct PreparedStep {
  MeshStep step;
  std::array<std::size_t, kMaxRank> group{};  // the block the ranks along the step's axis share
  std::shared_ptr<const SwitchPlan> single;   // a switch of one exact tensor
  std::shared_ptr<const PackedPlan> packed;   // a switch of a batch, or on a wire
  GatherPlan gather;                          // a gather of one exact tensor
  std::shared_ptr<const PackedGatherPlan> packed_gather;
  ReduceScatterPlan reduce;
  std::array<std::size_t, kMaxRank> out{};  // this rank's block after the step
  std::size_t out_elems = 0;
  bool decidable = false;  // Planning::measure decides this step (key: its decision's key)
  DecisionKey key{};
};

/// An operation after its prepare phase.
struct PreparedOp {
  // Only the plan's steps are constructed, in raw storage: a PreparedStep is
  // a few hundred bytes of plans, and a blocking call should neither build
  // nor clear sixteen of them.
  PreparedOp() = default;
  PreparedOp(const PreparedOp&) = delete;
  PreparedOp& operator=(const PreparedOp&) = delete;
  ~PreparedOp() {
    for (std::size_t t = built_; t-- > 0;) step(t).~PreparedStep();
  }
  /// Constructs step t (steps are built in order, from 0).
  PreparedStep& build(std::size_t t) {
    PreparedStep* p = new (slot_[t]) PreparedStep();
    built_ = t + 1;
    return *p;
  }
  PreparedStep& step(std::size_t t) { return *std::launder(reinterpret_cast<PreparedStep*>(slot_[t])); }
  const PreparedStep& step(std::size_t t) const {
    return *std::launder(reinterpret_cast<const PreparedStep*>(slot_[t]));
  }
  std::size_t size = 0;
  std::size_t rank = 0;  // tensor rank
  std::size_t scratch_bytes[2] = {0, 0};
  bool posted_last = false;  // split-phase: the last step goes point to point, completed later
  Path path = Path::none;    // what a one-step plan on a plain communicator resolved
  // Planning::measure: 0 when nothing is decided by measurement; 1 when a
  // step has no decision yet; else a hash (>= 2) of this rank's decisions.
  std::uint32_t plan = 0;

 private:
  alignas(PreparedStep) unsigned char slot_[kMaxSteps][sizeof(PreparedStep)];
  std::size_t built_ = 0;
};

inline std::size_t align_up(std::size_t b, std::size_t a) { return (b + a - 1) / a * a; }

/// A posted (split-phase) exchange of one exact tensor goes straight from
/// and into the tensors' runs, one message per run, only when every peer's
/// block is at most this many runs; otherwise it is packed into one section
/// per peer, as a batch is. Point-to-point messages of short runs cost a
/// request each (a [32,128,128] complex switch chunk on 2 ranks: 2,048
/// messages of 1 KiB per peer, 7x the time of the blocking switch).
inline constexpr std::size_t kMaxPostedRuns = 16;

/// An upper bound, the same on every rank of the step's axis, of the runs of
/// one peer's block in a posted exchange over group extents `ge`: the dims
/// before `last` (the later of the two dims a switch touches, or a gather's
/// dim), `sharded` (the other one, or none) at its largest share.
inline std::size_t posted_runs_bound(std::span<const std::size_t> ge, std::size_t last, std::size_t sharded,
                                     int parts) {
  std::size_t runs = 1;
  for (std::size_t d = 0; d < last && d < ge.size(); ++d) {
    const std::size_t e = d == sharded ? (ge[d] + std::size_t(parts) - 1) / std::size_t(parts) : ge[d];
    if (e == 0) return 0;
    if (runs > kMaxPostedRuns) continue;  // stays above the limit (until an empty dim), without overflow
    runs *= e;
  }
  return runs;
}

/// The prepare phase. `split_phase`: plan the last step for posting when the
/// backend can (point to point, packed chunks in private buffers).
template <class M>
void prepare_operation(PreparedOp& op, const OpGroup<M>& g, const OpArgs& a, Signature& sig, std::string& err,
                       bool split_phase) {
  op.size = a.steps.size();
  op.rank = a.global.size();
  const SwitchAlgorithm setting = switch_algorithm();
  const std::size_t n_items = a.items.size();
  const bool exact_one = n_items == 1 && a.wire == Wire::exact;
  std::array<long, kMaxAxes> state{};
  for (std::size_t x = 0; x < g.axes; ++x) state[x] = a.from[x];
  const std::span<const int> shape(g.shape.data(), g.axes), coords(g.coords.data(), g.axes);
  // Planning::measure decides what the switch algorithm setting leaves open,
  // for blocking operations (a split-phase one posts its last step point to
  // point by construction, and keeps the heuristic for the steps before).
  const bool decide = !split_phase && setting == SwitchAlgorithm::automatic && planning() == Planning::measure;
  std::uint64_t decisions = fnv1a("plan");
  bool undecided = false;
  if (decide && err.empty()) {
    if (const std::string& why = wisdom_env_error(); !why.empty()) {
      sig.status = static_cast<std::uint32_t>(Status::bad_setting);
      err = std::string(op_name(sig.op)) + ": " + why;
    }
  }
  for (std::size_t t = 0; t < op.size && err.empty(); ++t) {
    PreparedStep& p = op.build(t);
    p.step = a.steps[t];
    const std::size_t ax = std::size_t(p.step.axis);
    PortOn<M>& port = *g.axis[ax];
    {
      std::array<long, kMaxAxes> undone = state;
      undone[ax] = -1;
      p.group = box_count(a.global, std::span<const long>(undone.data(), g.axes), shape, coords);
    }
    state[ax] = p.step.to;
    p.out = box_count(a.global, std::span<const long>(state.data(), g.axes), shape, coords);
    p.out_elems = product(std::span<const std::size_t>(p.out.data(), op.rank));
    const std::span<const std::size_t> ge(p.group.data(), op.rank);
    const bool last = t + 1 == op.size;
    const bool post = split_phase && last && port.caps().async && port.size() > 1 && product(ge) > 0;
    SwitchAlgorithm step_setting = setting;
    if (decide && port.size() > 1 &&
        ((p.step.kind == StepKind::switch_dims && p.step.from != p.step.to) || p.step.kind == StepKind::gather)) {
      std::array<std::size_t, kMaxBatch> elems{};
      for (std::size_t k = 0; k < n_items; ++k) elems[k] = a.items[k].elem_bytes;
      const bool sw = p.step.kind == StepKind::switch_dims;
      const DecisionKind kind = sw ? (exact_one ? DecisionKind::switch_one : DecisionKind::switch_batch)
                                   : (exact_one ? DecisionKind::gather_one : DecisionKind::gather_batch);
      const Capabilities caps = capabilities_of(port);
      p.decidable = true;
      p.key = decision_key(kind, g.world->size(), port.size(), port.backend(), ge, std::size_t(p.step.from),
                           std::size_t(sw ? p.step.to : p.step.from), a.wire,
                           std::span<const std::size_t>(elems.data(), n_items),
                           std::size_t(caps.peer) | std::size_t(caps.typed) << 1);
      if (const auto d = find_decision(p.key)) step_setting = *d;
      else undecided = true;
      decisions = fnv1a(std::string_view(to_string(step_setting)), decisions ^ t);
    }
    prepare(port.rank(), sig, err, [&] {
      switch (p.step.kind) {
        case StepKind::switch_dims: {
          const std::size_t i = std::size_t(p.step.from), j = std::size_t(p.step.to);
          const bool single = exact_one && (!post || posted_runs_bound(ge, std::max(i, j), std::min(i, j),
                                                                       port.size()) <= kMaxPostedRuns);
          if (single) {
            p.single = post ? cached_switch_plan(ge, i, j, port.rank(), port.size(), a.items[0].elem_bytes,
                                                 capabilities_of(port), SwitchAlgorithm::pairwise)
                            : plan_and_reserve_switch<M>(
                                  port, SwitchArgs{nullptr, nullptr, a.items[0].elem_bytes, ge, i, j}, step_setting);
          } else {
            const PackedArgs pa{a.items, ge, i, j, a.wire};
            // Posted chunks always pack (setting alltoallv: never one plan per tensor).
            p.packed = post ? cached_packed_plan(pa, port.rank(), port.size(), capabilities_of(port),
                                                 SwitchAlgorithm::alltoallv)
                            : plan_and_reserve_packed<M>(port, pa, step_setting);
          }
          op.posted_last = post;
          break;
        }
        case StepKind::gather: {
          const std::size_t d = std::size_t(p.step.from);
          const bool single = exact_one && (!post || posted_runs_bound(ge, d, d, 1) <= kMaxPostedRuns);
          if (single) {
            p.gather = post ? GatherPlan(plan_peer_gather(ge, d, port.rank(), port.size()))
                            : plan_and_reserve_gather<M>(
                                  port, GatherArgs{nullptr, nullptr, a.items[0].elem_bytes, ge, d}, step_setting);
          } else {
            const PackedGatherArgs pa{a.items, ge, d, a.wire, post};
            p.packed_gather =
                post ? cached_packed_gather_plan(pa, port.rank(), port.size(), capabilities_of(port), setting)
                     : plan_and_reserve_packed_gather<M>(port, pa, step_setting);
          }
          op.posted_last = post;
          break;
        }
        case StepKind::reduce_scatter:
          p.reduce =
              plan_and_reserve_reduce<M>(port, ReduceArgs{nullptr, nullptr, ge, a.rtype, ReduceOp::sum, p.step.to});
          break;
        default: break;
      }
      return 0;
    });
  }
  if (!err.empty()) return;
  if (decide) {
    bool any = false;
    for (std::size_t t = 0; t < op.size; ++t) any = any || op.step(t).decidable;
    if (any) op.plan = undecided ? 1u : std::uint32_t(decisions % 0xfffffff0u) + 2u;
  }
  // One-step plans on a plain communicator report the path they resolved
  // (the primitives' agreement compares it); a mesh compares the setting.
  if (g.axes == 1 && g.world == g.axis[0]) {
    if (op.size == 0) op.path = Path::identity;
    else if (op.size == 1) {
      const PreparedStep& p = op.step(0);
      if (p.single) op.path = op.posted_last ? Path::pairwise : path_of(*p.single);
      else if (p.packed)
        op.path = op.posted_last ? Path::sections
                                 : packed_path(PackedArgs{a.items, std::span(p.group.data(), op.rank),
                                                          std::size_t(p.step.from), std::size_t(p.step.to), a.wire},
                                               *p.packed);
      else if (p.packed_gather) op.path = p.packed_gather->separate() ? Path::per_tensor : Path::allgather;
      else if (p.step.kind == StepKind::gather) op.path = p.gather.index() == 0 ? Path::allgather : Path::peer_gather;
    }
  }
  // The blocks between steps: each tensor's block at an aligned offset.
  std::size_t most[2] = {0, 0};
  for (std::size_t t = 0; t + 1 < op.size; ++t) {
    std::size_t off = 0;
    for (std::size_t k = 0; k < n_items; ++k) off = align_up(off, 64) + op.step(t).out_elems * a.items[k].elem_bytes;
    most[t % 2] = std::max(most[t % 2], off);
  }
  op.scratch_bytes[0] = most[0], op.scratch_bytes[1] = most[1];
  return;
}

/// The in/out pointers of every tensor for step t.
template <class M>
void step_items(const PreparedOp& op, const OpArgs& a, std::size_t t, const Scratch<M>* scratch,
                std::array<PackedItem, kMaxBatch>& out) {
  std::size_t in_off = 0, out_off = 0;
  for (std::size_t k = 0; k < a.items.size(); ++k) {
    in_off = align_up(in_off, 64), out_off = align_up(out_off, 64);
    out[k].elem_bytes = a.items[k].elem_bytes;
    out[k].kind = a.items[k].kind;
    out[k].wire = a.items[k].wire;
    out[k].in = t == 0 ? a.items[k].in : static_cast<const void*>(scratch->buf[(t - 1) % 2].data() + in_off);
    out[k].out = t + 1 == op.size ? a.items[k].out : static_cast<void*>(scratch->buf[t % 2].data() + out_off);
    if (t > 0) in_off += op.step(t - 1).out_elems * a.items[k].elem_bytes;
    out_off += op.step(t).out_elems * a.items[k].elem_bytes;
  }
}

/// Runs a prepared step (blocking) on the items' in/out pointers; `rank`:
/// the tensors' rank.
template <class M>
void execute_prepared(const OpGroup<M>& g, const PreparedStep& p, std::size_t rank, const OpArgs& a,
                      std::span<const PackedItem> items) {
  const std::size_t ax = std::size_t(p.step.axis);
  PortOn<M>& port = *g.axis[ax];
  const std::span<const std::size_t> ge(p.group.data(), rank);
  switch (p.step.kind) {
    case StepKind::switch_dims: {
      const std::size_t i = std::size_t(p.step.from), j = std::size_t(p.step.to);
      if (p.single)
        execute_switch(port, *p.single, SwitchArgs{items[0].in, items[0].out, items[0].elem_bytes, ge, i, j});
      else execute_packed(port, *p.packed, PackedArgs{items, ge, i, j, a.wire});
      break;
    }
    case StepKind::gather: {
      const std::size_t d = std::size_t(p.step.from);
      if (p.packed_gather) execute_packed_gather(port, *p.packed_gather, PackedGatherArgs{items, ge, d, a.wire});
      else execute_gather(port, p.gather, GatherArgs{items[0].in, items[0].out, items[0].elem_bytes, ge, d});
      break;
    }
    case StepKind::split: {
      const CopyTask task = plan_split(ge, std::size_t(p.step.to), g.coords[ax], g.shape[ax]);
      for (const PackedItem& it : items) execute_local_copy(port, task, it.in, it.out, it.elem_bytes);
      break;
    }
    case StepKind::all_reduce:
    case StepKind::reduce_scatter:
      for (const PackedItem& it : items)
        execute_reduce(port, p.reduce,
                       ReduceArgs{it.in, it.out, ge, a.rtype, reduce_op_of_code(p.step.from),
                                  p.step.kind == StepKind::all_reduce ? -1 : p.step.to});
      break;
    case StepKind::to_partial:
      for (const PackedItem& it : items)
        execute_to_partial(port, it.in, it.out, product(ge) * it.elem_bytes,
                           g.coords[ax] == 0 || reduce_op_of_code(p.step.to) != ReduceOp::sum);
      break;
  }
}

/// Runs step t of a prepared operation (blocking).
template <class M>
void execute_step(const OpGroup<M>& g, const PreparedOp& op, const OpArgs& a, std::size_t t,
                  std::span<const PackedItem> items) {
  execute_prepared(g, op.step(t), op.rank, a, items);
}

/// Each of `v` replaced by its largest value over the ranks (on the
/// world's control channel): equal on every rank afterwards.
inline void max_over_ranks(Port& world, std::span<double> v) {
  thread_local std::vector<double> all;
  all.assign(std::size_t(world.size()) * v.size(), 0.0);
  world.control_all_gather(v.data(), all.data(), v.size_bytes());
  for (std::size_t r = 0; r < std::size_t(world.size()); ++r)
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = std::max(v[k], all[r * v.size() + k]);
}

/// Which plan a candidate resolved to (candidates with the same value are
/// the same plan and are timed once).
inline std::uint32_t plan_identity_of(const PreparedStep& p, const OpArgs& a, std::size_t rank) {
  if (p.single) return 16 + std::uint32_t(p.single->index());
  if (p.packed)
    return 32 + std::uint32_t(packed_path(PackedArgs{a.items, std::span(p.group.data(), rank), std::size_t(p.step.from),
                                                     std::size_t(p.step.to), a.wire},
                                          *p.packed));
  if (p.packed_gather)
    return p.packed_gather->separate() ? 64 + std::uint32_t(p.packed_gather->own.front().index()) : 80;
  return 96 + std::uint32_t(p.gather.index());
}

/// Planning::measure, step t of a blocking operation that every rank agreed
/// to measure. Each candidate setting is planned; it is dropped everywhere
/// when some rank cannot plan it, or when it repeats an earlier candidate's
/// plan on every rank. The rest run into the step's real output: each twice
/// to warm up (a candidate over 4x the fastest's second run is dropped),
/// then in 3 to 9 rounds (fewer for slow steps), every round
/// running each candidate once, starting with a different one (a machine
/// that changes speed moves them all alike). A candidate's time is its
/// median on each rank, then the largest over the ranks; the fastest is
/// kept for the call (a runner-up within 5% runs off against it first) and
/// recorded as this rank's decision for the step's
/// key. Every candidate writes the same output: the last run leaves it right. All
/// ranks take the same branches: every quantity they branch on went through
/// the world's control channel.
template <class M>
void measure_step(const OpGroup<M>& g, PreparedOp& op, const OpArgs& a, std::size_t t,
                  std::span<const PackedItem> items) {
  using clock = std::chrono::steady_clock;
  static constexpr SwitchAlgorithm kSwitch[] = {SwitchAlgorithm::automatic, SwitchAlgorithm::alltoall,
                                                SwitchAlgorithm::alltoallv, SwitchAlgorithm::pairwise,
                                                SwitchAlgorithm::datatypes};
  static constexpr SwitchAlgorithm kGather[] = {SwitchAlgorithm::automatic, SwitchAlgorithm::alltoallv,
                                                SwitchAlgorithm::pairwise};
  constexpr std::size_t kMost = 5;
  PreparedStep& p = op.step(t);
  PortOn<M>& port = *g.axis[std::size_t(p.step.axis)];
  Port& world = *g.world;
  const bool gather = p.step.kind == StepKind::gather;
  const std::span<const SwitchAlgorithm> cands =
      gather ? std::span<const SwitchAlgorithm>(kGather) : std::span<const SwitchAlgorithm>(kSwitch);
  const std::size_t nc = cands.size();
  const bool exact_one = a.items.size() == 1 && a.wire == Wire::exact;
  const std::span<const std::size_t> ge(p.group.data(), op.rank);
  // Plan every candidate; 0: runs, 1: repeats an earlier plan here, 2: cannot be planned here.
  std::vector<PreparedStep> plans(nc, p);
  std::array<double, kMost> verdict{};
  std::array<std::uint32_t, kMost> ids{};
  for (std::size_t c = 0; c < nc; ++c) {
    PreparedStep& q = plans[c];
    try {
      const SwitchAlgorithm s = cands[c];
      if (gather) {
        const std::size_t d = std::size_t(p.step.from);
        if (exact_one)
          q.gather = plan_and_reserve_gather<M>(port, GatherArgs{nullptr, nullptr, a.items[0].elem_bytes, ge, d}, s);
        else
          q.packed_gather = plan_and_reserve_packed_gather<M>(port, PackedGatherArgs{a.items, ge, d, a.wire, false}, s);
      } else {
        const std::size_t i = std::size_t(p.step.from), j = std::size_t(p.step.to);
        if (exact_one)
          q.single = plan_and_reserve_switch<M>(port, SwitchArgs{nullptr, nullptr, a.items[0].elem_bytes, ge, i, j}, s);
        else q.packed = plan_and_reserve_packed<M>(port, PackedArgs{a.items, ge, i, j, a.wire}, s);
      }
      ids[c] = plan_identity_of(q, a, op.rank);
      verdict[c] = std::find(ids.begin(), ids.begin() + c, ids[c]) != ids.begin() + c ? 1.0 : 0.0;
    } catch (const std::exception&) {
      verdict[c] = 2.0;
    }
  }
  // A candidate repeats an earlier one only where it does on every rank: take
  // the smallest "repeats" (1 - max of 1 - v) but the largest "cannot" (2).
  std::array<double, 2 * kMost> v{};
  for (std::size_t c = 0; c < nc; ++c)
    v[c] = verdict[c] == 2.0 ? 1.0 : 0.0, v[kMost + c] = verdict[c] == 0.0 ? 1.0 : 0.0;
  max_over_ranks(world, std::span<double>(v));
  std::array<bool, kMost> run{};
  for (std::size_t c = 0; c < nc; ++c) run[c] = v[c] == 0.0 && v[kMost + c] == 1.0;
  // Every timed run starts with the ranks together (one small exchange on
  // the control channel), so one candidate's skew does not count against the next.
  auto once = [&](std::size_t c) {
    std::array<double, 1> sync{0.0};
    max_over_ranks(world, std::span<double>(sync));
    const auto t0 = clock::now();
    execute_prepared(g, plans[c], op.rank, a, items);
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Warm-up: two runs each (the first may build datatypes, touch pages). A
  // candidate whose second run is over 4x the fastest's is dropped: it cannot
  // win, and thousands of small messages slow what runs after them.
  std::array<double, kMost> warm{};
  for (std::size_t c = 0; c < nc; ++c)
    if (run[c]) once(c), warm[c] = once(c);
  max_over_ranks(world, std::span<double>(warm));
  double fastest = std::numeric_limits<double>::infinity(), total = 0;
  for (std::size_t c = 0; c < nc; ++c)
    if (run[c]) fastest = std::min(fastest, warm[c]);
  std::array<bool, kMost> slow{};
  for (std::size_t c = 0; c < nc; ++c) {
    slow[c] = run[c] && warm[c] > 4 * fastest;
    if (run[c] && !slow[c]) total += warm[c];
  }
  const int rounds = total < 2e-3 ? 9 : total < 2e-2 ? 5 : 3;
  for (std::size_t c = 0; c < nc; ++c) run[c] = run[c] && !slow[c];
  std::array<std::vector<double>, kMost> times;
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < nc; ++k)
      if (const std::size_t c = (k + std::size_t(r)) % nc; run[c]) times[c].push_back(once(c));
  std::array<double, kMost> med{};
  for (std::size_t c = 0; c < nc; ++c)
    if (run[c]) {
      std::sort(times[c].begin(), times[c].end());
      med[c] = times[c][times[c].size() / 2];
    }
  max_over_ranks(world, std::span<double>(med));
  std::size_t best = nc;
  std::string measured;
  for (std::size_t c = 0; c < nc; ++c) {
    char us[32] = "-";
    if (run[c]) std::snprintf(us, sizeof us, "%.1f", med[c] * 1e6);
    else if (slow[c]) std::snprintf(us, sizeof us, ">%.1f", warm[c] * 1e6);
    measured += std::string(c ? "," : "") + to_string(cands[c]) + ":" + us;
    if (run[c] && (best == nc || med[c] < med[best])) best = c;
  }
  if (best == nc) return execute_prepared(g, p, op.rank, a, items);  // nothing could run: keep the heuristic
  // A near tie (the runner-up within 5%): those two again, alternating, twice
  // as many rounds, and the faster median of those decides.
  std::size_t second = nc;
  for (std::size_t c = 0; c < nc; ++c)
    if (run[c] && c != best && (second == nc || med[c] < med[second])) second = c;
  if (second != nc && med[second] < 1.05 * med[best]) {
    std::array<std::vector<double>, 2> tt;
    const std::size_t pair[2] = {best, second};
    for (int r = 0; r < 2 * rounds; ++r)
      for (std::size_t k = 0; k < 2; ++k) tt[(k + std::size_t(r)) % 2].push_back(once(pair[(k + std::size_t(r)) % 2]));
    std::array<double, 2> m2{};
    for (std::size_t k = 0; k < 2; ++k) {
      std::sort(tt[k].begin(), tt[k].end());
      m2[k] = tt[k][tt[k].size() / 2];
    }
    max_over_ranks(world, std::span<double>(m2));
    if (m2[1] < m2[0]) best = second;
    measured += ";tie:" + std::string(to_string(cands[pair[0]])) + "," + to_string(cands[pair[1]]) + "->" +
                to_string(cands[best]);
  }
  p = std::move(plans[best]);
  record_decision(p.key, Decision{cands[best], backend_text(port.backend()), measured});
}

/// The identity plan (no step): each tensor's block copied.
template <class M>
void execute_identity(const OpGroup<M>& g, const OpArgs& a) {
  const std::span<const int> shape(g.shape.data(), g.axes), coords(g.coords.data(), g.axes);
  const auto box = box_count(a.global, a.from, shape, coords);
  const std::size_t n = product(std::span<const std::size_t>(box.data(), a.global.size()));
  const auto exec = g.world->exec();
  const CopyTask t{contiguous(0, n), contiguous(0, n), n};
  for (const PackedItem& it : a.items) {
    if (a.wire != Wire::exact) wire_kernels<typename M::execution_space>(it).round(exec, a.wire, it.out, it.in, t);
    else copy_runs(exec, it.out, it.in, it.elem_bytes, std::span(&t, 1));
  }
  fence_after(*g.world, exec);
}

/// One collective at a time on every communicator an operation uses: the
/// world's and each distinct axis communicator's in-use flags.
class ExclusiveUseGroup {
 public:
  template <class M>
  ExclusiveUseGroup(const OpGroup<M>& g, std::span<const MeshStep> steps, const char* op) {
    add(*g.world, op);
    for (const MeshStep& s : steps)
      if (communicates(s.kind)) add(*g.axis[std::size_t(s.axis)], op);
  }

 private:
  void add(const Port& p, const char* op) {
    for (std::size_t k = 0; k < n_; ++k)
      if (held_[k] == &p.resources()) return;
    use_[n_].emplace(p, op);
    held_[n_++] = &p.resources();
  }
  std::optional<ExclusiveUse> use_[kMaxAxes + 1];
  const CommResources* held_[kMaxAxes + 1] = {};
  std::size_t n_ = 0;
};

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

// ---------------------------------------------------------------- calls from facts

/// The signature, the local checks and the items of a call, from its facts.
struct PreparedCall {
  Signature sig;
  std::string err;
  std::array<PackedItem, kMaxBatch> items{};
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
  s.wire = static_cast<std::uint32_t>(f.wire);
  const std::span<const std::size_t> xe(f.t[0].extents, f.tensor_rank);
  for (std::size_t k = 0; k < f.n && c.err.empty(); ++k) {
    const TensorFacts& t = f.t[k];
    const std::span<const std::size_t> e(t.extents, f.tensor_rank), ye(t.out_extents, f.tensor_rank);
    const bool overlap = ranges_overlap(t.in_range, t.out_range);
    if (!std::equal(e.begin(), e.end(), ye.begin()) || !t.out_same_group || overlap) {
      c.err = output_error(op_name(s.op), f.rank, e, ye, t.out_same_group, overlap, f.n > 1 ? long(k) : -1);
      s.status = static_cast<std::uint32_t>(Status::bad_output);
    }
  }
  (void)xe;
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
                  f.rtype};
}

template <class M>
void run_call(const OpGroup<M>& g, const CallFacts& f) {
  PreparedCall c;
  prepare_call(f, c);
  run_operation(g, c.args, c.sig, std::move(c.err));
}

// ---------------------------------------------------------------- split-phase

/// What a Flight holds: what the messages need (the ports, through `keep`;
/// the plan; private buffers), and this rank's failure.
template <class M>
struct FlightState {
  OpGroup<M> g;
  std::shared_ptr<void> keep;
  Signature sig;
  PreparedOp op;
  std::vector<PackedItem> items;
  std::vector<std::size_t> global;
  std::array<long, kMaxAxes> from{};
  Wire wire = Wire::exact;
  std::array<PackedItem, kMaxBatch> last_items{};  // the last step's in/out pointers
  std::shared_ptr<FlightBuffers<M>> buffers;
  std::unique_ptr<PortPending> pending;
  bool landed = false;    // test() saw every message complete (complete() still unpacks and reports)
  bool finished = false;  // nothing left: complete() ran, or the operation ran at start
  std::string error;
  std::exception_ptr thrown;

  /// Records the exception being handled (any type) as this rank's failure,
  /// the first one only.
  void fail_current() {
    if (!error.empty()) return;
    thrown = std::current_exception();
    try {
      throw;
    } catch (const std::exception& e) {
      error = failure_text(sig.op, g.world->rank(), e);
    } catch (...) {
      error = std::string(op_name(sig.op)) + " (rank " + std::to_string(g.world->rank()) +
              "): a block function threw an exception not derived from std::exception";
    }
  }

  const PreparedStep& last() const { return op.step(op.size - 1); }
  std::size_t last_axis() const { return op.size ? std::size_t(last().step.axis) : 0; }
  PortOn<M>& last_port() const { return *g.axis[last_axis()]; }
  /// Whether the output arrives block by block: the last step is a switch or
  /// a gather (else the whole output is this rank's one block).
  bool blockwise() const {
    return op.size && (last().step.kind == StepKind::switch_dims || last().step.kind == StepKind::gather);
  }
  int axis_rank() const { return blockwise() ? g.coords[last_axis()] : 0; }
  int axis_size() const { return blockwise() ? g.shape[last_axis()] : 1; }
  std::size_t block_dim() const { return blockwise() ? std::size_t(last().step.from) : 0; }
  std::array<std::size_t, kMaxRank> out_box() const {
    if (op.size) return last().out;
    return box_count(global, std::span<const long>(from.data(), g.axes), std::span<const int>(g.shape.data(), g.axes),
                     std::span<const int>(g.coords.data(), g.axes));
  }
  /// The world rank of the rank at coordinate q of the last step's axis.
  int world_rank(int q) const {
    if (!blockwise()) return g.world->rank();
    int r = 0;
    for (std::size_t x = 0; x < g.axes; ++x) r = r * g.shape[x] + (x == last_axis() ? q : g.coords[x]);
    return r;
  }
  /// The range along block_dim() of the block from axis rank q.
  std::pair<std::size_t, std::size_t> range_of(int q) const {
    if (!blockwise()) return {0, out_box()[0]};
    const Partition p{last().group[block_dim()], std::size_t(axis_size())};
    return {p.offset(std::size_t(q)), p.count(std::size_t(q))};
  }
  std::size_t block_elems(std::size_t count) const {
    std::array<std::size_t, kMaxRank> e = out_box();
    e[block_dim()] = count;
    return product(std::span<const std::size_t>(e.data(), global.size()));
  }
  /// The receive (of the plan's peer list) behind posted message k.
  std::size_t recv_of(std::size_t k) const {
    const PreparedStep& p = last();
    const std::vector<long>* m = p.packed          ? &p.packed->message_of
                                 : p.packed_gather ? &p.packed_gather->message_of
                                                   : nullptr;
    if (!m) return k;
    for (std::size_t r = 0; r < m->size(); ++r)
      if ((*m)[r] == long(k)) return r;
    return k;
  }
  /// Whether receive r of the plan's peer list had a message (empty ones have none).
  bool message_landed(std::size_t r) const {
    const PreparedStep& p = last();
    if (p.packed) return p.packed->message_of[r] >= 0;
    if (p.packed_gather) return p.packed_gather->message_of[r] >= 0;
    return true;
  }
  int axis_peer_of(std::size_t r) const {
    const PreparedStep& p = last();
    if (p.single) return std::get<PeerPlan>(*p.single).recvs[r].peer;
    if (p.packed) return p.packed->peer.recvs[r].peer;
    if (p.packed_gather) return p.packed_gather->peer.recvs[r].peer;
    return std::get<PeerPlan>(p.gather).recvs[r].peer;
  }
  /// Unpacks receive r where it landed in a buffer; true when it did.
  template <class Exec>
  bool unpack(const Exec& exec, std::size_t r) {
    const PreparedStep& p = last();
    const std::span<const PackedItem> its(last_items.data(), items.size());
    const std::span<const std::size_t> ge(p.group.data(), op.rank);
    if (p.packed)
      packed_unpack_one(exec, *p.packed, PackedArgs{its, ge, std::size_t(p.step.from), std::size_t(p.step.to), wire},
                        buffers->chunks.buf[1].data(), r);
    else if (p.packed_gather)
      packed_gather_unpack_one(exec, *p.packed_gather, PackedGatherArgs{its, ge, std::size_t(p.step.from), wire},
                               buffers->chunks.buf[1].data(), r);
    return p.packed || p.packed_gather;  // single tensors land in place
  }
};

template <class M>
Flight<M>::Flight(std::unique_ptr<FlightState<M>> s) : s_(std::move(s)) {}
template <class M>
Flight<M>::~Flight() = default;
template <class M>
bool Flight<M>::finished() const noexcept {
  return s_->finished || !s_->pending;
}

template <class M>
bool Flight<M>::test() {
  FlightState<M>& s = *s_;
  if (s.pending && !s.landed && !s.finished) {
    try {
      if (s.last_port().test_runs(*s.pending)) s.landed = true;
    } catch (...) {
      s.fail_current();
    }
  }
  return s.finished || s.landed || !s.pending || !s.error.empty();
}

template <class M>
void Flight<M>::complete(Arrived arrived, FunctionRef<void()> started) {
  FlightState<M>& s = *s_;
  ExclusiveUse use(s.last_port(), op_name(s.sig.op));
  started();
  const auto exec = s.last_port().exec();
  auto report = [&](int axis_peer, std::size_t off, std::size_t count) {
    if (!s.error.empty() || count == 0 || s.block_elems(count) == 0) return;
    try {
      arrived(s.world_rank(axis_peer), off, count);
    } catch (...) {
      s.fail_current();
    }
  };
  {
    const auto [off, count] = s.range_of(s.axis_rank());
    report(s.axis_rank(), off, count);
  }
  if (s.pending) {
    auto landed = [&](std::size_t r) {
      if (s.unpack(exec, r)) exec.fence();  // the block function may read the block on the host
      const int q = s.axis_peer_of(r);
      const auto [off, count] = s.range_of(q);
      report(q, off, count);
    };
    try {
      if (!s.landed) {
        s.last_port().wait_runs(*s.pending, [&](std::size_t k) { landed(s.recv_of(k)); });
      } else {  // test() saw every message land: unpack and report them all now
        const std::size_t n = s.last().single          ? std::get<PeerPlan>(*s.last().single).recvs.size()
                              : s.last().packed        ? s.last().packed->peer.recvs.size()
                              : s.last().packed_gather ? s.last().packed_gather->peer.recvs.size()
                                                       : std::get<PeerPlan>(s.last().gather).recvs.size();
        for (std::size_t r = 0; r < n; ++r)
          if (s.message_landed(r)) landed(r);
      }
    } catch (...) {
      s.fail_current();
    }
    s.pending.reset();  // cancels what is left after a failure
    s.finished = true;
    fence_after(s.last_port(), exec);
    return;
  }
  // Nothing in flight (it ran at start, or finished): every other block, in rank order.
  if (s.blockwise())
    for (int q = 0; q < s.axis_size(); ++q)
      if (q != s.axis_rank()) {
        const auto [off, count] = s.range_of(q);
        report(q, off, count);
      }
  s.finished = true;
}

template <class M>
void Flight<M>::settle() {
  FlightState<M>& s = *s_;
  Signature sig = s.sig;
  if (!s.error.empty()) sig.status = static_cast<std::uint32_t>(Status::failed_in_flight);
  const std::string mine = std::exchange(s.error, std::string());
  const std::exception_ptr own = std::exchange(s.thrown, nullptr);
  try {
    ExclusiveUse use(*s.g.world, op_name(sig.op));
    agree(*s.g.world, sig, mine);
  } catch (...) {
    if (own) std::rethrow_exception(own);
    throw;
  }
}

/// Starts an operation: prepare, agree (errors raise here, on every rank,
/// before anything moves), the steps before the last (blocking), then the
/// last step's own blocks copied and its messages posted. Backends without
/// split-phase exchange, and last steps that are not a switch or a gather,
/// run to the end here; complete() then reports every block at once.
template <class M>
std::unique_ptr<Flight<M>> start_operation(const OpGroup<M>& g, std::shared_ptr<void> keep, const OpArgs& a,
                                           Signature sig, std::string err) {
  auto st = std::make_unique<FlightState<M>>();
  FlightState<M>& f = *st;
  f.g = g;
  f.keep = std::move(keep);
  f.items.assign(a.items.begin(), a.items.end());
  f.global.assign(a.global.begin(), a.global.end());
  f.wire = a.wire;
  for (std::size_t x = 0; x < g.axes; ++x) f.from[x] = a.from[x];
  const OpArgs args{f.items, f.global, a.steps, std::span<const long>(f.from.data(), g.axes), a.wire, a.rtype};
  ExclusiveUseGroup use(g, a.steps, op_name(sig.op));
  prepare_operation(f.op, g, args, sig, err, true);
  PreparedOp& op = f.op;
  if (err.empty()) {
    sig.path = static_cast<std::uint32_t>(op.path);
    try {
      maybe_inject_fault();
      if (op.size > 1 || op.posted_last) {
        f.buffers = g.world->resources().template slot<FlightPool<M>>().take();
        watch_kokkos_finalize();
        f.buffers->steps.reserve(0, op.scratch_bytes[0]);
        f.buffers->steps.reserve(1, op.scratch_bytes[1]);
        if (op.posted_last) {
          const PreparedStep& p = op.step(op.size - 1);
          const std::size_t sb = p.packed ? p.packed->send_bytes : p.packed_gather ? p.packed_gather->send_bytes : 0;
          const std::size_t rb = p.packed ? p.packed->recv_bytes : p.packed_gather ? p.packed_gather->recv_bytes : 0;
          f.buffers->chunks.reserve(0, sb);
          f.buffers->chunks.reserve(1, rb);
        }
      }
    } catch (const std::exception& e) {
      sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
      err = failure_text(sig.op, g.world->rank(), e);
    }
  }
  f.sig = sig;
  agree(*g.world, sig, err);
  auto flight = std::make_unique<Flight<M>>(std::move(st));
  if (op.size == 0) {
    execute_identity(g, args);
    f.finished = true;
    return flight;
  }
  const Scratch<M>* scratch = f.buffers ? &f.buffers->steps : nullptr;
  std::array<PackedItem, kMaxBatch> items{};
  for (std::size_t t = 0; t + 1 < op.size; ++t) {
    step_items(op, args, t, scratch, items);
    execute_step(g, op, args, t, std::span<const PackedItem>(items.data(), args.items.size()));
  }
  const std::size_t t = op.size - 1;
  step_items(op, args, t, scratch, f.last_items);
  const std::span<const PackedItem> last(f.last_items.data(), args.items.size());
  if (!op.posted_last) {
    execute_step(g, op, args, t, last);
    f.finished = true;
    return flight;
  }
  // Post the last step: own blocks first, then every message.
  const PreparedStep& p = op.step(t);
  PortOn<M>& port = *g.axis[std::size_t(p.step.axis)];
  const auto exec = port.exec();
  const std::span<const std::size_t> ge(p.group.data(), op.rank);
  unsigned char* sbuf = f.buffers->chunks.buf[0].data();
  unsigned char* rbuf = f.buffers->chunks.buf[1].data();
  if (p.packed) {
    const PackedArgs pa{last, ge, std::size_t(p.step.from), std::size_t(p.step.to), a.wire};
    packed_own_blocks(exec, *p.packed, pa);
    packed_pack(exec, *p.packed, pa, sbuf);
    fence_before_transfer(port, exec);
    f.pending = port.post_runs(sbuf, p.packed->section_sends, rbuf, p.packed->section_recvs, 1);
  } else if (p.packed_gather) {
    const PackedGatherArgs pa{last, ge, std::size_t(p.step.from), a.wire};
    packed_gather_own(exec, *p.packed_gather, pa, port.rank(), sbuf);
    fence_before_transfer(port, exec);
    f.pending = port.post_runs(sbuf, p.packed_gather->section_sends, rbuf, p.packed_gather->section_recvs, 1);
  } else {
    const PeerPlan& pp = p.single ? std::get<PeerPlan>(*p.single) : std::get<PeerPlan>(p.gather);
    copy_runs(exec, last[0].out, last[0].in, last[0].elem_bytes, std::span(&pp.self, 1));
    fence_before_transfer(port, exec);
    f.pending = port.post_runs(last[0].in, pp.sends, last[0].out, pp.recvs, last[0].elem_bytes);
  }
  return flight;
}

template <class M>
std::unique_ptr<Flight<M>> start_call(const OpGroup<M>& g, std::shared_ptr<void> keep, const CallFacts& f) {
  PreparedCall c;
  prepare_call(f, c);
  return start_operation(g, std::move(keep), c.args, c.sig, std::move(c.err));
}

}  // namespace dsp::detail
