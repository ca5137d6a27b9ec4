// SPDX-License-Identifier: BSD-3-Clause
// dsp: sequence-parallel x data-parallel groups of a communicator.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/core/agree.hpp>
#include <dsp/core/exclusive.hpp>
#include <dsp/error.hpp>

#include <source_location>
#include <string>

namespace dsp {

/// A communicator split into sequence-parallel groups of `sequence_size`
/// consecutive ranks, and data-parallel groups of the ranks that hold the same
/// position in their sequence-parallel group. With world size W and
/// sequence-parallel size S, world rank r is rank r % S of sequence group
/// r / S (ranks [g*S, g*S + S) form group g) and rank r / S of data group
/// r % S (ranks r % S, r % S + S, ...).
template <class Comm>
struct ParallelGroups {
  Comm sequence;           ///< this rank's sequence-parallel group (shards move inside it)
  Comm data;               ///< this rank's data-parallel group (one rank per sequence group)
  int sequence_group = 0;  ///< index of this rank's sequence-parallel group (= rank in `data`)
  int data_group = 0;      ///< index of this rank's data-parallel group (= rank in `sequence`)
};

/// Collective over `world`. The ranks first agree on `sequence_size`; unless
/// 1 <= sequence_size and it divides world.size() on every rank, every rank
/// throws (InvalidArgument where it is invalid, MismatchError elsewhere, and
/// MismatchError naming every rank's value when the ranks passed different
/// sizes), before any group is made.
template <Splittable Comm>
ParallelGroups<Comm> make_parallel_groups(const Comm& world, int sequence_size,
                                          std::source_location loc = std::source_location::current()) {
  Comm w = world;
  const int n = w.size(), r = w.rank();
  detail::Signature sig;
  sig.op = static_cast<std::uint32_t>(detail::Op::make_groups);
  sig.arg = sequence_size;
  detail::set_site(sig, loc);
  std::string err;
  if (sequence_size < 1 || n % sequence_size != 0) {
    err = "dsp::make_parallel_groups: the sequence-parallel size " + std::to_string(sequence_size) +
          " must be at least 1 and divide the communicator size " + std::to_string(n);
    sig.status = static_cast<std::uint32_t>(detail::Status::bad_argument);
  }
  detail::ExclusiveUse use(w, "dsp::make_parallel_groups");
  detail::agree(w, sig, err);
  const int g = r / sequence_size, pos = r % sequence_size;
  Comm sp = w.split(g, pos);
  Comm dp = w.split(pos, g);
  return ParallelGroups<Comm>{sp, dp, g, pos};
}

}  // namespace dsp
