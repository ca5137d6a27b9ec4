// dsp: DistTensor, a global tensor distributed by a layout over a communicator.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/detail/agree.hpp>
#include <dsp/error.hpp>
#include <dsp/layout.hpp>
#include <dsp/partition.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace dsp {

/// Global extents of a rank-R tensor. Built from R integers of any type
/// (`{T, S, C}`), negative ones rejected, or from a std::array<std::size_t, R>.
template <std::size_t R>
struct Extents {
  std::array<std::size_t, R> values{};

  Extents(const std::array<std::size_t, R>& v) : values(v) {}  // NOLINT: implicit by design
  template <std::integral... I>
    requires(sizeof...(I) == R)
  Extents(I... e) {  // NOLINT: implicit by design, so that {T, S, C} converts
    std::size_t d = 0;
    ((values[d++] = checked(e)), ...);
  }

 private:
  template <std::integral I>
  static std::size_t checked(I e) {
    if constexpr (std::is_signed_v<I>)
      if (e < 0) throw InvalidArgument("dsp::Extents: extent " + std::to_string(e) + " is negative");
    return static_cast<std::size_t>(e);
  }
};

namespace detail {
template <class T, std::size_t R>
struct add_pointers {
  using type = typename add_pointers<T, R - 1>::type*;
};
template <class T>
struct add_pointers<T, 0> {
  using type = T;
};

template <class V, std::size_t R, std::size_t... I>
V allocate_view(const std::string& label, const std::array<std::size_t, R>& e, bool init,
                std::index_sequence<I...>) {
  if (init) return V(label, e[I]...);
  return V(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), e[I]...);
}

/// This rank's block of a tensor with global extents `g` under layout L.
template <Layout L, std::size_t R>
std::array<std::size_t, R> local_extents(const std::array<std::size_t, R>& g, int rank, int size) {
  auto e = g;
  if constexpr (is_sharded_v<L>) e[L::dim] = Partition{g[L::dim], std::size_t(size)}.count(std::size_t(rank));
  return e;
}

template <Layout L, std::size_t R>
std::array<std::size_t, R> local_offsets(const std::array<std::size_t, R>& g, int rank, int size) {
  std::array<std::size_t, R> o{};
  if constexpr (is_sharded_v<L>) o[L::dim] = Partition{g[L::dim], std::size_t(size)}.offset(std::size_t(rank));
  return o;
}

template <std::size_t R>
std::string text(const std::array<std::size_t, R>& e) {
  std::string t = "[";
  for (std::size_t d = 0; d < R; ++d) t += (d ? ", " : "") + std::to_string(e[d]);
  return t + "]";
}

/// Why a tensor of global extents `g` with `elem_bytes`-byte elements cannot
/// exist, or "". Its size in bytes must fit in std::size_t: past that, every
/// size computed from the extents (the plans', Kokkos' allocation) wraps around
/// to a small number, and a tensor with extents [2^32, 2^31, 4] would get an
/// empty block and be written out of bounds.
template <std::size_t R>
std::string size_error(const std::array<std::size_t, R>& g, std::size_t elem_bytes) {
  std::size_t bytes = elem_bytes;
  for (std::size_t x : g)
    if (x == 0) return "";
  for (std::size_t x : g) {
    if (bytes > static_cast<std::size_t>(-1) / x)
      return "dsp::DistTensor: global extents " + text(g) + " of " + std::to_string(elem_bytes) +
             "-byte elements exceed the address space (more than 2^64 bytes; sizes would wrap around)";
    bytes *= x;
  }
  return "";
}

template <class T, std::size_t R>
const std::array<std::size_t, R>& checked_global(const std::array<std::size_t, R>& g) {
  if (const std::string why = size_error(g, sizeof(T)); !why.empty()) throw InvalidArgument(why);
  return g;
}

struct unchecked_t {};
}  // namespace detail

template <class T, std::size_t Rank, Layout L, Communicator Comm, class MemorySpace>
class DistTensor;

template <class X>
struct is_dist_tensor : std::false_type {};
template <class T, std::size_t Rank, class L, class Comm, class M>
struct is_dist_tensor<DistTensor<T, Rank, L, Comm, M>> : std::true_type {};
/// True for dsp::DistTensor types (cv-ref qualifiers ignored).
template <class X>
inline constexpr bool is_dist_tensor_v = is_dist_tensor<std::remove_cvref_t<X>>::value;

/// A tensor of global extents [E0, ..., E(Rank-1)] distributed over the ranks of
/// `Comm` as `Layout` says. Each rank holds one contiguous LayoutRight block
/// (`local()`). Copies are shallow, like Kokkos views: they share the block.
template <class T, std::size_t Rank, Layout L, Communicator Comm,
          class MemorySpace = typename Comm::memory_space>
class DistTensor {
  static_assert(Rank >= 1 && Rank <= detail::kMaxRank, "dsp::DistTensor: the rank must be between 1 and 8.");
  static_assert(layout_fits_v<L, Rank>,
                "dsp::DistTensor: Sharded<D> requires D < Rank; a tensor of rank R has dims 0 to R-1.");
  static_assert(std::is_trivially_copyable_v<T>,
                "dsp::DistTensor: the element type must be trivially copyable; dsp moves elements as bytes.");
  static_assert(Kokkos::is_memory_space<MemorySpace>::value,
                "dsp::DistTensor: MemorySpace must be a Kokkos memory space.");

 public:
  using value_type = T;
  using layout_type = L;
  using communicator_type = Comm;
  using memory_space = MemorySpace;
  using execution_space = typename MemorySpace::execution_space;
  using extents_type = std::array<std::size_t, Rank>;
  using view_type = Kokkos::View<typename detail::add_pointers<T, Rank>::type, Kokkos::LayoutRight, MemorySpace>;
  static constexpr std::size_t rank = Rank;

  /// Allocates this rank's block (zero-initialized). Local: no communication;
  /// ranks that disagree on `global` are caught by the next collective.
  /// Throws InvalidArgument when the tensor's size in bytes would not fit in
  /// std::size_t.
  DistTensor(const Comm& comm, Extents<Rank> global)
      : comm_(comm), global_(detail::checked_global<T>(global.values)),
        local_(detail::allocate_view<view_type>("dsp::DistTensor", local_extents(), true,
                                                std::make_index_sequence<Rank>{})) {}

  /// Wraps an existing block: `local` must have exactly this rank's partition
  /// extents and be contiguous row-major (any Kokkos layout with those strides).
  /// Collective when agreement checks are on: if any rank's view does not fit,
  /// every rank throws (the offending rank an InvalidArgument naming the
  /// extents, the others a MismatchError naming that rank).
  template <class V>
    requires Kokkos::is_view<V>::value
  DistTensor(const Comm& comm, Extents<Rank> global, const V& local) : comm_(comm), global_(global.values) {
    static_assert(V::rank == Rank, "dsp::DistTensor: the local view must have the tensor's rank.");
    static_assert(std::is_same_v<typename V::non_const_value_type, T>,
                  "dsp::DistTensor: the local view must hold the tensor's element type.");
    static_assert(Kokkos::SpaceAccessibility<MemorySpace, typename V::memory_space>::accessible,
                  "dsp::DistTensor: the local view must live in (or be accessible from) the tensor's memory space.");
    std::string why = check_view(local);
    detail::Signature sig;
    sig.op = static_cast<std::uint32_t>(detail::Op::construct);
    detail::set_type<T>(sig);
    sig.tensor_rank = Rank;
    sig.src_layout = sig.dst_layout = detail::layout_code<L>();
    if (!why.empty()) sig.status = static_cast<std::uint32_t>(detail::Status::bad_local_view);
    Comm c = comm_;
    detail::agree(c, sig, why);  // extents are not compared here: the next collective does that
    local_ = local;
  }

  /// Internal: a block already known to fit.
  DistTensor(detail::unchecked_t, const Comm& comm, const extents_type& global, view_type local)
      : comm_(comm), global_(global), local_(std::move(local)) {}

  /// This rank's block: a contiguous LayoutRight Kokkos view.
  const view_type& local() const noexcept { return local_; }
  const extents_type& global_extents() const noexcept { return global_; }
  extents_type local_extents() const { return detail::local_extents<L>(global_, comm_.rank(), comm_.size()); }
  /// Global index of local element (0, ..., 0).
  extents_type local_offsets() const { return detail::local_offsets<L>(global_, comm_.rank(), comm_.size()); }
  const Comm& communicator() const noexcept { return comm_; }
  std::size_t global_size() const { return product(global_); }
  std::size_t local_size() const { return local_.size(); }

  /// Allocates an uninitialized tensor (internal: outputs that are fully overwritten).
  static DistTensor uninitialized(const Comm& comm, const extents_type& global) {
    auto e = detail::local_extents<L>(global, comm.rank(), comm.size());
    return DistTensor(detail::unchecked_t{}, comm, global,
                      detail::allocate_view<view_type>("dsp::DistTensor", e, false, std::make_index_sequence<Rank>{}));
  }

 private:
  static std::size_t product(const extents_type& e) {
    std::size_t p = 1;
    for (auto x : e) p *= x;
    return p;
  }

  template <class V>
  std::string check_view(const V& v) const {
    if (std::string why = detail::size_error(global_, sizeof(T)); !why.empty()) return why;
    const auto want = local_extents();
    extents_type have{};
    for (std::size_t d = 0; d < Rank; ++d) have[d] = v.extent(d);
    const std::string who = "dsp::DistTensor (rank " + std::to_string(comm_.rank()) + " of " +
                            std::to_string(comm_.size()) + ")";
    if (have != want)
      return who + ": the local view has extents " + detail::text(have) + " but layout " +
             detail::layout_text(detail::layout_code<L>()) + " of global extents " + detail::text(global_) +
             " gives this rank " + detail::text(want);
    // Row-major contiguity: stride(d) == product of extents after d (dims of extent 1 or
    // empty views are unconstrained).
    if (v.size() > 0) {
      std::size_t expect = 1;
      for (std::size_t d = Rank; d-- > 0;) {
        if (v.extent(d) > 1 && static_cast<std::size_t>(v.stride(d)) != expect)
          return who + ": the local view is not contiguous row-major (dim " + std::to_string(d) +
                 " has stride " + std::to_string(v.stride(d)) + ", expected " + std::to_string(expect) + ")";
        expect *= v.extent(d);
      }
    }
    return "";
  }

  Comm comm_;
  extents_type global_;
  view_type local_;
};

}  // namespace dsp
