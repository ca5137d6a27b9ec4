// SPDX-License-Identifier: BSD-3-Clause
// dsp: the typed front end of a redistribution on a plain communicator where
// a side is Zigzag<D> or Blocks<D>: each side as a detail::Cut, the output
// checked, the signature made, then the engine's run_recut (one agreement,
// one exchange).
#pragma once

#include <dsp/call/operate.hpp>
#include <dsp/core/agree.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/layout.hpp>
#include <dsp/partition.hpp>
#include <dsp/tensor.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <source_location>
#include <string>
#include <tuple>
#include <utility>

#if DSP_ENGINE_DEFINITIONS
#include <dsp/engine/recut.hpp>
#endif

namespace dsp::detail {

/// Whether a redistribution from L to To involves Zigzag or Blocks.
template <class L, class To>
inline constexpr bool involves_cut_v = is_cut_v<L> || is_cut_v<To>;

/// The rules of a redistribution with a cut side.
template <class L, class To>
constexpr bool cut_pair_ok() {
  constexpr bool no_partial = !is_partial_v<L> && !is_partial_v<To>;
  static_assert(no_partial,
                "dsp::redistribute: between Partial and Zigzag or Blocks there is no one exchange; reduce first "
                "(redistribute to Replicated or Sharded<D>), then move to Zigzag or Blocks.");
  return no_partial;
}

/// How tensor t's layout L cuts its dim over t's communicator.
template <class L, class X>
CutSide cut_side(const X& t) {
  const auto& g = t.global_extents();
  const std::size_t n = std::size_t(t.communicator().size());
  if constexpr (is_cut_v<L>) return CutSide{L::dim, t.cut()};
  else if constexpr (is_sharded_v<L>) return CutSide{L::dim, Cut{Cut::Kind::even, g[L::dim], n, nullptr}};
  else return CutSide{0, Cut{Cut::Kind::whole, g[0], n, nullptr}};
}

template <class X>
std::uint64_t sizes_hash_of(const X& t) {
  if constexpr (is_blocks_v<typename X::layout_type>) return block_sizes_hash(t.block_sizes());
  else return 0;
}

/// The output of an allocating redistribution with a cut side: as
/// allocate_output, for a Zigzag output too.
template <class Y, class X>
Y allocate_cut_output(const X& x, const std::source_location& loc) {
  if constexpr (!is_cut_v<typename Y::layout_type>) {
    return allocate_output<Y>(x, Op::redistribute, layout_code<typename Y::layout_type>(), loc);
  } else {
    const auto& c = x.communicator();
    try {
      require_kokkos(op_name(static_cast<std::uint32_t>(Op::redistribute)));
      using V = typename Y::view_type;
      const auto e = Y(unchecked_t{}, c, x.global_extents(), V()).local_extents();
      V v = output_pool<V>(c).get(
          e, [&] { return allocate_view<V>("dsp::DistTensor", e, false, std::make_index_sequence<Y::rank>{}); });
      return Y(unchecked_t{}, c, x.global_extents(), std::move(v));
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      PortOf<typename X::communicator_type> world(c);
      allocation_failed(world, signature_of(Op::redistribute, x, layout_code<typename Y::layout_type>(), loc), e);
    }
  }
}

/// One tensor's part of a redistribution with a cut side: x (layout L) into
/// y (layout To), on `wire` (NoWire: exact, and no wire kernels compiled).
template <class To, class W, class X, class Y>
RecutArgs recut_args(const X& x, Y& y, W wire) {
  using T = typename X::value_type;
  RecutArgs a;
  a.src = x.unchecked_local().data();
  a.dst = y.unchecked_local().data();
  a.elem_bytes = sizeof(T);
  a.global = x.global_extents();
  a.from = cut_side<typename X::layout_type>(x);
  a.to = cut_side<To>(y);
  a.wire = wire_value(wire);
  a.kind = elem_kind_v<T>;
  if constexpr (!std::is_same_v<W, NoWire>)
    if (a.wire != Wire::exact) a.wire_kernels = wire_kernels_of<T, typename X::memory_space::execution_space>();
  return a;
}

/// x (layout L) into y (layout To), both on one plain communicator, on
/// `wire` (NoWire or a Wire).
template <class To, class W, class X, class Y>
void recut_into(const X& x, Y& y, W wire, const std::source_location& loc) {
  using L = typename X::layout_type;
  using T = typename X::value_type;
  using Comm = typename X::communicator_type;
  Signature sig = make_signature<T>(Op::redistribute, x.global_extents(), layout_code<L>(), layout_code<To>(), loc);
  sig.tensor_rank = X::rank;
  sig.arg = static_cast<std::int64_t>(sizes_hash_of(x) ^ (sizes_hash_of(y) * 31));
  std::string err = check_output(op_name(sig.op), x, y);
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(Status::bad_output);
  const RecutArgs a = recut_args<To>(x, y, wire);
  PortOf<Comm> port(x.communicator());
  if constexpr (is_blocks_v<L> || is_blocks_v<To>) {
    try {
      run_recut<typename X::memory_space>(port, sig, std::move(err), std::span<const RecutArgs>(&a, 1));
    } catch (const MismatchError& e) {  // name this rank's sizes: the agreement compares a hash
      std::string mine;
      if constexpr (is_blocks_v<L>) mine += " x's Blocks sizes " + text(std::span<const std::size_t>(x.block_sizes()));
      if constexpr (is_blocks_v<To>) mine += " y's Blocks sizes " + text(std::span<const std::size_t>(y.block_sizes()));
      throw MismatchError(std::string(e.what()) + " (rank " + std::to_string(x.communicator().rank()) + ":" + mine +
                          ")");
    }
  } else {
    run_recut<typename X::memory_space>(port, sig, std::move(err), std::span<const RecutArgs>(&a, 1));
  }
}

/// Whether the tensors of a batch (a tuple of references) differ in global extents.
template <class Xs>
bool mixed_extents(const Xs& xs) {
  return std::apply(
      [](const auto& x0, const auto&... x) { return ((x.global_extents() != x0.global_extents()) || ...); }, xs);
}

/// A batch xs into ys (tuples of references), each of layout To, on one
/// plain communicator: one agreement (the element types, every tensor's
/// extents and Blocks sizes in Signature::shapes), then one exchange (or each tensor's
/// own, in turn, where each moves without copies). `op` and `dst` name the
/// front end in the agreement; `wire`: NoWire or a Wire.
template <class To, class W, class Xs, class Ys>
void recut_batch_into(Op op, long dst, const Xs& xs, const Ys& ys, W wire, const std::source_location& loc) {
  using X0 = tensor_t<std::tuple_element_t<0, Xs>>;
  using Comm = typename X0::communicator_type;
  constexpr std::size_t n = std::tuple_size_v<Xs>;
  const X0& x0 = std::get<0>(xs);
  Signature sig = make_signature<typename X0::value_type>(op, x0.global_extents(),
                                                          layout_code<typename X0::layout_type>(), dst, loc);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    set_types<typename tensor_t<std::tuple_element_t<I, Xs>>::value_type...>(sig);
  }
  (std::make_index_sequence<n>{});
  sig.tensor_rank = X0::rank;
  std::array<RecutArgs, n> items;
  std::array<ByteRange, n> in, out;
  std::string err;
  ShapeHash h;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    auto one = [&](const auto& x, auto& y, std::size_t k) {
      items[k] = recut_args<To>(x, y, wire);
      in[k] = byte_range(x.unchecked_local()), out[k] = byte_range(y.unchecked_local());
      h.add(std::span<const std::size_t>(x.global_extents()));
      if (const std::uint64_t b = sizes_hash_of(x) ^ (sizes_hash_of(y) * 31)) h.add(b);
      if (!err.empty()) return;
      const std::string who =
          std::string(op_name(std::uint32_t(op))) + " (rank " + std::to_string(x0.communicator().rank()) + ")";
      if (!same_group(x.communicator(), x0.communicator()))
        err = who + ": tensor " + std::to_string(k) + " of the batch lives on another communicator than tensor 0";
      else if (y.global_extents() != x.global_extents() || !same_group(x.communicator(), y.communicator()))
        err = output_error(op_name(std::uint32_t(op)), x.communicator().rank(), x.global_extents(), y.global_extents(),
                           same_group(x.communicator(), y.communicator()), false, long(k));
    };
    (one(std::get<I>(xs), std::get<I>(ys), I), ...);
  }
  (std::make_index_sequence<n>{});
  for (std::size_t k = 0; k < n && err.empty(); ++k)
    for (std::size_t u = 0; u < n; ++u)
      if (ranges_overlap(out[k], in[u]) || (u != k && ranges_overlap(out[k], out[u]))) {
        err = std::string(op_name(std::uint32_t(op))) + " (rank " + std::to_string(x0.communicator().rank()) +
              "): output " + std::to_string(k) + " shares memory with " +
              (ranges_overlap(out[k], in[u]) ? "input " : "output ") + std::to_string(u) +
              " of the batch; dsp does not work in place";
        break;
      }
  sig.shapes = h.h;
  sig.arg = op == Op::batch_switch ? long(n) : long(switch_algorithm());  // as the batch's other front ends
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(Status::bad_output);
  PortOf<Comm> port(x0.communicator());
  run_recut<typename X0::memory_space>(port, sig, std::move(err), std::span<const RecutArgs>(items));
}

}  // namespace dsp::detail
