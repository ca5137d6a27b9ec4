// SPDX-License-Identifier: BSD-3-Clause
// dsp: Planning::measure's step. Every candidate plan of a step that the
// switch algorithm setting leaves open is timed collectively (max over the
// ranks), in the step's real output, and the fastest kept and recorded in
// the wisdom (engine/wisdom_store.hpp).
#pragma once

#include <dsp/engine/execute.hpp>
#include <dsp/engine/prepare.hpp>
#include <dsp/engine/wisdom_store.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace dsp::detail {

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

/// The candidates of one measured step, and what was learned of them.
template <class M>
struct Trial {
  static constexpr std::size_t kMost = 5;
  const OpGroup<M>& g;
  const OpArgs& a;
  std::span<const PackedItem> items;
  std::size_t rank = 0;  // the tensors' rank
  std::span<const SwitchAlgorithm> cands;
  std::vector<PreparedStep> plans{};
  std::array<bool, kMost> run{}, slow{};
  std::array<double, kMost> warm{}, med{};
  int rounds = 3;

  std::size_t size() const { return cands.size(); }
  /// One run of candidate c, in seconds. Every timed run starts with the
  /// ranks together (one small exchange on the control channel), so one
  /// candidate's skew does not count against the next.
  double once(std::size_t c) {
    std::array<double, 1> sync{0.0};
    max_over_ranks(*g.world, std::span<double>(sync));
    const auto t0 = std::chrono::steady_clock::now();
    execute_prepared(g, plans[c], rank, a, items);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

/// Plans every candidate of step p. A candidate runs unless some rank cannot
/// plan it, or it repeats an earlier candidate's plan on every rank.
template <class M>
void plan_candidates(Trial<M>& tr, const PreparedStep& p, PortOn<M>& port) {
  const std::size_t nc = tr.size();
  const bool exact_one = tr.a.items.size() == 1 && tr.a.wire == Wire::exact;
  const std::span<const std::size_t> ge(p.group.data(), tr.rank);
  const std::size_t i = std::size_t(p.step.from), j = std::size_t(p.step.to);
  const std::size_t eb = tr.a.items[0].elem_bytes;
  tr.plans.assign(nc, p);
  // 0: runs, 1: repeats an earlier plan here, 2: cannot be planned here.
  std::array<double, Trial<M>::kMost> verdict{};
  std::array<std::uint32_t, Trial<M>::kMost> ids{};
  for (std::size_t c = 0; c < nc; ++c) {
    PreparedStep& q = tr.plans[c];
    const SwitchAlgorithm s = tr.cands[c];
    q.single.reset(), q.packed.reset(), q.packed_gather.reset();  // not the prepared step's
    try {
      if (p.step.kind == StepKind::gather) {
        if (exact_one) q.gather = plan_and_reserve_gather<M>(port, GatherArgs{nullptr, nullptr, eb, ge, i}, s);
        else
          q.packed_gather =
              plan_and_reserve_packed_gather<M>(port, PackedGatherArgs{tr.a.items, ge, i, tr.a.wire, false}, s);
      } else if (exact_one) {  // automatic: eager pieces where the blocking call takes them
        q.packed = eager_switch_plan<M>(port, PackedArgs{tr.a.items, ge, i, j, tr.a.wire}, s);
        if (!q.packed) q.single = plan_and_reserve_switch<M>(port, SwitchArgs{nullptr, nullptr, eb, ge, i, j}, s);
      } else {
        q.packed = plan_and_reserve_packed<M>(port, PackedArgs{tr.a.items, ge, i, j, tr.a.wire}, s);
      }
      ids[c] = plan_identity_of(q, tr.a, tr.rank);
      verdict[c] = std::find(ids.begin(), ids.begin() + c, ids[c]) != ids.begin() + c ? 1.0 : 0.0;
    } catch (const std::exception&) {
      verdict[c] = 2.0;
    }
  }
  // A candidate repeats an earlier one only where it does on every rank: take
  // the smallest "repeats" (1 - max of 1 - v) but the largest "cannot" (2).
  std::array<double, 2 * Trial<M>::kMost> v{};
  for (std::size_t c = 0; c < nc; ++c)
    v[c] = verdict[c] == 2.0 ? 1.0 : 0.0, v[Trial<M>::kMost + c] = verdict[c] == 0.0 ? 1.0 : 0.0;
  max_over_ranks(*tr.g.world, std::span<double>(v));
  for (std::size_t c = 0; c < nc; ++c) tr.run[c] = v[c] == 0.0 && v[Trial<M>::kMost + c] == 1.0;
}

/// Two runs of each candidate (the first may build datatypes, touch pages).
/// A candidate whose second run is over 4x the fastest's is dropped: it
/// cannot win, and thousands of small messages slow what runs after them.
/// Then the rounds: 3 to 9 (fewer for slow steps).
template <class M>
void warm_up(Trial<M>& tr) {
  const std::size_t nc = tr.size();
  for (std::size_t c = 0; c < nc; ++c)
    if (tr.run[c]) tr.once(c), tr.warm[c] = tr.once(c);
  max_over_ranks(*tr.g.world, std::span<double>(tr.warm));
  double fastest = std::numeric_limits<double>::infinity(), total = 0;
  for (std::size_t c = 0; c < nc; ++c)
    if (tr.run[c]) fastest = std::min(fastest, tr.warm[c]);
  for (std::size_t c = 0; c < nc; ++c) {
    tr.slow[c] = tr.run[c] && tr.warm[c] > 4 * fastest;
    if (tr.run[c] && !tr.slow[c]) total += tr.warm[c];
  }
  tr.rounds = total < 2e-3 ? 9 : total < 2e-2 ? 5 : 3;
  for (std::size_t c = 0; c < nc; ++c) tr.run[c] = tr.run[c] && !tr.slow[c];
}

/// The median of a sample (sorts it).
inline double median_of(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The rounds: each runs every candidate once, starting with a different one
/// (a machine that changes speed moves them all alike). A candidate's time:
/// its median on each rank, then the largest over the ranks.
template <class M>
void time_rounds(Trial<M>& tr) {
  const std::size_t nc = tr.size();
  std::array<std::vector<double>, Trial<M>::kMost> times;
  for (int r = 0; r < tr.rounds; ++r)
    for (std::size_t k = 0; k < nc; ++k)
      if (const std::size_t c = (k + std::size_t(r)) % nc; tr.run[c]) times[c].push_back(tr.once(c));
  for (std::size_t c = 0; c < nc; ++c)
    if (tr.run[c]) tr.med[c] = median_of(times[c]);
  max_over_ranks(*tr.g.world, std::span<double>(tr.med));
}

/// The fastest candidate (size() when none ran), and every candidate's time
/// as the wisdom's `measured` text.
template <class M>
std::size_t fastest_of(const Trial<M>& tr, std::string& measured) {
  std::size_t best = tr.size();
  for (std::size_t c = 0; c < tr.size(); ++c) {
    char us[32] = "-";
    if (tr.run[c]) std::snprintf(us, sizeof us, "%.1f", tr.med[c] * 1e6);
    else if (tr.slow[c]) std::snprintf(us, sizeof us, ">%.1f", tr.warm[c] * 1e6);
    measured += std::string(c ? "," : "") + to_string(tr.cands[c]) + ":" + us;
    if (tr.run[c] && (best == tr.size() || tr.med[c] < tr.med[best])) best = c;
  }
  return best;
}

/// A near tie (the runner-up within 5% of `best`): those two again,
/// alternating, twice as many rounds, and the faster median of those
/// decides. Returns the winner.
template <class M>
std::size_t break_tie(Trial<M>& tr, std::size_t best, std::string& measured) {
  const std::size_t nc = tr.size();
  std::size_t second = nc;
  for (std::size_t c = 0; c < nc; ++c)
    if (tr.run[c] && c != best && (second == nc || tr.med[c] < tr.med[second])) second = c;
  if (second == nc || tr.med[second] >= 1.05 * tr.med[best]) return best;
  std::array<std::vector<double>, 2> tt;
  const std::size_t pair[2] = {best, second};
  for (int r = 0; r < 2 * tr.rounds; ++r)
    for (std::size_t k = 0; k < 2; ++k) tt[(k + std::size_t(r)) % 2].push_back(tr.once(pair[(k + std::size_t(r)) % 2]));
  std::array<double, 2> m2{median_of(tt[0]), median_of(tt[1])};
  max_over_ranks(*tr.g.world, std::span<double>(m2));
  const std::size_t won = m2[1] < m2[0] ? second : best;
  measured += ";tie:" + std::string(to_string(tr.cands[pair[0]])) + "," + to_string(tr.cands[pair[1]]) + "->" +
              to_string(tr.cands[won]);
  return won;
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
  static constexpr SwitchAlgorithm kSwitch[] = {SwitchAlgorithm::automatic, SwitchAlgorithm::alltoall,
                                                SwitchAlgorithm::alltoallv, SwitchAlgorithm::pairwise,
                                                SwitchAlgorithm::datatypes};
  static constexpr SwitchAlgorithm kGather[] = {SwitchAlgorithm::automatic, SwitchAlgorithm::alltoallv,
                                                SwitchAlgorithm::pairwise};
  PreparedStep& p = op.step(t);
  PortOn<M>& port = *g.axis[std::size_t(p.step.axis)];
  const bool gather = p.step.kind == StepKind::gather;
  Trial<M> tr{g, a, items, op.rank,
              gather ? std::span<const SwitchAlgorithm>(kGather) : std::span<const SwitchAlgorithm>(kSwitch)};
  plan_candidates(tr, p, port);
  warm_up(tr);
  time_rounds(tr);
  std::string measured;
  std::size_t best = fastest_of(tr, measured);
  if (best == tr.size()) return execute_prepared(g, p, op.rank, a, items);  // nothing could run: keep the heuristic
  best = break_tie(tr, best, measured);
  p = std::move(tr.plans[best]);
  record_decision(p.key, Decision{tr.cands[best], backend_text(port.backend()), measured});
}

}  // namespace dsp::detail
