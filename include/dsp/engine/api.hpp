// SPDX-License-Identifier: BSD-3-Clause
// dsp: what the typed front ends hand the engine, and the engine's entry
// points (engine/run.hpp, engine/flight.hpp): types and declarations only; the front end
// (call/operate.hpp) brings the definitions. With DSP_COMPILED (the dsp::compiled
// target) the host-memory engine is compiled once, in the library, and a
// user's file instantiates none of it (the declarations at the end).
#pragma once

#include <dsp/config.hpp>
#include <dsp/core/agree.hpp>
#include <dsp/core/exclusive.hpp>
#include <dsp/core/port.hpp>
#include <dsp/partition.hpp>
#include <dsp/plan/boxes.hpp>
#include <dsp/plan/mesh_plan.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/wire.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <utility>

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
  std::span<const MeshStep> steps;      // the plan (plan/mesh_plan.hpp)
  std::span<const long> from;           // the input placement, one code per axis
  Wire wire = Wire::exact;              // for float tensors, on switch and gather steps
  ReduceType rtype = ReduceType::f32;   // for reductions (Partial placements)
  const void* recut = nullptr;          // a plan's recut steps' engine (RecutHooks<M>), or nullptr
  CutSizes sizes;                       // the Blocks sizes of the input and output layouts (equal over a batch)
  // A batch of tensors of different extents: tensor k's extents at [k * rank, (k + 1) * rank), or empty
  // when every tensor has `global`'s. Then every step runs as an exchange between cuts (OpArgs::recut),
  // each tensor's blocks in its own extents (engine/prepare.hpp).
  std::span<const std::size_t> each;
};

/// A byte range [first, second) of a tensor's block (empty: first == second).
using ByteRange = std::pair<const unsigned char*, const unsigned char*>;
inline bool ranges_overlap(ByteRange a, ByteRange b) {
  return a.first != a.second && b.first != b.second && a.first < b.second && b.first < a.second;
}

/// What the typed front end knows of one tensor of a call (call/operate.hpp
/// fills it): the untyped half checks and runs the call from these facts.
struct TensorFacts {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t elem_bytes = 0;
  ByteRange in_range{}, out_range{};
  const std::size_t* extents = nullptr;      // the input's global extents
  const std::size_t* out_extents = nullptr;  // the output's
  bool out_same_group = true;                // the output lives on the input's group
  bool same_group_as_first = true;           // the input lives on tensor 0's group
  ElemKind kind = ElemKind::other;           // which wires carry it
  const void* wire = nullptr;                // its wire kernels (kernels/convert.hpp WireKernels), or nullptr
  std::array<int, kMaxAxes> mesh_shape{};    // the input's mesh shape (a plain communicator: its size)
  std::uint64_t sizes_hash = 0;              // the Blocks sizes of a mesh layout's input and output, hashed
};

/// One call of a front end, as facts: what it is, on which tensors, with
/// which plan. The typed layer fills it; run_call and start_call (compiled
/// once per memory space) build the agreement signature, check the outputs
/// and run the operation.
struct CallFacts {
  Op op = Op::redistribute;
  long dst = 0;                     // the signature's target layout (one code)
  const long* dst_codes = nullptr;  // or one per axis (a redistribution)
  long arg = 0;                     // the signature's argument
  Wire wire = Wire::exact;
  std::source_location loc;
  std::size_t n = 1;  // tensors
  std::size_t tensor_rank = 0;
  int rank = 0;                     // this rank, for messages
  std::uint64_t type_hash = 0;      // of the element type(s)
  std::uint64_t elem_bytes = 0;     // summed over a batch
  const char* type_name = "";       // at most Signature::type's size
  const long* src_codes = nullptr;  // the input placement, one code per axis
  std::uint32_t mesh_axes = 0;      // 0: a plain communicator
  std::array<int, kMaxAxes> mesh_shape{};
  ReduceType rtype = ReduceType::f32;
  const MeshStep* steps = nullptr;
  std::size_t n_steps = 0;
  const long* from = nullptr;  // = src_codes, one per axis of the plan
  std::size_t axes = 1;
  const TensorFacts* t = nullptr;  // n of them (the typed layer's array)
  // A bad argument the front end found before the call (a run-time front
  // end's: the Python module's block, dtype or layout checks), or nullptr:
  // then every rank raises at the agreement check, this one with this text.
  const char* error = nullptr;
  const void* recut = nullptr;  // RecutHooks<M> where the layouts have a Zigzag (OpArgs::recut)
  CutSizes sizes;               // tensor 0's Blocks sizes (OpArgs::sizes)
};

/// What is wrong with an output, as text (cold: only on error).
/// `index`: the tensor's place in a batch, or -1 for a single tensor.
DSP_FUNC std::string output_error(const char* op, int rank, std::span<const std::size_t> x_extents,
                                  std::span<const std::size_t> y_extents, bool same_group, bool overlap,
                                  long index = -1);
#if DSP_FUNC_BODIES
DSP_FUNC std::string output_error(const char* op, int rank, std::span<const std::size_t> x_extents,
                                  std::span<const std::size_t> y_extents, bool same_group, bool overlap, long index) {
  const std::string who = std::string(op) + " (rank " + std::to_string(rank) + ")";
  const std::string output = index < 0 ? "the output" : "output tensor " + std::to_string(index) + " of the batch";
  const std::string input = index < 0 ? "the input" : "its input";
  if (!std::equal(x_extents.begin(), x_extents.end(), y_extents.begin(), y_extents.end()))
    return who + ": " + output + " has global extents " + text(y_extents) + " but " + input + " " + text(x_extents);
  if (!same_group)
    return who + ": " + output + " lives on a different communicator than " + input +
           " (not the same ranks in the same order)";
  if (overlap) return who + ": " + output + " shares memory with " + input + "; dsp does not work in place";
  return "";
}
#endif

/// Whether a batch of different extents may make call `f`: a blocking
/// redistribution without a Partial placement (every step an exchange
/// between cuts, each tensor in its own extents), with the cut engine.
inline bool mixed_extents_ok(const CallFacts& f) {
  if (f.op != Op::redistribute || !f.recut) return false;
  for (std::size_t x = 0; x < f.axes; ++x)
    if (is_partial_code(f.from[x]) || (f.dst_codes && is_partial_code(f.dst_codes[x]))) return false;
  return true;
}

/// What is wrong with a batch's arguments, as text (cold: only on error):
/// the first tensor whose extents differ from tensor 0's, that lives on
/// another group, or whose output shares memory with another tensor. Sets
/// `status` to bad_argument or bad_output.
DSP_FUNC std::string batch_error(const CallFacts& f, Status& status);
#if DSP_FUNC_BODIES
DSP_FUNC std::string batch_error(const CallFacts& f, Status& status) {
  const std::string who = std::string(op_name(std::uint32_t(f.op))) + " (rank " + std::to_string(f.rank) + ")";
  const std::size_t rank = f.tensor_rank;
  status = Status::bad_argument;
  for (std::size_t t = 0; t < f.n; ++t) {
    const TensorFacts& a = f.t[t];
    const std::string k = std::to_string(t);
    if (!std::equal(a.extents, a.extents + rank, f.t[0].extents) && !mixed_extents_ok(f))
      return who + ": tensor " + k + " of the batch has other global extents than tensor 0; a batch of " +
             "different extents moves blocking (redistribute, dynamic_switch; exact or on a wire), not " +
             (f.op == Op::redistribute ? "with a Partial placement" : "split-phase");
    if (!a.same_group_as_first) {
      if (a.mesh_shape != f.t[0].mesh_shape) {
        auto shape = [&](const std::array<int, kMaxAxes>& m) {
          std::string t = "[";
          for (std::size_t x = 0; x < std::max<std::size_t>(f.mesh_axes, 1); ++x) {
            if (x) t += ", ";
            t += std::to_string(m[x]);
          }
          return t + "]";
        };
        return who + ": tensor " + k + " of the batch lives on a mesh of shape " + shape(a.mesh_shape) +
               ", tensor 0 on " + shape(f.t[0].mesh_shape) + "; a batch lives on one mesh";
      }
      return who + ": tensor " + k + " of the batch lives on another communicator than tensor 0";
    }
    if (a.sizes_hash != f.t[0].sizes_hash)
      return who + ": tensor " + k + " of the batch has other Blocks sizes than tensor 0; on a mesh, the " +
             "tensors of a batch share their Blocks sizes (on a plain communicator they may differ)";
    for (std::size_t u = 0; u < f.n; ++u)
      if (u != t && (ranges_overlap(a.out_range, f.t[u].in_range) || ranges_overlap(a.out_range, f.t[u].out_range))) {
        status = Status::bad_output;
        return who + ": output " + k + " shares memory with " +
               (ranges_overlap(a.out_range, f.t[u].in_range) ? "input " : "output ") + std::to_string(u) +
               " of the batch; dsp does not work in place";
      }
  }
  return "";
}
#endif

/// The wire kernels of element kind `k` on the host memory space's execution
/// space (a kernels/convert.hpp WireKernels; nullptr for ElemKind::other):
/// what the typed front end hands the engine with DSP_COMPILED, where the
/// library holds the kernels of every kind. Defined in kernels/convert.hpp.
DSP_FUNC const void* host_wire_kernels(ElemKind k);

/// Why the call's wire cannot carry one of its tensors, as text, or "" (cold
/// text: only on error). `index`: the tensor in a batch, -1 for one tensor.
DSP_FUNC std::string wire_error(const char* op, int rank, Wire w, ElemKind kind, long index);
#if DSP_FUNC_BODIES
DSP_FUNC std::string wire_error(const char* op, int rank, Wire w, ElemKind kind, long index) {
  if (wire_carries(w, kind)) return "";
  const std::string who = std::string(op) + " (rank " + std::to_string(rank) + ")";
  const std::string which = index < 0 ? std::string("the tensor") : "tensor " + std::to_string(index) + " of the batch";
  if (kind == ElemKind::other)
    return who + ": the " + wire_name(w) + " wire carries float, double, dsp::bfloat16 and dsp::float16 tensors; " +
           which + " holds another element type, which travels exact only (wire.hpp)";
  return who + ": the " + wire_name(w) + " wire does not carry " + elem_kind_name(kind) + " tensors (" + which + "); " +
         elem_kind_name(kind) + " travels on " + wires_for(kind) + " (wire.hpp)";
}
#endif

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
void execute_local_copy(PortOn<M>& comm, const CopyTask& t, const void* in, void* out, std::size_t elem_bytes);

/// Replicated -> Sharded<d> of a block of extents `global`: this rank's
/// slice, a local copy. Not collective.
template <class M>
void execute_split(PortOn<M>& comm, std::span<const std::size_t> global, std::size_t d, const void* in, void* out,
                   std::size_t elem_bytes);

/// What each rank of the parent says about itself.
struct ReshardDesc {
  std::uint32_t has_x = 0, has_y = 0;
  std::uint64_t x_group = 0, y_group = 0;  // the ranks of x's and y's groups (where held)
  std::uint64_t rank = 0;                  // tensor rank
  std::uint64_t extents[kMaxRank] = {};
  RBox x, y;
  /// A Zigzag<D> block (x or y) is two boxes along dim `*_split` (~0: one
  /// box): its first `*_first` rows of D from off[D], the others from
  /// `*_second` (the box above spans both: off[D] the first's, cnt[D] all).
  std::uint64_t x_split = ~std::uint64_t(0), x_first = 0, x_second = 0;
  std::uint64_t y_split = ~std::uint64_t(0), y_first = 0, y_second = 0;
};

/// dsp::reshard on bytes (engine/regroup.hpp): `x`/`y` the local blocks
/// (nullptr where a rank has none), `desc` this rank's description, `err` a
/// local failure found by the front end. Collective over `parent`.
template <class M>
void run_reshard(PortOn<M>& parent, Signature sig, std::string err, ReshardDesc desc, const void* x, void* y,
                 std::size_t elem_bytes);

/// A redistribution on one communicator where a side is Zigzag or Blocks
/// (engine/recut.hpp): the blocks, the element size, the global extents, and
/// how each side cuts its dim; and the call's wire (the same for every
/// tensor of a batch) with the tensor's element kind and wire kernels (a
/// kernels/convert.hpp WireKernels, nullptr on Wire::exact).
struct RecutArgs {
  const void* src = nullptr;
  void* dst = nullptr;
  std::size_t elem_bytes = 0;
  std::span<const std::size_t> global;
  CutSide from, to;
  Wire wire = Wire::exact;
  ElemKind kind = ElemKind::other;
  const void* wire_kernels = nullptr;
};

struct RecutRun;
/// The engine of a mesh plan's recut steps (engine/recut.hpp) for memory
/// space M, reached through OpArgs::recut: the typed front end passes it
/// (recut_hooks<M>()) only where a layout has a Zigzag, so that the files of
/// other operations do not compile it. `prepare` plans the step's exchange
/// into slot `slot` (the step's index) of the thread's prepared exchanges.
template <class M>
struct RecutHooks {
  RecutRun* (*prepare)(PortOn<M>&, std::span<const RecutArgs>, SwitchAlgorithm, std::size_t slot);
  void (*execute)(PortOn<M>&, std::span<const RecutArgs>, const RecutRun&);
};
template <class M>
const void* recut_hooks();

/// Runs a redistribution of one tensor or a batch (items: one per tensor, a
/// batch's of equal layouts, any extents): plan, agreement (`sig`, `err` a
/// local failure), one exchange (or each tensor's own, in turn, where each
/// moves without copies; on a wire, always one packed exchange of wire
/// sections). Collective over `port`.
template <class M>
void run_recut(PortOn<M>& port, Signature sig, std::string err, std::span<const RecutArgs> items);

struct RootArgs {
  const void* in = nullptr;  // the whole tensor, on the root only
  void* out = nullptr;       // this rank's block
  std::size_t elem_bytes = 0;
  std::span<const std::size_t> global;
  long d = -1;  // Sharded<d> (scatter), or -1: Replicated (broadcast)
  int root = 0;
};

/// Scatter (d >= 0) or broadcast (d < 0) of a tensor held by the root
/// (dsp::distribute). Collective; `err` carries a local failure.
template <class M>
void run_from_root(PortOn<M>& comm, Signature sig, std::string err, const RootArgs& a);

/// A call from its facts, blocking: the signature, the output checks, then
/// run_operation. Collective over the group.
template <class M>
void run_call(const OpGroup<M>& g, const CallFacts& f);

/// A call from its facts, split-phase: as run_call, through start_operation.
template <class M>
std::unique_ptr<Flight<M>> start_call(const OpGroup<M>& g, std::shared_ptr<void> keep, const CallFacts& f);

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
extern template void run_call<Kokkos::HostSpace>(const OpGroup<Kokkos::HostSpace>&, const CallFacts&);
extern template std::unique_ptr<Flight<Kokkos::HostSpace>> start_call<Kokkos::HostSpace>(
    const OpGroup<Kokkos::HostSpace>&, std::shared_ptr<void>, const CallFacts&);
extern template void execute_local_copy<Kokkos::HostSpace>(PortOn<Kokkos::HostSpace>&, const CopyTask&, const void*,
                                                           void*, std::size_t);
extern template void execute_split<Kokkos::HostSpace>(PortOn<Kokkos::HostSpace>&, std::span<const std::size_t>,
                                                      std::size_t, const void*, void*, std::size_t);
extern template void run_from_root<Kokkos::HostSpace>(PortOn<Kokkos::HostSpace>&, Signature, std::string,
                                                      const RootArgs&);
extern template void run_reshard<Kokkos::HostSpace>(PortOn<Kokkos::HostSpace>&, Signature, std::string, ReshardDesc,
                                                    const void*, void*, std::size_t);
extern template void run_recut<Kokkos::HostSpace>(PortOn<Kokkos::HostSpace>&, Signature, std::string,
                                                  std::span<const RecutArgs>);
extern template const void* recut_hooks<Kokkos::HostSpace>();
#endif

}  // namespace dsp::detail
