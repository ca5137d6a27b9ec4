// SPDX-License-Identifier: BSD-3-Clause
// dsp: the process's caches of plans. A plan is immutable and shared, so a
// cache may drop it at any time without invalidating one in use. Keys are
// fixed-size arrays of pure values (extents, dims, rank, size, element
// sizes, capabilities, setting): no communicator address that a new
// communicator could reuse, no allocation to look a plan up.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace dsp::detail {

/// The plan of type Plan for `key`, made by `make()` (returning
/// std::shared_ptr<const Plan>) the first time. One cache per instantiation,
/// that is per (Plan, key size, type of `make`): a lambda's type is its own,
/// so each call site has its own cache, and each kind of plan must be looked
/// up from one place. A cache holds at most 256 plans (it is emptied when
/// full: programs of many shapes keep bounded memory). The last plan a
/// thread used is found without a lock, so a steady loop plans once and then
/// only compares its key. `make` runs outside the lock (it may consult other
/// caches).
template <class Plan, std::size_t N, class Make>
std::shared_ptr<const Plan> cached_plan(const std::array<std::size_t, N>& key, Make&& make) {
  using Key = std::array<std::size_t, N>;
  struct Cache {
    std::mutex mutex;
    std::map<Key, std::shared_ptr<const Plan>> plans;
  };
  static Cache cache;
  thread_local Key last_key{};
  thread_local std::shared_ptr<const Plan> last_plan;
  if (last_plan && key == last_key) return last_plan;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) {
      last_key = key;
      return last_plan = it->second;
    }
  }
  std::shared_ptr<const Plan> plan = make();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (cache.plans.size() >= 256) cache.plans.clear();
    cache.plans.emplace(key, plan);
  }
  last_key = key;
  return last_plan = plan;
}

}  // namespace dsp::detail
