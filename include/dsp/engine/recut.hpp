// SPDX-License-Identifier: BSD-3-Clause
// dsp: the engine of a redistribution on one communicator where a side is
// Zigzag<D> or Blocks<D> (plan/cut.hpp): prepare (the plan, cached, and the
// workspace), agree, then one exchange: point-to-point messages between the
// blocks' runs, or one packed all-to-all-v.
#pragma once

#include <dsp/core/agree.hpp>
#include <dsp/core/buffers.hpp>
#include <dsp/core/exclusive.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/engine/steps.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/plan/cut.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace dsp::detail {

/// The cut plans in use, by every value they depend on (Blocks' sizes
/// included): a small cache of its own, emptied when it passes 64 plans. The
/// last plan a thread used is found by comparing its key, without a lock.
inline std::shared_ptr<const CutPlan> cached_cut_plan(const RecutArgs& a, std::size_t p, std::size_t n, bool can_peer,
                                                      SwitchAlgorithm setting) {
  thread_local std::vector<std::size_t> key, last_key;
  thread_local std::shared_ptr<const CutPlan> last;
  key.clear();
  key.insert(key.end(), a.global.begin(), a.global.end());
  for (const CutSide* s : {&a.from, &a.to}) {
    key.push_back(s->dim);
    key.push_back(std::size_t(s->cut.kind));
    if (s->cut.kind == Cut::Kind::blocks) key.insert(key.end(), s->cut.starts, s->cut.starts + n + 1);
  }
  key.insert(key.end(), {a.global.size(), p, n, a.elem_bytes, std::size_t(can_peer), std::size_t(setting)});
  if (last && key == last_key) return last;
  static std::mutex m;
  static std::map<std::vector<std::size_t>, std::shared_ptr<const CutPlan>> plans;
  {
    std::lock_guard lock(m);
    if (auto it = plans.find(key); it != plans.end()) {
      last_key = key;
      return last = it->second;
    }
  }
  const bool peer = cut_goes_peer(a.global, a.from, a.to, n, a.elem_bytes, can_peer, setting);
  auto plan = std::make_shared<const CutPlan>(plan_cut(a.global, a.from, a.to, p, n, peer));
  {
    std::lock_guard lock(m);
    if (plans.size() >= 64) plans.clear();
    plans.emplace(key, plan);
  }
  last_key = key;
  return last = plan;
}

/// Runs a redistribution between cuts (engine/api.hpp). Collective over port.
template <class M>
void run_recut(PortOn<M>& port, Signature sig, std::string err, const RecutArgs& a) {
  ExclusiveUse use(port, op_name(sig.op));
  const std::size_t n = std::size_t(port.size()), p = std::size_t(port.rank());
  const SwitchAlgorithm setting = switch_algorithm();
  const std::shared_ptr<const CutPlan> plan = prepare(port.rank(), sig, err, [&] {
    auto pl = cached_cut_plan(a, p, n, capabilities_of(port).peer, setting);
    if (!pl->peer && n > 1 && pl->bound > 0)
      workspace<M>(port).reserve(pl->send_elems * a.elem_bytes, pl->recv_elems * a.elem_bytes);
    return pl;
  });
  if (plan)
    sig.path = static_cast<std::uint32_t>(a.from.cut.kind == Cut::Kind::whole ? Path::identity
                                          : plan->peer                        ? Path::pairwise
                                                                              : Path::alltoallv);
  agree(port, sig, err);
  const auto exec = port.exec();
  if (plan->peer) {
    auto local = [&] {
      copy_runs(exec, a.dst, a.src, a.elem_bytes, plan->self);
      fence_after(port, exec);
    };
    if (product(a.global) == 0) return local();
    fence_before_transfer(port, exec);
    return port.exchange_runs(a.src, plan->sends, a.dst, plan->recvs, a.elem_bytes, local);
  }
  copy_runs(exec, a.dst, a.src, a.elem_bytes, plan->self);
  if (n > 1 && plan->bound > 0 && a.from.cut.kind != Cut::Kind::whole) {
    const Workspace<M>& ws = workspace<M>(port);
    copy_runs(exec, ws.send(), a.src, a.elem_bytes, plan->pack);
    fence_before_transfer(port, exec);
    port.all_to_all_v(ws.send(), plan->send_counts, plan->send_displs, ws.recv(), plan->recv_counts, plan->recv_displs,
                      a.elem_bytes, plan->bound);
    copy_runs(exec, a.dst, ws.recv(), a.elem_bytes, plan->unpack);
  }
  fence_after(port, exec);
}

}  // namespace dsp::detail
