// SPDX-License-Identifier: BSD-3-Clause
// dsp: a type's name and a string hash at compile time (for the agreement
// check's signatures, and to name a backend in wisdom).
#pragma once

#include <cstdint>
#include <string_view>

namespace dsp::detail {

template <class T>
constexpr std::string_view type_name() {
  std::string_view p = __PRETTY_FUNCTION__;  // "... [with T = float; ...]" (gcc) / "[T = float]" (clang)
  const auto b = p.find("T = ");
  if (b == std::string_view::npos) return p;
  p.remove_prefix(b + 4);
  const auto e = p.find_first_of(";]");
  return p.substr(0, e);
}

/// The name of a communicator type as measured plans (wisdom) key it: its
/// own, but a decorator that declares itself transparent to planning (the
/// counting communicator: it changes nothing about how data moves) is named
/// as the communicator it wraps, so instrumenting a run keeps its wisdom.
template <class Comm>
constexpr std::string_view backend_name() {
  if constexpr (requires {
                  typename Comm::inner_type;
                  requires Comm::transparent_to_planning;
                })
    return backend_name<typename Comm::inner_type>();
  else return type_name<Comm>();
}

constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 1469598103934665603ull) {
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

}  // namespace dsp::detail
