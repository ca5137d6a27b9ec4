// SPDX-License-Identifier: BSD-3-Clause
// dsp: from typed tensors to the engine: the one typed path of every front
// end (dynamic_switch, gather, batches, wires, split-phase, redistribute).
// Checks the outputs, builds the agreement signature, allocates (recycled)
// outputs, and hands pointers, element sizes, extents and the compile-time
// plan to the type-erased engine (engine/api.hpp). Kept thin: what a user's
// file instantiates per call is this, not the engine.
#pragma once

#include <dsp/call/ports.hpp>
#include <dsp/config.hpp>
#include <dsp/core/agree.hpp>
#include <dsp/core/buffers.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/half.hpp>
#if DSP_ENGINE_DEFINITIONS
#include <dsp/kernels/convert.hpp>
#endif
#include <dsp/layout.hpp>
#include <dsp/plan/mesh_plan.hpp>
#include <dsp/tensor.hpp>
#include <dsp/wire.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <complex>
#include <exception>
#include <memory>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// The engine's definitions (engine/api.hpp says when: not with DSP_COMPILED
// on a host-only Kokkos, whose engine is all in the dsp::compiled library).
#if DSP_ENGINE_DEFINITIONS
#include <dsp/engine/flight.hpp>
#include <dsp/engine/run.hpp>
#endif

namespace dsp::detail {

template <class X>
using tensor_t = std::remove_cvref_t<X>;

/// The DistTensor type like X but with layout L.
template <class X, class L>
struct relayout;
template <class T, std::size_t R, class L0, class Comm, class M, class L>
struct relayout<DistTensor<T, R, L0, Comm, M>, L> {
  using type = DistTensor<T, R, L, Comm, M>;
};
template <class X, class L>
using relayout_t = typename relayout<tensor_t<X>, L>::type;

/// What a front end returns when one of its static_asserts failed, so that
/// the assertion is the only error the user sees.
struct Invalid {};

/// The rules for the output `Y` of a call whose input is `X` and whose
/// output must be `Want` (X with the target layout): one static_assert per
/// requirement, so that the message names the one that failed; only the
/// first failing one fires.
template <class Y, class X, class Want>
constexpr bool output_type_ok() {
  using Yt = tensor_t<Y>;
  using Xt = tensor_t<X>;
  if constexpr (!is_dist_tensor_v<Yt>) {
    static_assert(is_dist_tensor_v<Yt>, "dsp: the output argument y must be a dsp::DistTensor.");
    return false;
  } else if constexpr (!std::is_same_v<typename Yt::value_type, typename Xt::value_type>) {
    static_assert(std::is_same_v<typename Yt::value_type, typename Xt::value_type>,
                  "dsp: the output y must have the input's element type (dsp does not convert elements).");
    return false;
  } else if constexpr (Yt::rank != Xt::rank) {
    static_assert(Yt::rank == Xt::rank, "dsp: the output y must have the input's tensor rank.");
    return false;
  } else if constexpr (!std::is_same_v<typename Yt::communicator_type, typename Xt::communicator_type>) {
    static_assert(std::is_same_v<typename Yt::communicator_type, typename Xt::communicator_type>,
                  "dsp: the output y must live on the input's communicator (or mesh) type.");
    return false;
  } else if constexpr (!std::is_same_v<typename Yt::memory_space, typename Xt::memory_space>) {
    static_assert(std::is_same_v<typename Yt::memory_space, typename Xt::memory_space>,
                  "dsp: the output y must live in the input's memory space.");
    return false;
  } else if constexpr (!std::is_same_v<Yt, Want>) {
    static_assert(std::is_same_v<Yt, Want>,
                  "dsp: the output y must have the call's target layout: Sharded<D> for dynamic_switch<D> and "
                  "split<D>, Replicated for gather, To for redistribute<To>.");
    return false;
  } else {
    return true;
  }
}

template <class Comm>
bool same_group(const Comm& a, const Comm& b) {
  if (a.id() == b.id()) return true;
  if constexpr (requires { a == b; }) return a == b;
  else return false;
}

template <class V>
bool overlaps(const V& a, const V& b) {
  if (a.size() == 0 || b.size() == 0) return false;
  const auto* a0 = a.data();
  const auto* b0 = b.data();
  return a0 < b0 + b.size() && b0 < a0 + a.size();
}

/// The bytes a view spans, [begin, end).
template <class V>
ByteRange byte_range(const V& v) {
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  return {b, v.size() == 0 ? b : b + v.span() * sizeof(typename V::value_type)};
}

/// Why `y` cannot receive a transition of `x`, or "". Builds text only on error.
template <class X, class Y>
std::string check_output(const char* op, const X& x, const Y& y) {
  const bool same_extents = y.global_extents() == x.global_extents();
  const bool same = same_group(x.communicator(), y.communicator());
  const bool overlap = ranges_overlap(byte_range(x.unchecked_local()), byte_range(y.unchecked_local()));
  if (same_extents && same && !overlap) return "";
  return output_error(op, x.communicator().rank(), x.global_extents(), y.global_extents(), same, overlap);
}

template <class X>
Signature signature_of(Op op, const X& x, long dst_layout, const std::source_location& loc) {
  Signature s = make_signature<typename X::value_type>(op, x.global_extents(), 0, dst_layout, loc);
  X::set_layouts(s, x.communicator());
  return s;
}

/// A failed allocation of an output, through the agreement, so that every
/// rank raises (this one ResourceError). Cold.
[[noreturn]] DSP_FUNC void allocation_failed(Port& world, Signature sig, const std::exception& e);
#if DSP_FUNC_BODIES
[[noreturn]] DSP_FUNC void allocation_failed(Port& world, Signature sig, const std::exception& e) {
  sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
  ExclusiveUse use(world, op_name(sig.op));
  agree(world, sig, failure_text(sig.op, world.rank(), e));
  throw ResourceError(failure_text(sig.op, world.rank(), e));  // not reached: agree throws
}
#endif

/// The output of an allocating call: a recycled block when one of these
/// extents is idle (see OutputPool), else a new uninitialized one. Collective
/// on failure: every rank raises. An output with a Blocks on a mesh axis
/// takes the input's sizes (where the input has that Blocks; else it does
/// not compile).
template <class Y, class X>
Y allocate_output(const X& x, Op op, long dst_layout, const std::source_location& loc) {
  const auto& c = x.communicator();
  using YL = typename Y::layout_type;
  constexpr bool sized = has_blocks_code<YL>();
  static_assert(!sized || keeps_blocks<typename X::layout_type, YL>(),
                "dsp::redistribute<To>(x) on a mesh: To has a Blocks<D> that x does not have on that axis, and "
                "the output's block sizes say where the blocks go; construct it (DistTensor{mesh, extents, sizes}) "
                "and call dsp::redistribute<To>(x, y).");
  try {
    require_kokkos(op_name(static_cast<std::uint32_t>(op)));
    using V = typename Y::view_type;
    if constexpr (!sized) {
      const auto e = box_of<YL>(x.global_extents(), c).count;
      V v = output_pool<V>(c).get(e, [&] { return Y::uninitialized(c, x.global_extents()).local(); });
      return Y(unchecked_t{}, c, x.global_extents(), std::move(v));
    } else if constexpr (keeps_blocks<typename X::layout_type, YL>()) {
      const auto e = box_of<YL>(x.global_extents(), c, x.cut_sizes()).count;
      V v = output_pool<V>(c).get(
          e, [&] { return allocate_view<V>("dsp::DistTensor", e, false, std::make_index_sequence<Y::rank>{}); });
      return Y(unchecked_t{}, c, x.global_extents(), std::move(v), x.shared_sizes());
    } else {
      return Y(unchecked_t{}, c, x.global_extents(), V());  // not reached: the static_assert above
    }
  } catch (const UsageError&) {
    throw;  // the same everywhere (Kokkos' state): no agreement possible, none needed
  } catch (const std::exception& e) {
    using traits = group_traits<std::remove_cvref_t<decltype(c)>>;
    PortOf<typename traits::comm_type> world(traits::world(c));
    allocation_failed(world, signature_of(op, x, dst_layout, loc), e);
  }
}

/// The reduce type of an element type, for Partial placements (-1: none).
template <class T>
constexpr int reduce_type_code() {
  if constexpr (std::is_same_v<T, float>) return int(ReduceType::f32);
  else if constexpr (std::is_same_v<T, double>) return int(ReduceType::f64);
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 4) return int(ReduceType::i32);
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8) return int(ReduceType::i64);
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 4) return int(ReduceType::u32);
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 8) return int(ReduceType::u64);
  else if constexpr (std::is_same_v<T, Kokkos::complex<float>> || std::is_same_v<T, std::complex<float>>)
    return int(ReduceType::c64);
  else if constexpr (std::is_same_v<T, Kokkos::complex<double>> || std::is_same_v<T, std::complex<double>>)
    return int(ReduceType::c128);
  else return -1;
}

/// Whether some low-precision wire carries X's element type (which one: a
/// run-time check, wire_carries, since the wire is a value).
template <class X>
constexpr bool wire_ok_for() {
  return elem_kind_v<typename tensor_t<X>::value_type> != ElemKind::other;
}

/// A call with no wire parameter (a plain switch, gather, redistribute): its
/// tensors travel exact, and this file compiles no wire kernels for them.
struct NoWire {};
constexpr Wire wire_value(Wire w) { return w; }
constexpr Wire wire_value(NoWire) { return Wire::exact; }

/// The wire kernels of T on Exec (nullptr where no wire carries T): compiled
/// here, for the types this file moves; with DSP_COMPILED on the host, the
/// library's.
template <class T, class Exec>
const void* wire_kernels_of() {
  if constexpr (elem_kind_v<T> == ElemKind::other) return nullptr;
#if DSP_ENGINE_DEFINITIONS
  else return wire_kernels_for<T, Exec>();
#else
  else return host_wire_kernels(elem_kind_v<T>);
#endif
}

/// Fills the facts of tensor pair (x, y) of a call.
template <bool Wired, class X, class Y, class X0>
void tensor_facts(TensorFacts& t, const X& x, const Y& y, const X0& x0) {
  using T = typename X::value_type;
  t.in = x.unchecked_local().data();
  t.out = y.unchecked_local().data();
  t.elem_bytes = sizeof(T);
  t.in_range = byte_range(x.unchecked_local());
  t.out_range = byte_range(y.unchecked_local());
  t.extents = x.global_extents().data();
  t.out_extents = y.global_extents().data();
  t.out_same_group = same_group(x.communicator(), y.communicator());
  t.same_group_as_first = same_group(x.communicator(), x0.communicator());
  t.kind = elem_kind_v<T>;
  if constexpr (Wired) t.wire = wire_kernels_of<T, typename X::memory_space::execution_space>();
  if constexpr (has_blocks_code<typename X::layout_type>() || has_blocks_code<typename Y::layout_type>()) {
    if constexpr (has_blocks_code<typename X::layout_type>()) t.sizes_hash = block_sizes_hash(x.block_sizes());
    if constexpr (has_blocks_code<typename Y::layout_type>()) t.sizes_hash ^= block_sizes_hash(y.block_sizes()) * 31;
  }
  const auto shape = group_traits<typename X::communicator_type>::shape(x.communicator());
  for (std::size_t a = 0; a < shape.size(); ++a) t.mesh_shape[a] = shape[a];
}

/// A call as its front end describes it: the operation, its plan, and what
/// the agreement check shows of it. Filled with designated initializers:
///   Call<1>{.op = Op::gather, .plan = &plan, .from = {long(d)}, .dst = -1, .loc = loc}
template <std::size_t K>
struct Call {
  Op op = Op::redistribute;
  const MeshPlan<K>* plan = nullptr;  // the steps (a static constexpr plan)
  std::array<long, K> from{};         // the input placement, one code per mesh axis
  long dst = 0;                       // the target placement, one code (a switch's D; gather: Replicated)
  const long* dst_codes = nullptr;    // or one code per axis (a redistribution; K of them, static)
  long arg = 0;                       // what else the ranks must agree on: a batch's size, the algorithm setting
  std::source_location loc;           // the call site
  const void* recut = nullptr;        // recut_hooks<M>() where a layout has a Zigzag (engine/api.hpp)
};

/// The facts of call `c` on tensors xs into ys (tuples of references):
/// everything the untyped half (run_call, start_call) needs.
template <class Xs, class Ys, class W, std::size_t K, std::size_t... I>
void call_facts(CallFacts& f, std::array<TensorFacts, sizeof...(I)>& tf, const Call<K>& c, const Xs& xs, const Ys& ys,
                W wire, std::index_sequence<I...>) {
  using X0 = tensor_t<std::tuple_element_t<0, Xs>>;
  using T0 = typename X0::value_type;
  const X0& x0 = std::get<0>(xs);
  f.op = c.op, f.dst = c.dst, f.arg = c.arg, f.dst_codes = c.dst_codes, f.wire = wire_value(wire), f.loc = c.loc;
  f.n = sizeof...(I);
  f.tensor_rank = X0::rank;
  f.rank = x0.communicator().rank();
  if constexpr (sizeof...(I) > 1) {
    using Types = BatchTypes<typename tensor_t<std::tuple_element_t<I, Xs>>::value_type...>;
    f.type_hash = Types::value.hash;
    f.elem_bytes = (sizeof(typename tensor_t<std::tuple_element_t<I, Xs>>::value_type) + ...);
    f.type_name = Types::value.names;
  } else {
    f.type_hash = SingleType<T0>::value.hash;
    f.elem_bytes = sizeof(T0);
    f.type_name = SingleType<T0>::value.names;
  }
  static constexpr auto codes = placement_codes<typename X0::layout_type>::value;
  f.src_codes = codes.data();
  f.mesh_axes = is_mesh_v<typename X0::communicator_type> ? std::uint32_t(codes.size()) : 0;
  const auto shape = group_traits<typename X0::communicator_type>::shape(x0.communicator());
  for (std::size_t a = 0; a < shape.size(); ++a) f.mesh_shape[a] = shape[a];
  (tensor_facts<!std::is_same_v<W, NoWire>>(tf[I], std::get<I>(xs), std::get<I>(ys), x0), ...);
  f.t = tf.data();
  constexpr int rt = reduce_type_code<T0>();
  f.rtype = static_cast<ReduceType>(rt < 0 ? 0 : rt);
  f.steps = c.plan->steps.data(), f.n_steps = c.plan->size;
  f.recut = c.recut;
  f.from = c.from.data(), f.axes = K;
  f.sizes = CutSizes{x0.cut_sizes().in, std::get<0>(ys).cut_sizes().in};
}

/// Runs call `c` on tensors xs into ys (tuples of references), blocking.
/// Collective over their group.
template <std::size_t K, class Xs, class Ys, class W>
void operate(const Call<K>& c, const Xs& xs, const Ys& ys, W wire) {
  using X0 = tensor_t<std::tuple_element_t<0, Xs>>;
  CallFacts f;
  std::array<TensorFacts, std::tuple_size_v<Xs>> tf;
  call_facts(f, tf, c, xs, ys, wire, std::make_index_sequence<std::tuple_size_v<Xs>>{});
  GroupPorts<typename X0::communicator_type, typename X0::memory_space> ports(std::get<0>(xs).communicator());
  run_call<typename X0::memory_space>(ports.group(), f);
}

/// Starts call `c` (split-phase); as operate.
template <std::size_t K, class Xs, class Ys, class W>
auto start(const Call<K>& c, const Xs& xs, const Ys& ys, W wire) {
  using X0 = tensor_t<std::tuple_element_t<0, Xs>>;
  using M = typename X0::memory_space;
  CallFacts f;
  std::array<TensorFacts, std::tuple_size_v<Xs>> tf;
  call_facts(f, tf, c, xs, ys, wire, std::make_index_sequence<std::tuple_size_v<Xs>>{});
  auto ports = std::make_shared<GroupPorts<typename X0::communicator_type, M>>(std::get<0>(xs).communicator());
  const OpGroup<M>& g = ports->group();
  return start_call<M>(g, std::move(ports), f);
}

/// A local copy of one run pattern pair (a split's slice). Not collective.
template <class X, class Y>
void split_into(const X& x, Y& y, std::size_t d) {
  const std::string err = check_output("dsp::split", x, y);
  if (!err.empty()) throw InvalidArgument(err);
  require_kokkos("dsp::split");
  const auto& c = x.communicator();
  PortOf<typename X::communicator_type, typename X::memory_space> port(c);
  execute_split<typename X::memory_space>(port, x.global_extents(), d, x.unchecked_local().data(),
                                          y.unchecked_local().data(), sizeof(typename X::value_type));
}

}  // namespace dsp::detail
