// SPDX-License-Identifier: BSD-3-Clause
// dsp: the one-rank communicator. No MPI needed.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/error.hpp>

#include <chrono>
#include <cstring>
#include <vector>

namespace dsp {

/// A communicator of exactly one rank. Collectives are local copies in its
/// memory space (by default the default execution space's memory space).
/// Copies share dsp's caches; any two are the same group (one rank).
template <class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class BasicSelfCommunicator {
 public:
  using memory_space = MemorySpace;
  /// What this backend offers beyond the Communicator concept (checked against the concepts).
  static constexpr unsigned capabilities = kSplittable | kReductions | kDeadlineControl;

  int rank() const noexcept { return 0; }
  int size() const noexcept { return 1; }
  const void* id() const noexcept { return res_.id(); }
  const CommResources& resources() const noexcept { return res_; }

  void all_to_all(const void* s, void* r, std::size_t count, std::size_t elem) { copy(r, s, count * elem); }
  void all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                    std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t elem,
                    std::size_t /*bound*/) {
    if (sc[0] != rc[0]) throw InvalidArgument("dsp::SelfCommunicator::all_to_all_v: send and receive counts differ");
    copy(static_cast<char*>(r) + rd[0] * elem, static_cast<const char*>(s) + sd[0] * elem, sc[0] * elem);
  }
  void all_gather(const void* s, void* r, std::size_t count, std::size_t elem) { copy(r, s, count * elem); }
  void all_gather_v(const void* s, std::size_t count, void* r, std::span<const std::size_t> rc,
                    std::span<const std::size_t> rd, std::size_t elem) {
    if (count != rc[0]) throw InvalidArgument("dsp::SelfCommunicator::all_gather_v: send and receive counts differ");
    copy(static_cast<char*>(r) + rd[0] * elem, s, count * elem);
  }
  void all_reduce(const void* s, void* r, std::size_t count, ReduceType t, ReduceOp) {
    copy(r, s, count * reduce_bytes(t));
  }
  void reduce_scatter(const void* s, void* r, std::span<const std::size_t> counts, ReduceType t, ReduceOp) {
    copy(r, s, counts[0] * reduce_bytes(t));
  }
  void broadcast(void*, std::size_t, std::size_t, int root) {
    if (root != 0) throw InvalidArgument("dsp::SelfCommunicator::broadcast: root must be 0");
  }
  void control_all_gather(const void* s, void* r, std::size_t bytes) { std::memcpy(r, s, bytes); }
  std::vector<int> control_all_gather_until(const void* s, void* r, std::size_t bytes, Deadline) {
    std::memcpy(r, s, bytes);
    return {};
  }

  /// A one-rank communicator of its own (every split of one rank is one rank).
  BasicSelfCommunicator split(int, int) const { return BasicSelfCommunicator{}; }

  friend bool operator==(const BasicSelfCommunicator&, const BasicSelfCommunicator&) { return true; }

 private:
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0 || dst == src) return;
    using Bytes = Kokkos::View<unsigned char*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(Bytes(static_cast<unsigned char*>(dst), bytes),
                      Bytes(static_cast<unsigned char*>(const_cast<void*>(src)), bytes));
  }
  CommResources res_;
};

/// The one-rank communicator over the default memory space.
using SelfCommunicator = BasicSelfCommunicator<>;

static_assert(Communicator<SelfCommunicator>);

}  // namespace dsp
