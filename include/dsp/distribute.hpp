// SPDX-License-Identifier: BSD-3-Clause
// dsp: hand every rank of a group the same input (the paper's dsp_dataloader):
// a tensor held by one root rank becomes a DistTensor on every rank.
#pragma once

#include <dsp/call/operate.hpp>
#include <dsp/comm/concepts.hpp>
#include <dsp/core/agree.hpp>
#include <dsp/core/exclusive.hpp>
#include <dsp/core/group_traits.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/layout.hpp>
#include <dsp/tensor.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace dsp {

/// Collective over `comm`: the tensor `source` held by rank `root` becomes a
/// DistTensor with layout L on every rank: a broadcast for Replicated, a
/// scatter of blocks for Sharded<D>. Only the root's `source` is read: it must
/// be contiguous row-major and accessible from the communicator's memory
/// space. The other ranks pass a view of the same type, whose extents and
/// contents are ignored (an empty view will do); they learn the extents from
/// the root. Throws on every rank when the ranks disagree on the element type,
/// tensor rank, layout, root or call site, when the root's view is unusable or
/// the root is out of range (InvalidArgument there, MismatchError elsewhere),
/// or when a rank cannot allocate its block (ResourceError there).
namespace detail {
/// The compile-time rules of distribute, in one place.
template <class L, class Comm, class V>
constexpr bool distribute_ok() {
  constexpr bool fits = layout_fits_v<L, V::rank>;
  static_assert(fits, "dsp::distribute: Sharded<D> requires D < the source view's rank.");
  constexpr bool reachable =
      Kokkos::SpaceAccessibility<typename Comm::memory_space::execution_space, typename V::memory_space>::accessible;
  static_assert(reachable,
                "dsp::distribute: the source view must be accessible from the communicator's memory "
                "space (dsp copies it there with the communicator's execution space).");
  return fits && reachable;
}
}  // namespace detail

template <Layout L, Communicator Comm, KokkosView V>
auto distribute(const Comm& comm, const V& source, int root = 0,
                std::source_location loc = std::source_location::current()) {
  if constexpr (!detail::distribute_ok<L, Comm, V>()) {
    return detail::Invalid{};
  } else {
    using T = typename V::non_const_value_type;
    constexpr std::size_t R = V::rank;
    using M = typename Comm::memory_space;
    using Out = DistTensor<T, R, L, Comm, M>;
    Comm c = comm;
    const int n = c.size(), p = c.rank();

    // 1. Agree on what is distributed, and learn the root's extents. A root out
    // of range is reported through the check like any local failure: ranks may
    // disagree on the root, and a rank that threw alone would leave the others
    // waiting in the check.
    detail::Signature sig = detail::make_signature<T>(detail::Op::distribute, {}, -1, detail::layout_code<L>(), loc);
    sig.tensor_rank = R;
    sig.root = root;
    std::string err;
    std::array<std::size_t, R> global{};
    if (root < 0 || root >= n) {
      err =
          "dsp::distribute: root " + std::to_string(root) + " is not a rank of a communicator of " + std::to_string(n);
      sig.status = static_cast<std::uint32_t>(detail::Status::bad_argument);
    } else if (p == root) {
      for (std::size_t d = 0; d < R; ++d) global[d] = source.extent(d);
      std::string why = detail::size_error(global, sizeof(T));
      if (why.empty()) why = detail::view_error(source, global);
      if (!why.empty()) {
        err = "dsp::distribute (root " + std::to_string(root) + "): the source view: " + why;
        sig.status = static_cast<std::uint32_t>(detail::Status::bad_local_view);
      }
    }
    {
      detail::ExclusiveUse use(c, "dsp::distribute");
      detail::agree(c, sig, err);
      std::vector<std::array<std::size_t, R>> all(static_cast<std::size_t>(n));
      c.control_all_gather(global.data(), all.data(), sizeof global);
      global = all[static_cast<std::size_t>(root)];
    }

    // 2. Allocate everywhere; the engine's own agreement makes every rank raise
    // if one could not. Then the scatter or broadcast.
    std::optional<Out> out;
    detail::set_extents(sig, global);
    try {
      out.emplace(Out::uninitialized(c, global));
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      sig.status = static_cast<std::uint32_t>(detail::Status::alloc_failed);
      err = detail::failure_text(sig.op, p, e);
    }
    long d = -1;
    if constexpr (is_sharded_v<L>) d = static_cast<long>(L::dim);
    detail::PortOf<Comm, M> port(c);
    detail::run_from_root<M>(port, sig, err,
                             detail::RootArgs{p == root ? source.data() : nullptr, out ? out->local().data() : nullptr,
                                              sizeof(T), global, d, root});
    return *out;
  }
}

}  // namespace dsp
