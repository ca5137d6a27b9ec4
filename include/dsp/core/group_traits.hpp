// SPDX-License-Identifier: BSD-3-Clause
// dsp: a group of ranks as the rooms below the front ends see it. A plain
// communicator is a mesh of one axis; dsp::Mesh (mesh.hpp) specializes
// group_traits for itself.
#pragma once

#include <array>
#include <cstddef>

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

}  // namespace dsp::detail
