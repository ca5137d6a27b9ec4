// SPDX-License-Identifier: BSD-3-Clause
// dsp: the plan of a reduce-scatter (a Partial placement becoming Sharded<d>):
// each rank's chunk of dim d by the 1-D rule, and the pack into rank order
// where the chunks are not contiguous in the input. Pure arithmetic.
#pragma once

#include <dsp/partition.hpp>
#include <dsp/plan/tasks.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace dsp::detail {

struct ReduceScatterPlan {
  std::vector<std::size_t> counts;
  std::vector<CopyTask> pack;  // empty: the input is already in rank order
  std::size_t elems = 0;
};

inline ReduceScatterPlan plan_reduce_scatter(std::span<const std::size_t> global, std::size_t d, int size) {
  const std::size_t n = static_cast<std::size_t>(size);
  const Partition pd{global[d], n};
  const Slab g = slab(global, d);
  ReduceScatterPlan plan;
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t c = g.elems(pd.count(q));
    plan.counts.push_back(c);
    if (g.outer > 1) plan.pack.push_back({contiguous(plan.elems, c), g.runs(pd.offset(q), pd.count(q)), c});
    plan.elems += c;
  }
  return plan;
}

}  // namespace dsp::detail
