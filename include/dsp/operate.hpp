// SPDX-License-Identifier: BSD-3-Clause
// dsp: from typed tensors to the engine: the one typed path of every front
// end (dynamic_switch, gather, batches, wires, split-phase, redistribute).
// Checks the outputs, builds the agreement signature, allocates (recycled)
// outputs, and hands pointers, element sizes, extents and the compile-time
// plan to the type-erased engine (engine/api.hpp). Kept thin: what a user's
// file instantiates per call is this, not the engine.
#pragma once

#include <dsp/engine/agree.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/engine/workspace.hpp>
#include <dsp/group.hpp>
#include <dsp/layout.hpp>
#include <dsp/plan/redistribute.hpp>
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
#include <dsp/engine/operation.hpp>
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

/// What is wrong with an output, as text (cold: only on error).
DSP_FUNC std::string output_error(const char* op, int rank, std::span<const std::size_t> x_extents,
                                  std::span<const std::size_t> y_extents, bool same_group, bool overlap);
#if DSP_FUNC_BODIES
DSP_FUNC std::string output_error(const char* op, int rank, std::span<const std::size_t> x_extents,
                                  std::span<const std::size_t> y_extents, bool same_group, bool overlap) {
  const std::string who = std::string(op) + " (rank " + std::to_string(rank) + ")";
  if (!std::equal(x_extents.begin(), x_extents.end(), y_extents.begin(), y_extents.end()))
    return who + ": the output has global extents " + text(y_extents) + " but the input " + text(x_extents);
  if (!same_group)
    return who +
           ": the output lives on a different communicator than the input (not the same ranks in the "
           "same order)";
  if (overlap) return who + ": the output shares memory with the input; dsp does not work in place";
  return "";
}
#endif

/// Why `y` cannot receive a transition of `x`, or "". Builds text only on error.
template <class X, class Y>
std::string check_output(const char* op, const X& x, const Y& y) {
  const bool same_extents = y.global_extents() == x.global_extents();
  const bool same = same_group(x.communicator(), y.communicator());
  const bool overlap = overlaps(x.local(), y.local());
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
  Busy busy(world, op_name(sig.op));
  agree(world, sig, failure_text(sig.op, world.rank(), e));
  throw ResourceError(failure_text(sig.op, world.rank(), e));  // not reached: agree throws
}
#endif

/// The output of an allocating call: a recycled block when one of these
/// extents is idle (see OutputPool), else a new uninitialized one. Collective
/// on failure: every rank raises.
template <class Y, class X>
Y allocate_output(const X& x, Op op, long dst_layout, const std::source_location& loc) {
  const auto& c = x.communicator();
  try {
    require_kokkos(op_name(static_cast<std::uint32_t>(op)));
    using V = typename Y::view_type;
    const auto e = box_of<typename Y::layout_type>(x.global_extents(), c).count;
    V v = output_pool<V>(c).get(e, [&] { return Y::uninitialized(c, x.global_extents()).local(); });
    return Y(unchecked_t{}, c, x.global_extents(), std::move(v));
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

/// The placement codes of a layout, one per mesh axis (one for a placement).
template <class L>
inline constexpr auto codes_v = placement_codes<L>::value;

/// The bytes a view spans, [begin, end).
template <class V>
std::pair<const unsigned char*, const unsigned char*> byte_range(const V& v) {
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  return {b, v.size() == 0 ? b : b + v.span() * sizeof(typename V::value_type)};
}
inline bool ranges_overlap(std::pair<const unsigned char*, const unsigned char*> a,
                           std::pair<const unsigned char*, const unsigned char*> b) {
  return a.first != a.second && b.first != b.second && a.first < b.second && b.first < a.second;
}

template <class X>
constexpr bool wire_ok_for() {
  return std::is_same_v<typename tensor_t<X>::value_type, float>;
}

/// What is wrong with a batch's arguments, as text (cold: only on error):
/// per tensor, whether its extents equal tensor 0's, whether it lives on
/// tensor 0's group, whether it holds float; and the byte ranges of the
/// inputs and outputs. Sets `status` to bad_argument or bad_output.
DSP_FUNC std::string batch_error(const char* op, int rank, std::size_t n, const bool* extents_ok, const bool* group_ok,
                                 const bool* float_ok, Wire wire,
                                 const std::pair<const unsigned char*, const unsigned char*>* in,
                                 const std::pair<const unsigned char*, const unsigned char*>* out, Status& status);
#if DSP_FUNC_BODIES
DSP_FUNC std::string batch_error(const char* op, int rank, std::size_t n, const bool* extents_ok, const bool* group_ok,
                                 const bool* float_ok, Wire wire,
                                 const std::pair<const unsigned char*, const unsigned char*>* in,
                                 const std::pair<const unsigned char*, const unsigned char*>* out, Status& status) {
  const std::string who = std::string(op) + " (rank " + std::to_string(rank) + ")";
  status = Status::bad_argument;
  for (std::size_t t = 0; t < n; ++t) {
    const std::string k = std::to_string(t);
    if (!extents_ok[t])
      return who + ": tensor " + k + " of the batch has other global extents than tensor 0; a batch moves " +
             "tensors of equal extents";
    if (!group_ok[t]) return who + ": tensor " + k + " of the batch lives on another communicator than tensor 0";
    if (wire != Wire::exact && !float_ok[t])
      return who + ": a low-precision wire (" + wire_name(wire) + ") needs float tensors; tensor " + k + " is not";
    for (std::size_t u = 0; u < n; ++u)
      if (u != t && (ranges_overlap(out[t], in[u]) || ranges_overlap(out[t], out[u]))) {
        status = Status::bad_output;
        return who + ": output " + k + " shares memory with " + (ranges_overlap(out[t], in[u]) ? "input " : "output ") +
               std::to_string(u) + " of the batch; dsp does not work in place";
      }
  }
  return "";
}
#endif

/// The local checks of an operation on tensors xs into ys (every output,
/// every pair of tensors of a batch); the first failure as text, or "".
/// `status` says what failed: an output (bad_output) or the batch's
/// arguments (bad_argument), for the other ranks' message.
template <class Xs, class Ys, std::size_t... I>
std::string check_items(const char* op, const Xs& xs, const Ys& ys, Wire wire, Status& status,
                        std::index_sequence<I...>) {
  status = Status::bad_output;
  constexpr std::size_t n = sizeof...(I);
  const auto& x0 = std::get<0>(xs);
  std::string err;
  auto first = [&](std::string e) {
    if (err.empty()) err = std::move(e);
  };
  (first(check_output(op, std::get<I>(xs), std::get<I>(ys))), ...);
  if (!err.empty() || n == 1) return err;
  const bool extents_ok[n] = {(std::get<I>(xs).global_extents() == x0.global_extents())...};
  const bool group_ok[n] = {same_group(std::get<I>(xs).communicator(), x0.communicator())...};
  const bool float_ok[n] = {wire_ok_for<std::tuple_element_t<I, Xs>>()...};
  const std::pair<const unsigned char*, const unsigned char*> in[n] = {
      byte_range(std::get<I>(xs).unchecked_local())...};
  const std::pair<const unsigned char*, const unsigned char*> out[n] = {
      byte_range(std::get<I>(ys).unchecked_local())...};
  bool ok = true;
  for (std::size_t t = 0; t < n; ++t) {
    ok = ok && extents_ok[t] && group_ok[t] && (wire == Wire::exact || float_ok[t]);
    for (std::size_t u = 0; u < n; ++u)
      ok = ok && (u == t || !(ranges_overlap(out[t], in[u]) || ranges_overlap(out[t], out[u])));
  }
  if (ok) return "";
  return batch_error(op, x0.communicator().rank(), n, extents_ok, group_ok, float_ok, wire, in, out, status);
}

/// Everything the engine needs of one typed call, on the stack: signature,
/// local checks, items, the plan as values.
template <class Xs, class Ys, std::size_t K>
struct TypedCall {
  using X0 = tensor_t<std::tuple_element_t<0, Xs>>;
  using G = typename X0::communicator_type;
  using M = typename X0::memory_space;
  static constexpr std::size_t n = std::tuple_size_v<Xs>;

  Signature sig;
  std::string err;
  std::array<PackedItem, n> items{};
  OpArgs args;

  /// `op` names the call; `dst` is the signature's target layout (the
  /// primitives' one code; a redistribution sets each axis's below).
  template <std::size_t... I>
  TypedCall(Op op, long dst, const Xs& xs, const Ys& ys, Wire wire, const MeshPlan<K>& plan,
            const std::array<long, K>& from, const std::source_location& loc, std::index_sequence<I...> seq) {
    const X0& x0 = std::get<0>(xs);
    sig = make_signature<typename X0::value_type>(op, x0.global_extents(), 0, dst, loc);
    if constexpr (n > 1) set_types<typename tensor_t<std::tuple_element_t<I, Xs>>::value_type...>(sig);
    X0::set_layouts(sig, x0.communicator());
    sig.wire = static_cast<std::uint32_t>(wire);
    Status failed = Status::ok;
    err = check_items(op_name(static_cast<std::uint32_t>(op)), xs, ys, wire, failed, seq);
    if (!err.empty()) sig.status = static_cast<std::uint32_t>(failed);
    items = {PackedItem{std::get<I>(xs).unchecked_local().data(), std::get<I>(ys).unchecked_local().data(),
                        sizeof(typename tensor_t<std::tuple_element_t<I, Xs>>::value_type)}...};
    constexpr int rt = reduce_type_code<typename X0::value_type>();
    args = OpArgs{items,
                  std::span<const std::size_t>(x0.global_extents()),
                  std::span<const MeshStep>(plan.steps.data(), plan.size),
                  std::span<const long>(from),
                  wire,
                  static_cast<ReduceType>(rt < 0 ? 0 : rt)};
  }
};

/// Runs the operation of `plan` on tensors xs into ys (tuples of
/// references), blocking. Collective over their group.
template <class Xs, class Ys, std::size_t K>
void operate(Op op, long dst, const Xs& xs, const Ys& ys, Wire wire, const MeshPlan<K>& plan,
             const std::array<long, K>& from, const std::source_location& loc, long arg = 0,
             const long* dst_codes = nullptr) {
  TypedCall<Xs, Ys, K> call(op, dst, xs, ys, wire, plan, from, loc, std::make_index_sequence<std::tuple_size_v<Xs>>{});
  call.sig.arg = arg;
  if (dst_codes)
    for (std::size_t a = 0; a < K; ++a) call.sig.dst_layout[a] = dst_codes[a];
  using C = TypedCall<Xs, Ys, K>;
  GroupPorts<typename C::G, typename C::M> ports(std::get<0>(xs).communicator());
  run_operation<typename C::M>(ports.group(), call.args, call.sig, std::move(call.err));
}

/// Starts the operation of `plan` (split-phase); as operate.
template <class Xs, class Ys, std::size_t K>
auto start(Op op, long dst, const Xs& xs, const Ys& ys, Wire wire, const MeshPlan<K>& plan,
           const std::array<long, K>& from, const std::source_location& loc, long arg = 0,
           const long* dst_codes = nullptr) {
  TypedCall<Xs, Ys, K> call(op, dst, xs, ys, wire, plan, from, loc, std::make_index_sequence<std::tuple_size_v<Xs>>{});
  call.sig.arg = arg;
  if (dst_codes)
    for (std::size_t a = 0; a < K; ++a) call.sig.dst_layout[a] = dst_codes[a];
  using C = TypedCall<Xs, Ys, K>;
  auto ports = std::make_shared<GroupPorts<typename C::G, typename C::M>>(std::get<0>(xs).communicator());
  const OpGroup<typename C::M>& g = ports->group();
  return start_operation<typename C::M>(g, std::move(ports), call.args, call.sig, std::move(call.err));
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
