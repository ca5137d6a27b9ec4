// SPDX-License-Identifier: BSD-3-Clause
// dsp: a group of ranks as the front ends see it. A plain communicator is a
// mesh of one axis; dsp::Mesh (mesh.hpp) specializes group_traits for itself.
// GroupPorts turns either into the Ports the engine runs on.
#pragma once

#include <dsp/comm/port.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/plan/redistribute.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <type_traits>

namespace dsp::detail {

/// A plain communicator seen as a mesh of one axis.
template <class G>
struct group_traits {  // a Communicator
  static constexpr std::size_t axes = 1;
  using comm_type = G;
  static const G& world(const G& g) { return g; }
  static const G& axis(const G& g, std::size_t) { return g; }
  // Spelled out: nvcc's front end (13.0) drops the braces of `return {g.size()};`.
  static std::array<int, 1> shape(const G& g) { return std::array<int, 1>{{g.size()}}; }
  static std::array<int, 1> coords(const G& g) { return std::array<int, 1>{{g.rank()}}; }
};

/// The Ports of a group (engine/operation.hpp's OpGroup points into it): the
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
