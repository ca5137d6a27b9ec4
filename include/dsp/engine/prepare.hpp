// SPDX-License-Identifier: BSD-3-Clause
// dsp: the prepare phase of an operation (engine/run.hpp has the whole):
// every step's plan on its axis's port, workspaces reserved, the blocks
// between steps placed; under Planning::measure, each step's decision looked
// up. A local failure is recorded in the signature, not thrown, so that the
// agreement reports it on every rank.
#pragma once

#include <dsp/core/agree.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/engine/packed_steps.hpp>
#include <dsp/engine/steps.hpp>
#include <dsp/engine/wisdom_store.hpp>
#include <dsp/partition.hpp>
#include <dsp/plan/mesh_plan.hpp>
#include <dsp/plan/packed.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsp::detail {

constexpr ReduceOp reduce_op_of_code(long code) {
  return code == kPartialMax ? ReduceOp::max : code == kPartialMin ? ReduceOp::min : ReduceOp::sum;
}

/// A mesh step's tensors as the exchange between cuts (engine/recut.hpp)
/// takes them: their blocks in group extents `ge`, from the step's code to
/// its code over the n ranks of its axis.
/// `each`: a batch of different extents' group extents, tensor k's at
/// [k * ge.size(), ...), or nullptr (every tensor's are `ge`).
inline void recut_items(std::span<const PackedItem> items, std::span<const std::size_t> ge, const MeshStep& step, int n,
                        Wire w, CutSizes z, std::array<RecutArgs, kMaxBatch>& out, const std::size_t* each = nullptr) {
  for (std::size_t k = 0; k < items.size(); ++k) {
    RecutArgs& r = out[k];
    const std::span<const std::size_t> g = each ? std::span(each + k * ge.size(), ge.size()) : ge;
    r.src = items[k].in, r.dst = items[k].out;
    r.elem_bytes = items[k].elem_bytes;
    r.global = g;
    r.from = code_side(step.from, g, std::size_t(n), z);
    r.to = code_side(step.to, g, std::size_t(n), z);
    r.wire = w;
    r.kind = items[k].kind;
    r.wire_kernels = w == Wire::exact ? nullptr : items[k].wire;
  }
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

/// Everything one step needs at execution, fixed in the prepare phase.
struct PreparedStep {
  MeshStep step;
  std::array<std::size_t, kMaxRank> group{};  // the block the ranks along the step's axis share
  std::shared_ptr<const SwitchPlan> single;   // a switch of one exact tensor
  std::shared_ptr<const PackedPlan> packed;   // a switch of a batch, or on a wire
  GatherPlan gather;                          // a gather of one exact tensor
  std::shared_ptr<const PackedGatherPlan> packed_gather;
  ReduceScatterPlan reduce;
  RecutRun* recut = nullptr;                // a recut's exchange (a slot per step, kept by the thread)
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
  // A batch of different extents (OpArgs::each): step t's group extents of tensor k at
  // [(t * n + k) * rank, ...) and its block's elements after the step at [t * n + k], in the
  // thread's grow-only buffers (prepare_operation); else nullptr.
  std::size_t *each_group = nullptr, *each_out = nullptr;
  /// Step t's group extents of every tensor (recut_items' `each`), or nullptr.
  const std::size_t* each_of(std::size_t t, std::size_t n) const {
    return each_group ? each_group + t * n * rank : nullptr;
  }
  /// The elements of tensor k's block after step t.
  std::size_t out_elems(std::size_t t, std::size_t k, std::size_t n) const {
    return each_out ? each_out[t * n + k] : step(t).out_elems;
  }
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

/// What the prepare phase carries from step to step.
struct PrepareState {
  SwitchAlgorithm setting = SwitchAlgorithm::automatic;  // the process's switch algorithm setting
  bool exact_one = false;                                // one tensor, no wire
  bool split_phase = false;
  bool decide = false;  // Planning::measure decides what the setting leaves open
  bool undecided = false;
  std::uint64_t decisions = 0;  // hash of this rank's decisions so far
};

/// Under Planning::measure, the decision for step p (the setting it runs
/// under), when the wisdom has one; its key either way.
template <class M>
SwitchAlgorithm decide_step(PreparedStep& p, PrepareState& ps, const OpGroup<M>& g, PortOn<M>& port, const OpArgs& a,
                            std::span<const std::size_t> ge, std::size_t t) {
  const bool moves =
      (p.step.kind == StepKind::switch_dims && p.step.from != p.step.to) || p.step.kind == StepKind::gather;
  if (!ps.decide || port.size() <= 1 || !moves) return ps.setting;
  std::array<std::size_t, kMaxBatch> elems{};
  for (std::size_t k = 0; k < a.items.size(); ++k) elems[k] = a.items[k].elem_bytes;
  const bool sw = p.step.kind == StepKind::switch_dims;
  const DecisionKind kind = sw ? (ps.exact_one ? DecisionKind::switch_one : DecisionKind::switch_batch)
                               : (ps.exact_one ? DecisionKind::gather_one : DecisionKind::gather_batch);
  const Capabilities caps = capabilities_of(port);
  p.decidable = true;
  p.key = decision_key(kind, g.world->size(), port.size(), port.backend(), ge, std::size_t(p.step.from),
                       std::size_t(sw ? p.step.to : p.step.from), a.wire,
                       std::span<const std::size_t>(elems.data(), a.items.size()),
                       std::size_t(caps.peer) | std::size_t(caps.typed) << 1);
  SwitchAlgorithm s = ps.setting;
  if (const auto d = find_decision(p.key)) s = *d;
  else ps.undecided = true;
  ps.decisions = fnv1a(std::string_view(to_string(s)), ps.decisions ^ t);
  return s;
}

/// One exact tensor's blocking switch under setting s, where it goes in
/// eager pieces: its packed plan (the batch's sections path with one
/// tensor); else nullptr (its own plan runs). Planning::measure times this
/// as the `automatic` candidate, which is what a recorded `automatic` runs.
template <class M>
std::shared_ptr<const PackedPlan> eager_switch_plan(PortOn<M>& port, const PackedArgs& pa, SwitchAlgorithm s) {
  if (s != SwitchAlgorithm::automatic || pa.wire != Wire::exact || !eager_pieces_apply(port)) return nullptr;
  const Capabilities caps = capabilities_of(port);
  const std::size_t eb = pa.items[0].elem_bytes;
  const SwitchPlan& own = *cached_switch_plan(pa.global, pa.i, pa.j, port.rank(), port.size(), eb, caps, s);
  const SwitchAlgorithm chosen = std::holds_alternative<AlltoallPlan>(own)    ? SwitchAlgorithm::alltoall
                                 : std::holds_alternative<AlltoallvPlan>(own) ? SwitchAlgorithm::alltoallv
                                                                              : SwitchAlgorithm::pairwise;
  if (!switch_in_eager_pieces(pa.global, pa.i, pa.j, port.size(), eb, caps, s, chosen)) return nullptr;
  return plan_and_reserve_packed<M>(port, pa, s);
}

/// The plan of a switch step: one exact tensor's own plan (or its eager
/// pieces), or a packed one; `post`: for posting (point to point, completed
/// later).
template <class M>
void plan_switch_step(PreparedStep& p, const PrepareState& ps, PortOn<M>& port, const OpArgs& a,
                      std::span<const std::size_t> ge, bool post, SwitchAlgorithm s) {
  const std::size_t i = std::size_t(p.step.from), j = std::size_t(p.step.to);
  const bool single =
      ps.exact_one && (!post || posted_runs_bound(ge, std::max(i, j), std::min(i, j), port.size()) <= kMaxPostedRuns);
  const PackedArgs pa{a.items, ge, i, j, a.wire};
  if (single && !post)
    if ((p.packed = eager_switch_plan<M>(port, pa, s))) return;
  if (single) {
    p.single = post
                   ? cached_switch_plan(ge, i, j, port.rank(), port.size(), a.items[0].elem_bytes,
                                        capabilities_of(port), SwitchAlgorithm::pairwise)
                   : plan_and_reserve_switch<M>(port, SwitchArgs{nullptr, nullptr, a.items[0].elem_bytes, ge, i, j}, s);
    return;
  }
  // Posted chunks always pack (setting alltoallv: never one plan per tensor).
  p.packed = post ? cached_packed_plan(pa, port.rank(), port.size(), capabilities_of(port), SwitchAlgorithm::alltoallv)
                  : plan_and_reserve_packed<M>(port, pa, s);
}

/// The plan of a gather step, as plan_switch_step.
template <class M>
void plan_gather_step(PreparedStep& p, const PrepareState& ps, PortOn<M>& port, const OpArgs& a,
                      std::span<const std::size_t> ge, bool post, SwitchAlgorithm s) {
  const std::size_t d = std::size_t(p.step.from);
  const bool single = ps.exact_one && (!post || posted_runs_bound(ge, d, d, 1) <= kMaxPostedRuns);
  if (single) {
    p.gather = post ? GatherPlan(plan_peer_gather(ge, d, port.rank(), port.size()))
                    : plan_and_reserve_gather<M>(port, GatherArgs{nullptr, nullptr, a.items[0].elem_bytes, ge, d}, s);
    return;
  }
  const PackedGatherArgs pa{a.items, ge, d, a.wire, post};
  p.packed_gather = post ? cached_packed_gather_plan(pa, port.rank(), port.size(), capabilities_of(port), ps.setting)
                         : plan_and_reserve_packed_gather<M>(port, pa, s);
}

/// Step t of a batch of different extents (OpArgs::each): each tensor's
/// group extents and block in its own extents, and the step (a switch, a
/// gather, a split or a recut; front ends refuse a Partial placement) as one
/// exchange between cuts of every tensor (engine/recut.hpp). `undone`: the
/// placement without the step's axis; `state`: after the step.
template <class M>
void prepare_each_step(PreparedOp& op, PreparedStep& p, const OpGroup<M>& g, const OpArgs& a, std::size_t t,
                       const std::array<long, kMaxAxes>& undone, const std::array<long, kMaxAxes>& state,
                       Signature& sig, std::string& err) {
  PortOn<M>& port = *g.axis[std::size_t(p.step.axis)];
  const std::span<const int> shape(g.shape.data(), g.axes), coords(g.coords.data(), g.axes);
  const std::size_t n = a.items.size(), r = op.rank;
  for (std::size_t k = 0; k < n; ++k) {
    const std::span<const std::size_t> e = a.each.subspan(k * r, r);
    const auto in = nested_counts(e, std::span<const long>(undone.data(), g.axes), shape, coords, a.sizes);
    const auto out = nested_counts(e, std::span<const long>(state.data(), g.axes), shape, coords, a.sizes);
    std::copy(in.begin(), in.begin() + std::ptrdiff_t(r), op.each_group + (t * n + k) * r);
    op.each_out[t * n + k] = product(std::span<const std::size_t>(out.data(), r));
  }
  const StepKind kind = p.step.kind;
  p.step.kind = StepKind::recut;
  prepare(port.rank(), sig, err, [&] {
    if (kind != StepKind::switch_dims && kind != StepKind::gather && kind != StepKind::split && kind != StepKind::recut)
      throw UsageError(std::string("a batch of different extents reached a ") + step_name(kind) + " step");
    if (!a.recut) throw UsageError("a batch of different extents reached an engine without the exchange between cuts");
    std::array<RecutArgs, kMaxBatch> items;
    recut_items(a.items, std::span<const std::size_t>(p.group.data(), r), p.step, port.size(), a.wire, a.sizes, items,
                op.each_of(t, n));
    p.recut = static_cast<const RecutHooks<M>*>(a.recut)->prepare(port, std::span<const RecutArgs>(items.data(), n),
                                                                  switch_algorithm(), t);
    return 0;
  });
}

/// Step t: its group and output blocks (from the placement `state` before
/// it, which it advances), its decision and its plan.
template <class M>
void prepare_step(PreparedOp& op, PrepareState& ps, const OpGroup<M>& g, const OpArgs& a, std::size_t t,
                  std::array<long, kMaxAxes>& state, Signature& sig, std::string& err) {
  PreparedStep& p = op.build(t);
  p.step = a.steps[t];
  const std::size_t ax = std::size_t(p.step.axis);
  PortOn<M>& port = *g.axis[ax];
  const std::span<const int> shape(g.shape.data(), g.axes), coords(g.coords.data(), g.axes);
  std::array<long, kMaxAxes> undone = state;
  undone[ax] = -1;
  p.group = nested_counts(a.global, std::span<const long>(undone.data(), g.axes), shape, coords, a.sizes);
  state[ax] = p.step.to;
  p.out = nested_counts(a.global, std::span<const long>(state.data(), g.axes), shape, coords, a.sizes);
  p.out_elems = product(std::span<const std::size_t>(p.out.data(), op.rank));
  const std::span<const std::size_t> ge(p.group.data(), op.rank);
  if (!a.each.empty()) return prepare_each_step(op, p, g, a, t, undone, state, sig, err);
  const bool post = ps.split_phase && t + 1 == op.size && port.caps().async && port.size() > 1 && product(ge) > 0;
  const SwitchAlgorithm s = decide_step(p, ps, g, port, a, ge, t);
  prepare(port.rank(), sig, err, [&] {
    switch (p.step.kind) {
      case StepKind::switch_dims:
        plan_switch_step(p, ps, port, a, ge, post, s);
        op.posted_last = post;
        break;
      case StepKind::gather:
        plan_gather_step(p, ps, port, a, ge, post, s);
        op.posted_last = post;
        break;
      case StepKind::recut: {
        if (!a.recut) throw UsageError("a recut step (to or from Zigzag or Blocks) reached an engine without one");
        std::array<RecutArgs, kMaxBatch> items;
        recut_items(a.items, ge, p.step, port.size(), a.wire, a.sizes, items);
        p.recut = static_cast<const RecutHooks<M>*>(a.recut)->prepare(
            port, std::span<const RecutArgs>(items.data(), a.items.size()), s, t);
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

/// The path a one-step plan on a plain communicator resolved (the
/// primitives' agreement compares it; a mesh compares the setting).
inline Path resolved_path(const PreparedOp& op, const OpArgs& a) {
  if (op.size == 0) return Path::identity;
  if (op.size > 1) return Path::none;
  const PreparedStep& p = op.step(0);
  if (p.single) return op.posted_last ? Path::pairwise : path_of(*p.single);
  if (p.packed)
    return op.posted_last ? Path::sections
                          : packed_path(PackedArgs{a.items, std::span(p.group.data(), op.rank),
                                                   std::size_t(p.step.from), std::size_t(p.step.to), a.wire},
                                        *p.packed);
  if (p.packed_gather) return p.packed_gather->separate() ? Path::per_tensor : Path::allgather;
  if (p.step.kind == StepKind::gather) return p.gather.index() == 0 ? Path::allgather : Path::peer_gather;
  return Path::none;
}

/// The two scratch buffers' sizes: the blocks between steps, each tensor's
/// block at an aligned offset.
inline void size_scratch(PreparedOp& op, const OpArgs& a) {
  std::size_t most[2] = {0, 0};
  for (std::size_t t = 0; t + 1 < op.size; ++t) {
    std::size_t off = 0;
    for (std::size_t k = 0; k < a.items.size(); ++k)
      off = align_up(off, 64) + op.out_elems(t, k, a.items.size()) * a.items[k].elem_bytes;
    most[t % 2] = std::max(most[t % 2], off);
  }
  op.scratch_bytes[0] = most[0], op.scratch_bytes[1] = most[1];
}

/// The prepare phase. `split_phase`: plan the last step for posting when the
/// backend can (point to point, packed chunks in private buffers).
template <class M>
void prepare_operation(PreparedOp& op, const OpGroup<M>& g, const OpArgs& a, Signature& sig, std::string& err,
                       bool split_phase) {
  op.size = a.steps.size();
  op.rank = a.global.size();
  PrepareState ps;
  ps.setting = switch_algorithm();
  ps.exact_one = a.items.size() == 1 && a.wire == Wire::exact;
  ps.split_phase = split_phase;
  // Planning::measure decides what the switch algorithm setting leaves open,
  // for blocking operations (a split-phase one posts its last step point to
  // point by construction, and keeps the heuristic for the steps before).
  ps.decide = !split_phase && ps.setting == SwitchAlgorithm::automatic && planning() == Planning::measure;
  ps.decisions = fnv1a("plan");
  if (ps.decide && err.empty()) {
    if (const std::string& why = wisdom_env_error(); !why.empty()) {
      sig.status = static_cast<std::uint32_t>(Status::bad_setting);
      err = std::string(op_name(sig.op)) + ": " + why;
    }
  }
  if (!a.each.empty()) {  // grow-only, per thread: a steady loop allocates nothing (a thread runs one
                          // blocking operation at a time; split-phase refuses different extents)
    thread_local std::vector<std::size_t> group, out;
    group.resize(std::max(group.size(), op.size * a.items.size() * op.rank));
    out.resize(std::max(out.size(), op.size * a.items.size()));
    op.each_group = group.data(), op.each_out = out.data();
  }
  std::array<long, kMaxAxes> state{};
  for (std::size_t x = 0; x < g.axes; ++x) state[x] = a.from[x];
  for (std::size_t t = 0; t < op.size && err.empty(); ++t) prepare_step(op, ps, g, a, t, state, sig, err);
  if (!err.empty()) return;
  if (ps.decide) {
    bool any = false;
    for (std::size_t t = 0; t < op.size; ++t) any = any || op.step(t).decidable;
    if (any) op.plan = ps.undecided ? 1u : std::uint32_t(ps.decisions % 0xfffffff0u) + 2u;
  }
  if (g.axes == 1 && g.world == g.axis[0]) op.path = resolved_path(op, a);
  size_scratch(op, a);
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
    if (t > 0) in_off += op.out_elems(t - 1, k, a.items.size()) * a.items[k].elem_bytes;
    out_off += op.out_elems(t, k, a.items.size()) * a.items[k].elem_bytes;
  }
}

}  // namespace dsp::detail
