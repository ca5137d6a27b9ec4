// SPDX-License-Identifier: BSD-3-Clause
// dsp: DistTensor, a global tensor distributed by a layout over a
// communicator, or by one placement per axis over a process mesh.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/config.hpp>
#include <dsp/core/agree.hpp>
#include <dsp/core/exclusive.hpp>
#include <dsp/core/group_traits.hpp>
#include <dsp/error.hpp>
#include <dsp/extents.hpp>
#include <dsp/layout.hpp>
#include <dsp/mesh.hpp>
#include <dsp/partition.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dsp {

namespace detail {

/// The blocks that are outputs of split-phase operations in flight, by their
/// data pointer, with the operation's call site (DSP_CHECK_IN_FLIGHT builds
/// only: nothing is recorded otherwise). A few at a time: a short list, and
/// the message is made only when it is raised.
class InFlightBlocks {
 public:
  static InFlightBlocks& get() {
    static InFlightBlocks r;
    return r;
  }
  void mark(const void* p, const char* what, const std::source_location& loc) {
    if (!p) return;
    std::lock_guard lock(m_);
    for (Entry& e : blocks_)
      if (e.p == p) {
        ++e.count;
        count_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    blocks_.push_back(Entry{p, 1, what, loc});
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  void unmark(const void* p) {
    if (!p) return;
    std::lock_guard lock(m_);
    for (std::size_t k = 0; k < blocks_.size(); ++k)
      if (blocks_[k].p == p) {
        if (--blocks_[k].count == 0) {
          blocks_[k] = blocks_.back();
          blocks_.pop_back();
        }
        count_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
  }
  /// Throws UsageError when `p` is the block of an output in flight.
  void check(const void* p) const {
    if (count_.load(std::memory_order_relaxed) == 0 || !p) return;
    std::lock_guard lock(m_);
    for (const Entry& e : blocks_)
      if (e.p == p) fail(e);
  }

 private:
  struct Entry {
    const void* p = nullptr;
    int count = 0;
    const char* what = "";
    std::source_location loc;
  };
  [[noreturn, gnu::cold]] static void fail(const Entry& e) {
    throw UsageError("dsp::DistTensor::local: this tensor is the output of a split-phase operation still in flight (" +
                     std::string(e.what) + " called at " + e.loc.file_name() + ":" + std::to_string(e.loc.line()) +
                     "); its block is complete only after wait() on that handle (or at the end of "
                     "switch_each / gather_each). DSP_CHECK_IN_FLIGHT=0 compiles this check out");
  }
  mutable std::mutex m_;
  std::vector<Entry> blocks_;
  std::atomic<int> count_{0};
};

template <class T, std::size_t R>
struct add_pointers {
  using type = typename add_pointers<T, R - 1>::type*;
};
template <class T>
struct add_pointers<T, 0> {
  using type = T;
};

template <class V, std::size_t R, std::size_t... I>
V allocate_view(const std::string& label, const std::array<std::size_t, R>& e, bool init, std::index_sequence<I...>) {
  if (init) return V(label, e[I]...);
  return V(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), e[I]...);
}

/// This rank's block of a tensor with global extents `g` under placement L
/// (Replicated, Sharded<D>, Partial<Op>) over `size` ranks.
template <Placement L, std::size_t R>
std::array<std::size_t, R> local_extents(const std::array<std::size_t, R>& g, int rank, int size) {
  auto e = g;
  if constexpr (is_sharded_v<L>) e[L::dim] = Partition{g[L::dim], std::size_t(size)}.count(std::size_t(rank));
  return e;
}

template <Placement L, std::size_t R>
std::array<std::size_t, R> local_offsets(const std::array<std::size_t, R>& g, int rank, int size) {
  std::array<std::size_t, R> o{};
  if constexpr (is_sharded_v<L>) o[L::dim] = Partition{g[L::dim], std::size_t(size)}.offset(std::size_t(rank));
  return o;
}

/// This rank's box of a tensor of layout L (a placement, or Axes<...>) over
/// group G (a communicator, or a Mesh): the nested partition.
template <class L, class G, std::size_t R>
Box<R> box_of(const std::array<std::size_t, R>& g, const G& group, CutSizes z = {}) {
  using traits = group_traits<G>;
  const auto shape = traits::shape(group);
  const auto coords = traits::coords(group);
  return nested_box(g, std::span<const long>(placement_codes<L>::value), std::span<const int>(shape),
                    std::span<const int>(coords), z);
}

/// Whether each Blocks code of codes `c` stands on the first axis that cuts its dim.
template <std::size_t K>
constexpr bool blocks_first(const std::array<long, K>& c) {
  for (std::size_t a = 0; a < K; ++a)
    if (is_blocks_code(c[a]))
      for (std::size_t b = 0; b < a; ++b)
        if (code_dim(c[b]) == code_dim(c[a])) return false;
  return true;
}

/// Whether layout L can distribute a tensor over group G, with the sentence
/// that says why not.
template <class L, class G>
constexpr bool layout_for_group() {
  if constexpr (is_mesh_v<G>) {
    static_assert(is_axes_v<L>,
                  "dsp::DistTensor: a tensor on a dsp::Mesh takes dsp::Axes<P0, ..., PK-1>, one placement "
                  "(Replicated, Sharded<D> or Partial<Op>) per mesh axis.");
    if constexpr (is_axes_v<L>) {
      static_assert(L::size == G::axes, "dsp::DistTensor: Axes<...> must name exactly one placement per mesh axis.");
      constexpr std::size_t zigzags = [] {
        std::size_t z = 0;
        for (long c : placement_codes<L>::value) z += is_zigzag_code(c) ? 1 : 0;
        return z;
      }();
      constexpr std::size_t blocks = [] {
        std::size_t z = 0;
        for (long c : placement_codes<L>::value) z += is_blocks_code(c) ? 1 : 0;
        return z;
      }();
      static_assert(blocks <= 1,
                    "dsp::DistTensor: a layout on a mesh has at most one Blocks<D> (its sizes are one per rank of "
                    "its axis); cut the other dims with Sharded.");
      constexpr bool first = blocks_first(placement_codes<L>::value);
      static_assert(first,
                    "dsp::DistTensor: a Blocks<D> on a mesh stands on the first axis that cuts dim D (its sizes cut "
                    "the whole extent); a later axis may cut each block further with Sharded<D> or Zigzag<D>.");
      static_assert(zigzags <= 1,
                    "dsp::DistTensor: a layout on a mesh has at most one Zigzag<D> (a rank's block then holds at "
                    "most two ranges of dim D); cut the other dims with Sharded.");
      return L::size == G::axes && blocks <= 1 && first && zigzags <= 1;
    }
    return false;
  } else {
    static_assert(Placement<L> || is_cut_v<L>,
                  "dsp::DistTensor: the layout must be dsp::Replicated, dsp::Sharded<D>, dsp::Partial<Op>, "
                  "dsp::Zigzag<D> or dsp::Blocks<D> over a communicator (dsp::Axes<...> needs a dsp::Mesh).");
    return Placement<L> || is_cut_v<L>;
  }
}

/// The sizes of a Blocks tensor's blocks and their prefix offsets (shared by
/// the tensor's shallow copies).
struct BlockSizes {
  std::vector<std::size_t> sizes, starts;
};
struct NoBlockSizes {};

/// Why `sizes` cannot be the block sizes of an extent `extent` over `parts`
/// ranks, or "". `axis`: the mesh axis of the Blocks (-1: a communicator).
inline std::string block_sizes_error(const std::vector<std::size_t>& sizes, std::size_t extent, std::size_t parts,
                                     int axis = -1) {
  if (sizes.size() != parts)
    return "Blocks takes one size per rank" + std::string(axis < 0 ? "" : " of its mesh axis") + ": " +
           std::to_string(sizes.size()) + " sizes for " + std::to_string(parts) + " ranks" +
           (axis < 0 ? std::string() : " along mesh axis " + std::to_string(axis));
  std::size_t sum = 0;
  for (std::size_t v : sizes) {
    if (v > std::size_t(-1) - sum)
      return "the Blocks sizes " + text(std::span<const std::size_t>(sizes)) + " sum past 2^64, not to the extent " +
             std::to_string(extent);
    sum += v;
  }
  if (sum != extent)
    return "the Blocks sizes " + text(std::span<const std::size_t>(sizes)) + " sum to " + std::to_string(sum) +
           ", not to the extent " + std::to_string(extent);
  return "";
}

/// A 64-bit hash of block sizes (the agreement compares it).
inline std::uint64_t block_sizes_hash(const std::vector<std::size_t>& sizes) {
  ShapeHash h;
  h.add(std::span<const std::size_t>(sizes));
  return h.h;
}

template <class T, std::size_t R>
const std::array<std::size_t, R>& checked_global(const std::array<std::size_t, R>& g) {
  if (const std::string why = size_error(g, sizeof(T)); !why.empty()) throw InvalidArgument(why);
  return g;
}

/// Views a DistTensor can wrap: LayoutRight (any rank), LayoutLeft of rank 0
/// or 1 (the same thing), and LayoutStride with exactly row-major strides.
/// These are the layouts Kokkos assigns to a LayoutRight view; any other
/// assignment fails to compile (LayoutLeft of rank 2 or more) or aborts.
template <class V>
inline constexpr bool wrappable_layout_v = std::is_same_v<typename V::array_layout, Kokkos::LayoutRight> ||
                                           std::is_same_v<typename V::array_layout, Kokkos::LayoutStride> ||
                                           (std::is_same_v<typename V::array_layout, Kokkos::LayoutLeft> &&
                                            V::rank <= 1);

/// Why view `v` cannot be the row-major block of extents `want`, or "".
/// Agrees with Kokkos' own rule for assigning the view to a LayoutRight one:
/// a LayoutStride view needs every stride exactly row-major (Kokkos aborts
/// otherwise, even on dims of extent 1); a LayoutRight view must not be
/// padded where that would break contiguity.
template <class V, std::size_t R>
std::string view_error(const V& v, const std::array<std::size_t, R>& want) {
  std::array<std::size_t, R> have{};
  for (std::size_t d = 0; d < R; ++d) have[d] = v.extent(d);
  if (have != want) return "the local view has extents " + text(have) + " but this rank's block is " + text(want);
  constexpr bool strided = std::is_same_v<typename V::array_layout, Kokkos::LayoutStride>;
  std::size_t expect = 1;
  for (std::size_t d = R; d-- > 0;) {
    const std::size_t st = static_cast<std::size_t>(v.stride(d));
    if ((strided || (v.extent(d) > 1 && v.size() > 0)) && st != expect)
      return "the local view is not contiguous row-major (dim " + std::to_string(d) + " has stride " +
             std::to_string(st) + ", expected " + std::to_string(expect) + ")";
    expect *= v.extent(d);
  }
  return "";
}

struct unchecked_t {};
}  // namespace detail

template <class T, std::size_t Rank, class L, class Group, class MemorySpace>
class DistTensor;

/// A Kokkos view (any rank, layout, memory space).
template <class V>
concept KokkosView = Kokkos::is_view<V>::value;

template <class X>
struct is_dist_tensor : std::false_type {};
template <class T, std::size_t Rank, class L, class Comm, class M>
struct is_dist_tensor<DistTensor<T, Rank, L, Comm, M>> : std::true_type {};
/// True for dsp::DistTensor types (cv-ref qualifiers ignored).
template <class X>
inline constexpr bool is_dist_tensor_v = is_dist_tensor<std::remove_cvref_t<X>>::value;

/// A tensor of global extents [E0, ..., E(Rank-1)] distributed over the ranks
/// of `Comm` as the layout L says (Replicated, Sharded<D>, Partial<Op>), or
/// over a dsp::Mesh<K, Comm> with one placement per axis (L = Axes<...>).
/// Each rank holds one contiguous LayoutRight block (`local()`), a box of the
/// global tensor (see dsp::Mesh for the nested rule). Copies are shallow, like
/// Kokkos views: they share the block.
template <class T, std::size_t Rank, class L, class Comm, class MemorySpace = typename Comm::memory_space>
class DistTensor {
  // Evaluates the layout's rules, each a static_assert with its sentence
  // inside layout_for_group (so a broken rule is reported once, by it).
  static_assert(detail::layout_for_group<L, Comm>() || true);
  static_assert(Rank >= 1 && Rank <= kMaxRank, "dsp::DistTensor: the rank must be between 1 and 8 (dsp::kMaxRank).");
  static_assert(layout_fits_v<L, Rank>,
                "dsp::DistTensor: Sharded<D> requires D < Rank; a tensor of rank R has dims 0 to R-1.");
  using group_traits = detail::group_traits<Comm>;
  static constexpr bool has_sizes = detail::has_blocks_code<L>();  // Blocks, on a communicator or a mesh axis
  static constexpr int blocks_axis = detail::blocks_axis<L>();
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
  /// Throws InvalidArgument when an extent is 2^63 or more or the tensor's
  /// size in bytes would pass 2^63 (on this rank only: this constructor is
  /// local), UsageError outside the Kokkos scope.
  DistTensor(const Comm& comm, Extents<Rank> global)
      : comm_(comm), global_(checked(global.values)),
        local_(detail::allocate_view<view_type>("dsp::DistTensor", local_extents(), true,
                                                std::make_index_sequence<Rank>{})) {
    static_assert(!has_sizes,
                  "dsp::DistTensor: a Blocks<D> tensor takes its block sizes: DistTensor{comm, extents, sizes}, "
                  "sizes a std::vector<std::size_t> of one entry per rank (on a mesh: per rank of the Blocks axis) "
                  "summing to the extent of dim D.");
  }

  /// A Blocks<D> tensor: rank r's block holds `sizes[r]` indices of dim D, in
  /// rank order (zero-initialized). On a mesh, the Blocks axis's rank at
  /// coordinate r holds `sizes[r]` (then later axes cut that block further).
  /// Collective when agreement checks are on (one small agreement): sizes
  /// that are not one per rank, do not sum to the extent, or differ between
  /// ranks make every rank throw (the ranks at fault an InvalidArgument, the
  /// others a MismatchError), allocating nothing.
  DistTensor(const Comm& comm, Extents<Rank> global, std::vector<std::size_t> sizes,
             std::source_location loc = std::source_location::current()) requires(has_sizes)
      : comm_(comm), global_(checked(global.values)) {
    const auto& world = group_traits::world(comm_);
    detail::ExclusiveUse use(world, "dsp::DistTensor construction");
    const std::size_t dim = std::size_t(detail::code_dim(detail::codes_v<L>[std::size_t(blocks_axis)]));
    const std::size_t parts =
        is_mesh_v<Comm> ? std::size_t(group_traits::shape(comm_)[std::size_t(blocks_axis)]) : std::size_t(world.size());
    std::string why = detail::block_sizes_error(sizes, global_[dim], parts, is_mesh_v<Comm> ? blocks_axis : -1);
    if (!why.empty())
      why = "dsp::DistTensor (rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) +
            "): " + why + " (layout " + layout_text() + ", global extents " + detail::text(global_) + ")";
    detail::Signature sig = detail::make_signature<T>(detail::Op::construct, global_, 0, 0, loc);
    set_layouts(sig, comm_);
    for (std::size_t a = 0; a < kMaxAxes; ++a) sig.dst_layout[a] = sig.src_layout[a];
    sig.tensor_rank = Rank;
    sig.arg = static_cast<std::int64_t>(detail::block_sizes_hash(sizes));
    if (!why.empty()) sig.status = static_cast<std::uint32_t>(detail::Status::bad_argument);
    auto c = world;
    try {
      detail::agree(c, sig, why);
    } catch (const MismatchError& e) {  // name what this rank passed: the agreement compares a hash
      throw MismatchError(std::string(e.what()) + " (rank " + std::to_string(world.rank()) + " passed " +
                          detail::text(std::span<const std::size_t>(sizes)) + ")");
    }
    auto b = std::make_shared<detail::BlockSizes>();
    b->starts.assign(1, 0);
    for (std::size_t v : sizes) b->starts.push_back(b->starts.back() + v);
    b->sizes = std::move(sizes);
    sizes_ = std::move(b);
    local_ =
        detail::allocate_view<view_type>("dsp::DistTensor", local_extents(), true, std::make_index_sequence<Rank>{});
  }

  /// Wraps an existing block, sharing it: `local` must have exactly this
  /// rank's partition extents and be contiguous row-major: a LayoutRight view,
  /// a LayoutStride view with row-major strides, or a LayoutLeft view of rank
  /// 1; not const (dsp writes outputs in place). Collective when agreement
  /// checks are on: if any rank's view does not fit, every rank throws (the
  /// offending rank an InvalidArgument naming the extents, the others a
  /// MismatchError naming that rank).
  template <KokkosView V>
  DistTensor(const Comm& comm, Extents<Rank> global, const V& local,
             std::source_location loc = std::source_location::current())
      : comm_(comm), global_(global.values) {
    static_assert(!has_sizes,
                  "dsp::DistTensor: wrapping a view as a Blocks<D> tensor is not offered yet; allocate it with "
                  "DistTensor{comm, extents, sizes}.");
    if constexpr (wrappable<V>() && !has_sizes) wrap(local, loc);
  }

  /// Internal: a block already known to fit.
  DistTensor(detail::unchecked_t, const Comm& comm, const extents_type& global, view_type local)
      : comm_(comm), global_(global), local_(std::move(local)) {}
  /// Internal: a Blocks block already known to fit, with its (agreed) sizes.
  DistTensor(detail::unchecked_t, const Comm& comm, const extents_type& global, view_type local,
             std::shared_ptr<const detail::BlockSizes> sizes) requires(has_sizes)
      : comm_(comm), global_(global), local_(std::move(local)), sizes_(std::move(sizes)) {}

  /// This rank's block: a contiguous LayoutRight Kokkos view. Throws
  /// UsageError when the tensor is the output of a split-phase operation not
  /// yet waited for (DSP_CHECK_IN_FLIGHT, on unless defined 0).
  const view_type& local() const noexcept(!DSP_CHECK_IN_FLIGHT) {
#if DSP_CHECK_IN_FLIGHT
    detail::InFlightBlocks::get().check(local_.data());
#endif
    return local_;
  }
  /// Internal: local() without the in-flight check, for dsp's own code while
  /// an operation is in flight.
  const view_type& unchecked_local() const noexcept { return local_; }
  const extents_type& global_extents() const noexcept { return global_; }
  extents_type local_extents() const {
    if constexpr (is_cut_v<L>) {
      extents_type e = global_;
      e[L::dim] = cut().count(std::size_t(comm_.rank()));
      return e;
    } else {
      return detail::box_of<L>(global_, comm_, cut_sizes()).count;
    }
  }
  /// Global index of local element (0, ..., 0). Under Zigzag<D> the block
  /// holds two chunks of dim D: this is the first's offset (see cut(); on a
  /// mesh, block_split()).
  extents_type local_offsets() const {
    if constexpr (is_cut_v<L>) {
      extents_type o{};
      detail::Piece p[2];
      cut().pieces(std::size_t(comm_.rank()), p);
      o[L::dim] = p[0].offset;
      return o;
    } else {
      return detail::box_of<L>(global_, comm_, cut_sizes()).offset;
    }
  }
  /// Zigzag<D> and Blocks<D>: how dim D is cut over the communicator's ranks
  /// (dsp::Cut: each rank's ranges of global indices along D).
  Cut cut() const requires is_cut_v<L> {
    detail::Cut c;
    c.extent = global_[L::dim];
    c.parts = std::size_t(comm_.size());
    if constexpr (is_zigzag_v<L>) c.kind = detail::Cut::Kind::zigzag;
    else {
      c.kind = detail::Cut::Kind::blocks;
      c.starts = sizes_->starts.data();
    }
    return c;
  }
  /// cut() of another layout: a sentence instead of an unsatisfied constraint.
  template <class U = L>
  Cut cut() const requires(!is_cut_v<U>) {
    static_assert(is_cut_v<U>,
                  "dsp::DistTensor::cut(): a Zigzag<D> or Blocks<D> tensor of a plain communicator says how its dim "
                  "is cut; on a mesh, a rank's block is local_offsets() and local_extents(), with block_split() "
                  "where it jumps (and block_sizes() for a Blocks).");
    return {};
  }
  /// Where this rank's block jumps along a dim: under a Zigzag<D> placement
  /// (of the communicator, or of a mesh axis, with Sharded<D> on other axes
  /// cutting its block further) the block may hold two ranges of dim D:
  /// `dim` D, `first` the count of the first range (at local_offsets()[D]),
  /// `second` the global offset of the second. Split::none as `dim` when the
  /// block is one box.
  Split block_split() const {
    if constexpr (is_zigzag_v<L>) {
      detail::Piece p[2];
      cut().pieces(std::size_t(comm_.rank()), p);
      if (p[1].count == 0 || p[1].offset == p[0].offset + p[0].count) return {};
      return Split{L::dim, p[0].count, p[1].offset};
    } else if constexpr (is_mesh_v<Comm>) {
      using traits = detail::group_traits<Comm>;
      const auto shape = traits::shape(comm_);
      const auto coords = traits::coords(comm_);
      return detail::nested_block(global_, std::span<const long>(detail::placement_codes<L>::value),
                                  std::span<const int>(shape), std::span<const int>(coords), cut_sizes())
          .split;
    } else {
      return {};
    }
  }
  /// Blocks<D>: the block sizes along D, one per rank (on a mesh: per rank of
  /// the Blocks axis), as constructed.
  const std::vector<std::size_t>& block_sizes() const requires(has_sizes) { return sizes_->sizes; }
  /// Internal: the prefix offsets of the Blocks sizes (as the layout's
  /// Blocks code names them), or none.
  detail::CutSizes cut_sizes() const noexcept {
    if constexpr (has_sizes) return detail::CutSizes{sizes_->starts.data(), nullptr};
    else return {};
  }
  /// Internal: the shared sizes (an output of the same sizes shares them).
  std::shared_ptr<const detail::BlockSizes> shared_sizes() const requires(has_sizes) { return sizes_; }

  const Comm& communicator() const noexcept { return comm_; }
  std::size_t global_size() const { return detail::product(global_); }
  std::size_t local_size() const { return local_.size(); }

  /// Allocates an uninitialized tensor (internal: outputs that are fully overwritten).
  static DistTensor uninitialized(const Comm& comm, const extents_type& global) requires(!is_cut_v<L> && !has_sizes) {
    detail::require_kokkos("dsp::DistTensor");
    auto e = detail::box_of<L>(global, comm).count;
    return DistTensor(detail::unchecked_t{}, comm, global,
                      detail::allocate_view<view_type>("dsp::DistTensor", e, false, std::make_index_sequence<Rank>{}));
  }

 private:
  static const extents_type& checked(const extents_type& g) {
    detail::require_kokkos("dsp::DistTensor");
    return detail::checked_global<T>(g);
  }

  /// The compile-time rules for a wrapped view, in one place.
  template <class V>
  static constexpr bool wrappable() {
    static_assert(V::rank == Rank, "dsp::DistTensor: the local view must have the tensor's rank.");
    static_assert(std::is_same_v<typename V::non_const_value_type, T>,
                  "dsp::DistTensor: the local view must hold the tensor's element type.");
    static_assert(!std::is_const_v<typename V::value_type>,
                  "dsp::DistTensor: the local view must not be const: a tensor's block is written in place "
                  "(as the output of a primitive); wrap a non-const view.");
    static_assert(detail::wrappable_layout_v<V>,
                  "dsp::DistTensor: the local view must be LayoutRight, LayoutStride with row-major strides, or "
                  "LayoutLeft of rank 1; Kokkos cannot view a LayoutLeft block of rank 2 or more as row-major.");
    static_assert(Kokkos::SpaceAccessibility<MemorySpace, typename V::memory_space>::accessible,
                  "dsp::DistTensor: the local view must live in (or be accessible from) the tensor's memory space.");
    return V::rank == Rank && std::is_same_v<typename V::non_const_value_type, T> &&
           !std::is_const_v<typename V::value_type> && detail::wrappable_layout_v<V> &&
           Kokkos::SpaceAccessibility<MemorySpace, typename V::memory_space>::accessible;
  }

  template <class V>
  void wrap(const V& local, const std::source_location& loc) {
    const auto& world = group_traits::world(comm_);
    detail::ExclusiveUse use(world, "dsp::DistTensor construction");
    std::string why = detail::size_error(global_, sizeof(T));
    if (why.empty())
      if (std::string bad = detail::view_error(local, local_extents()); !bad.empty())
        why = "dsp::DistTensor (rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) +
              "): " + bad + " (layout " + layout_text() + ", global extents " + detail::text(global_) + ")";
    detail::Signature sig = detail::make_signature<T>(detail::Op::construct, {}, 0, 0, loc);
    set_layouts(sig, comm_);
    for (std::size_t a = 0; a < kMaxAxes; ++a) sig.dst_layout[a] = sig.src_layout[a];
    sig.tensor_rank = Rank;
    if (!why.empty()) sig.status = static_cast<std::uint32_t>(detail::Status::bad_local_view);
    auto c = world;
    detail::agree(c, sig, why);  // extents are not compared here: the next collective does that
    local_ = local;
  }

 public:
  /// Internal: this tensor's layout (and mesh shape) as the source layout of an
  /// agreement signature.
  static void set_layouts(detail::Signature& s, const Comm& group) {
    constexpr auto codes = detail::placement_codes<L>::value;
    s.mesh_axes = is_mesh_v<Comm> ? static_cast<std::uint32_t>(codes.size()) : 0;
    const auto shape = group_traits::shape(group);
    for (std::size_t a = 0; a < codes.size(); ++a) {
      s.src_layout[a] = codes[a];
      if (is_mesh_v<Comm>) s.mesh_shape[a] = shape[a];
    }
  }
  /// Internal: the layout as text.
  static std::string layout_text() {
    constexpr auto codes = detail::placement_codes<L>::value;
    return detail::layout_text(codes.data(), is_mesh_v<Comm> ? static_cast<std::uint32_t>(codes.size()) : 0);
  }

 private:
  Comm comm_;
  extents_type global_;
  view_type local_;
  [[no_unique_address]] std::conditional_t<has_sizes, std::shared_ptr<const detail::BlockSizes>, detail::NoBlockSizes>
      sizes_{};
};

}  // namespace dsp
