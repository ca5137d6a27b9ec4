// SPDX-License-Identifier: BSD-3-Clause
// dsp: how a prepared step runs (blocking), on the tensors' blocks or the
// scratch between steps; the identity plan; and the exclusive use of every
// communicator an operation touches.
#pragma once

#include <dsp/core/exclusive.hpp>
#include <dsp/engine/prepare.hpp>
#include <dsp/kernels/convert.hpp>
#include <dsp/kernels/copy.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <span>

namespace dsp::detail {

/// Runs a prepared step (blocking) on the items' in/out pointers; `rank`:
/// the tensors' rank; `each`: a batch of different extents' group extents
/// (PreparedOp::each_of), or nullptr.
template <class M>
void execute_prepared(const OpGroup<M>& g, const PreparedStep& p, std::size_t rank, const OpArgs& a,
                      std::span<const PackedItem> items, const std::size_t* each = nullptr) {
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
    case StepKind::recut: {
      std::array<RecutArgs, kMaxBatch> args;
      recut_items(items, ge, p.step, port.size(), a.wire, a.sizes, args, each);
      static_cast<const RecutHooks<M>*>(a.recut)->execute(port, std::span<const RecutArgs>(args.data(), items.size()),
                                                          *p.recut);
      break;
    }
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
  execute_prepared(g, op.step(t), op.rank, a, items, op.each_of(t, a.items.size()));
}

/// The identity plan (no step): each tensor's block copied.
template <class M>
void execute_identity(const OpGroup<M>& g, const OpArgs& a) {
  const std::span<const int> shape(g.shape.data(), g.axes), coords(g.coords.data(), g.axes);
  const std::size_t r = a.global.size();
  const auto exec = g.world->exec();
  for (std::size_t k = 0; k < a.items.size(); ++k) {
    const PackedItem& it = a.items[k];
    const auto box =
        nested_counts(a.each.empty() ? a.global : a.each.subspan(k * r, r), a.from, shape, coords, a.sizes);
    const std::size_t n = product(std::span<const std::size_t>(box.data(), r));
    const CopyTask t{contiguous(0, n), contiguous(0, n), n};
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

}  // namespace dsp::detail
