// SPDX-License-Identifier: BSD-3-Clause
// dsp: what the typed front ends hand the engine, and the engine's entry
// points (engine/operation.hpp): types and declarations only; the front end
// (operate.hpp) brings the definitions. With DSP_COMPILED (the dsp::compiled
// target) the host-memory engine is compiled once, in the library, and a
// user's file instantiates none of it (the declarations at the end).
#pragma once

#include <dsp/comm/port.hpp>
#include <dsp/engine/agree.hpp>
#include <dsp/engine/busy.hpp>
#include <dsp/plan/redistribute.hpp>
#include <dsp/plan/runs.hpp>
#include <dsp/wire.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

// Whether the engine's definitions are in the headers: always, but with
// DSP_COMPILED on a host-only Kokkos, where the library has every memory
// space there is (a device backend's memory spaces instantiate from the headers).
#if !defined(DSP_COMPILED) || defined(DSP_COMPILED_SOURCE) || defined(KOKKOS_ENABLE_CUDA) || \
    defined(KOKKOS_ENABLE_HIP) || defined(KOKKOS_ENABLE_SYCL) || defined(KOKKOS_ENABLE_OPENMPTARGET)
#define DSP_ENGINE_DEFINITIONS 1
#else
#define DSP_ENGINE_DEFINITIONS 0
#endif

namespace dsp::detail {

/// The group an operation runs on, as Ports: the world communicator (the one
/// agreement check runs there), and one communicator per mesh axis (for a
/// plain communicator, one axis: the world itself).
template <class M>
struct OpGroup {
  PortOn<M>* world = nullptr;
  std::array<PortOn<M>*, kMaxAxes> axis{};
  std::size_t axes = 1;
  std::array<int, kMaxAxes> shape{}, coords{};
};

/// What the typed front end asks of the engine.
struct OpArgs {
  std::span<const PackedItem> items;    // 1 to kMaxBatch tensors: blocks, output blocks, element sizes
  std::span<const std::size_t> global;  // their global extents (equal)
  std::span<const MeshStep> steps;      // the plan (plan/redistribute.hpp)
  std::span<const long> from;           // the input placement, one code per axis
  Wire wire = Wire::exact;              // for float tensors, on switch and gather steps
  ReduceType rtype = ReduceType::f32;   // for reductions (Partial placements)
};

template <class M>
struct FlightState;

/// A split-phase operation in flight (start_operation).
template <class M>
class Flight {
 public:
  /// arrived(peer, offset, count): a block of the output has landed: from
  /// world rank `peer`, the range [offset, offset + count) along the dim
  /// block_dim() of this rank's output block.
  using Arrived = FunctionRef<void(int, std::size_t, std::size_t)>;
  explicit Flight(std::unique_ptr<FlightState<M>> s);
  ~Flight();
  Flight(const Flight&) = delete;
  Flight& operator=(const Flight&) = delete;
  /// Progresses the messages without blocking; true when every block has landed. Local.
  bool test();
  /// Completes the messages, reporting this rank's own block first, then each
  /// block as it lands. `started()` runs once the communicator is taken (a
  /// busy or timed-out one raises before). A callback that throws (anything)
  /// stops the reports on this rank; the messages still complete.
  void complete(Arrived arrived, FunctionRef<void()> started);
  /// The status agreement at the end (collective): every rank raises when any
  /// failed; a rank that failed gets its own exception back.
  void settle();
  /// Whether nothing is left in flight (the operation ran at start).
  bool finished() const noexcept;

 private:
  std::unique_ptr<FlightState<M>> s_;
};

/// A local copy along one run pattern pair (a split's slice). Not collective.
template <class M>
void execute_local_copy(PortOn<M>& comm, const CopyTask& t, const void* in, void* out, std::size_t eb);

/// Replicated -> Sharded<d> of a block of extents `global`: this rank's
/// slice, a local copy. Not collective.
template <class M>
void execute_split(PortOn<M>& comm, std::span<const std::size_t> global, std::size_t d, const void* in, void* out,
                   std::size_t eb);

struct RootArgs {
  const void* in = nullptr;  // the whole tensor, on the root only
  void* out = nullptr;       // this rank's block
  std::size_t eb = 0;
  std::span<const std::size_t> global;
  long d = -1;  // Sharded<d> (scatter), or -1: Replicated (broadcast)
  int root = 0;
};

/// Scatter (d >= 0) or broadcast (d < 0) of a tensor held by the root
/// (dsp::distribute). Collective; `err` carries a local failure.
template <class M>
void run_from_root(PortOn<M>& comm, Signature sig, std::string err, const RootArgs& a);

/// A whole operation, blocking. Collective over the group.
template <class M>
void run_operation(const OpGroup<M>& g, const OpArgs& a, Signature& sig, std::string err);

/// Starts a split-phase operation; `keep` holds what the group points to.
template <class M>
std::unique_ptr<Flight<M>> start_operation(const OpGroup<M>& g, std::shared_ptr<void> keep, const OpArgs& a,
                                           Signature sig, std::string err);

// With DSP_COMPILED, the host-memory engine is the dsp::compiled library's
// (src/compiled.cpp): these explicit instantiation declarations keep a user's
// file from instantiating it. Other memory spaces instantiate as usual.
#ifdef DSP_COMPILED
extern template void run_operation<Kokkos::HostSpace>(const OpGroup<Kokkos::HostSpace>&, const OpArgs&, Signature&,
                                                      std::string);
extern template std::unique_ptr<Flight<Kokkos::HostSpace>> start_operation<Kokkos::HostSpace>(
    const OpGroup<Kokkos::HostSpace>&, std::shared_ptr<void>, const OpArgs&, Signature, std::string);
extern template class Flight<Kokkos::HostSpace>;
extern template void execute_local_copy<Kokkos::HostSpace>(PortOn<Kokkos::HostSpace>&, const CopyTask&, const void*,
                                                           void*, std::size_t);
extern template void execute_split<Kokkos::HostSpace>(PortOn<Kokkos::HostSpace>&, std::span<const std::size_t>,
                                                      std::size_t, const void*, void*, std::size_t);
extern template void run_from_root<Kokkos::HostSpace>(PortOn<Kokkos::HostSpace>&, Signature, std::string,
                                                      const RootArgs&);
#endif

}  // namespace dsp::detail
