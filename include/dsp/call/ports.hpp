// SPDX-License-Identifier: BSD-3-Clause
// dsp: the Ports of a group, what the type-erased engine runs on: the world
// communicator's and one per mesh axis.
#pragma once

#include <dsp/core/group_traits.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/api.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <type_traits>

namespace dsp::detail {

/// The Ports of a group (engine/api.hpp's OpGroup points into it): the
/// world communicator's, and one per mesh axis; a plain communicator is its
/// own only axis (one port).
template <class G, class M>
class GroupPorts {
  using traits = group_traits<G>;
  using Comm = typename traits::comm_type;
  static constexpr std::size_t K = traits::axes;
  static constexpr bool plain = std::is_same_v<G, Comm>;

 public:
  explicit GroupPorts(const G& g) : world_(traits::world(g)) {
    if constexpr (!plain)
      for (std::size_t a = 0; a < K; ++a) axis_[a].emplace(traits::axis(g, a));
    const auto shape = traits::shape(g);
    const auto coords = traits::coords(g);
    for (std::size_t a = 0; a < K; ++a) {
      group_.shape[a] = shape[a];
      group_.coords[a] = coords[a];
      group_.axis[a] = plain ? &world_ : &*axis_[a];
    }
    group_.world = &world_;
    group_.axes = K;
  }
  GroupPorts(const GroupPorts&) = delete;
  GroupPorts& operator=(const GroupPorts&) = delete;
  /// The group for the engine (pointers into this object).
  const OpGroup<M>& group() const noexcept { return group_; }

 private:
  PortOf<Comm, M> world_;
  std::array<std::optional<PortOf<Comm, M>>, plain ? 1 : K> axis_;
  OpGroup<M> group_;
};

}  // namespace dsp::detail
