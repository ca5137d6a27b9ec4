// SPDX-License-Identifier: BSD-3-Clause
// dsp: the engine of dsp::redistribute: runs a plan (plan/redistribute.hpp)
// step by step, each step one collective (or none) on one mesh axis's
// communicator, with one agreement check for the whole plan on the mesh's
// world communicator. Generic in the group (a communicator or a Mesh) and the
// memory space only.
#pragma once

#include <dsp/engine/agree.hpp>
#include <dsp/engine/engine.hpp>
#include <dsp/engine/group.hpp>
#include <dsp/engine/workspace.hpp>
#include <dsp/partition.hpp>
#include <dsp/plan/redistribute.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>

namespace dsp::detail {

/// The blocks between the steps of a plan: two grow-only buffers used in
/// turn, kept in the world communicator's resources (a steady loop allocates
/// nothing).
template <class M>
struct Scratch {
  using Buffer = Kokkos::View<unsigned char*, M>;
  Buffer buf[2];
  void reserve(std::size_t k, std::size_t bytes) {
    if (buf[k].extent(0) >= bytes) return;
    buf[k] = Buffer();
    buf[k] = Buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("dsp::redistribute")), bytes);
  }
};

/// Everything one step needs at execution, fixed in the prepare phase.
template <std::size_t R>
struct PreparedStep {
  MeshStep step;
  std::array<std::size_t, R> group{};  // the block the ranks along the step's axis share
  std::shared_ptr<const SwitchPlan> switch_plan;
  GatherPlan gather_plan;
  ReduceScatterPlan reduce_plan;
  std::size_t out_elems = 0;
};

template <class Op>
constexpr ReduceOp reduce_op_of() {
  if constexpr (std::is_same_v<Op, Max>) return ReduceOp::max;
  else if constexpr (std::is_same_v<Op, Min>) return ReduceOp::min;
  else return ReduceOp::sum;
}
constexpr ReduceOp reduce_op_of_code(long code) {
  return code == kPartialMax ? ReduceOp::max : code == kPartialMin ? ReduceOp::min : ReduceOp::sum;
}

struct RedistributeArgs {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t eb = 0;
  ReduceType rtype = ReduceType::f32;  // used only by plans with reductions
};

/// A whole redistribution: prepare every step (plans, workspaces, the blocks
/// between steps), one agreement check on the world communicator, then the
/// steps. Collective over the group. `sig` and `err` come from the front end.
template <class M, class G, std::size_t K, std::size_t R>
void run_redistribute(const G& group, Signature sig, std::string err, const MeshPlan<K>& plan,
                      const std::array<long, K>& from, const std::array<std::size_t, R>& global,
                      const RedistributeArgs& args) {
  using traits = group_traits<G>;
  using Comm = typename traits::comm_type;
  auto world = traits::world(group);
  const auto shape = traits::shape(group);
  const auto coords = traits::coords(group);
  // One collective at a time on every communicator the plan uses.
  std::optional<Busy> busy[kMaxAxes + 1];
  busy[kMaxAxes].emplace(world, op_name(sig.op));
  if constexpr (K > 1) {
    bool used[kMaxAxes] = {};
    for (const MeshStep& s : plan) used[s.axis] = communicates(s.kind) || used[s.axis];
    for (std::size_t a = 0; a < K; ++a)
      if (used[a]) busy[a].emplace(traits::axis(group, a), op_name(sig.op));
  }

  // Prepare.
  std::array<PreparedStep<R>, kMaxSteps> steps{};
  std::array<long, K> state = from;
  for (std::size_t t = 0; t < plan.size && err.empty(); ++t) {
    PreparedStep<R>& p = steps[t];
    p.step = plan.steps[t];
    const std::size_t a = std::size_t(p.step.axis);
    auto ax = traits::axis(group, a);
    p.group = group_extents(global, state, a, shape, coords);
    state[a] = p.step.to;
    p.out_elems = product(
        nested_box(global, std::span<const long>(state), std::span<const int>(shape), std::span<const int>(coords))
            .count);
    switch (p.step.kind) {
      case StepKind::switch_dims:
        p.switch_plan = prepare_switch<M>(
            ax, SwitchArgs{nullptr, nullptr, args.eb, p.group, std::size_t(p.step.from), std::size_t(p.step.to)}, sig,
            err);
        break;
      case StepKind::gather:
        p.gather_plan =
            prepare_gather<M>(ax, GatherArgs{nullptr, nullptr, args.eb, p.group, std::size_t(p.step.from)}, sig, err);
        break;
      case StepKind::reduce_scatter:
        p.reduce_plan = prepare_reduce<M>(
            ax, ReduceArgs{nullptr, nullptr, p.group, args.rtype, ReduceOp::sum, p.step.to}, sig, err);
        break;
      default: break;
    }
  }
  sig.algorithm = 0;  // groups along an axis may resolve different algorithms for their blocks; the setting is compared
  if (err.empty()) {
    try {
      maybe_inject_fault();
      if (plan.size > 1) {
        std::size_t need[2] = {0, 0};
        for (std::size_t t = 0; t + 1 < plan.size; ++t)
          need[t % 2] = std::max(need[t % 2], steps[t].out_elems * args.eb);
        Scratch<M>& s = world.resources().template slot<Scratch<M>>();
        watch_kokkos_finalize();
        s.reserve(0, need[0]);
        s.reserve(1, need[1]);
      }
    } catch (const std::exception& e) {
      sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
      err = failure_text(sig.op, world.rank(), e);
    }
  }
  agree(world, sig, err);

  // Execute.
  if (plan.size == 0) {  // the identity: a copy
    const std::size_t n = product(
        nested_box(global, std::span<const long>(from), std::span<const int>(shape), std::span<const int>(coords))
            .count);
    auto exec = execution_space_for<M>(world);
    const CopyTask t{contiguous(0, n), contiguous(0, n), n};
    copy_runs(exec, args.out, args.in, args.eb, std::span(&t, 1));
    fence_after<Comm>(exec);
    return;
  }
  Scratch<M>* scratch = plan.size > 1 ? world.resources().template find<Scratch<M>>() : nullptr;
  for (std::size_t t = 0; t < plan.size; ++t) {
    const PreparedStep<R>& p = steps[t];
    const void* in = t == 0 ? args.in : scratch->buf[(t - 1) % 2].data();
    void* out = t + 1 == plan.size ? args.out : scratch->buf[t % 2].data();
    const std::size_t a = std::size_t(p.step.axis);
    auto ax = traits::axis(group, a);
    switch (p.step.kind) {
      case StepKind::switch_dims:
        execute_switch<M>(ax, *p.switch_plan,
                          SwitchArgs{in, out, args.eb, p.group, std::size_t(p.step.from), std::size_t(p.step.to)});
        break;
      case StepKind::gather:
        execute_gather<M>(ax, p.gather_plan, GatherArgs{in, out, args.eb, p.group, std::size_t(p.step.from)});
        break;
      case StepKind::split:
        run_local_copy<M>(ax, plan_split(p.group, std::size_t(p.step.to), coords[a], shape[a]), in, out, args.eb);
        break;
      case StepKind::all_reduce:
      case StepKind::reduce_scatter:
        execute_reduce<M>(ax, p.reduce_plan,
                          ReduceArgs{in, out, p.group, args.rtype, reduce_op_of_code(p.step.from),
                                     p.step.kind == StepKind::all_reduce ? -1 : p.step.to});
        break;
      case StepKind::to_partial:
        execute_to_partial<M>(ax, in, out, product(p.group) * args.eb,
                              coords[a] == 0 || reduce_op_of_code(p.step.to) != ReduceOp::sum);
        break;
    }
  }
}

}  // namespace dsp::detail
