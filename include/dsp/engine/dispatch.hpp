// SPDX-License-Identifier: BSD-3-Clause
// dsp: from typed tensors to the engine. Builds the signature, checks the
// output, allocates (recycled) outputs, and calls the type-erased engine.
#pragma once

#include <dsp/engine/agree.hpp>
#include <dsp/engine/engine.hpp>
#include <dsp/engine/workspace.hpp>
#include <dsp/plan/gather.hpp>
#include <dsp/tensor.hpp>

#include <exception>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>

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

/// Why `y` cannot receive a transition of `x`, or "". Builds text only on error.
template <class X, class Y>
std::string check_output(const char* op, const X& x, const Y& y) {
  auto who = [&] { return std::string(op) + " (rank " + std::to_string(x.communicator().rank()) + ")"; };
  if (y.global_extents() != x.global_extents())
    return who() + ": the output has global extents " + text(y.global_extents()) + " but the input " +
           text(x.global_extents());
  if (!same_group(x.communicator(), y.communicator()))
    return who() +
           ": the output lives on a different communicator than the input (not the same ranks in the "
           "same order)";
  if (overlaps(x.local(), y.local()))
    return who() + ": the output shares memory with the input; dsp does not work in place";
  return "";
}

template <class X>
Signature signature_of(Op op, const X& x, long dst_layout, const std::source_location& loc) {
  Signature s = make_signature<typename X::value_type>(op, x.global_extents(), 0, dst_layout, loc);
  X::set_layouts(s, x.communicator());
  return s;
}

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
    Signature sig = signature_of(op, x, dst_layout, loc);
    sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
    auto comm = group_traits<std::remove_cvref_t<decltype(c)>>::world(c);
    Busy busy(comm, op_name(sig.op));
    agree(comm, sig, failure_text(sig.op, comm.rank(), e));
    throw ResourceError(failure_text(sig.op, comm.rank(), e));  // not reached: agree throws
  }
}

template <std::size_t D, class X, class Y>
void switch_into(const X& x, Y& y, const std::source_location& loc) {
  Signature sig = signature_of(Op::dynamic_switch, x, long(D), loc);
  std::string err = check_output("dsp::dynamic_switch", x, y);
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(Status::bad_output);
  run_switch<typename X::memory_space>(x.communicator(), sig, std::move(err),
                                       SwitchArgs{x.local().data(), y.local().data(), sizeof(typename X::value_type),
                                                  x.global_extents(), X::layout_type::dim, D});
}

template <class X, class Y>
void gather_into(const X& x, Y& y, const std::source_location& loc) {
  Signature sig = signature_of(Op::gather, x, -1, loc);
  std::string err = check_output("dsp::gather", x, y);
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(Status::bad_output);
  run_gather<typename X::memory_space>(x.communicator(), sig, std::move(err),
                                       GatherArgs{x.local().data(), y.local().data(), sizeof(typename X::value_type),
                                                  x.global_extents(), X::layout_type::dim});
}

template <std::size_t D, class X, class Y>
void split_into(const X& x, Y& y) {
  const std::string err = check_output("dsp::split", x, y);
  if (!err.empty()) throw InvalidArgument(err);
  const auto& c = x.communicator();
  run_local_copy<typename X::memory_space>(c, plan_split(x.global_extents(), D, c.rank(), c.size()), x.local().data(),
                                           y.local().data(), sizeof(typename X::value_type));
}

}  // namespace dsp::detail
