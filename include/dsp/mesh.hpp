// SPDX-License-Identifier: BSD-3-Clause
// dsp: a K-axis process mesh over a communicator.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/core/agree.hpp>
#include <dsp/core/exclusive.hpp>
#include <dsp/core/group_traits.hpp>
#include <dsp/core/port.hpp>
#include <dsp/error.hpp>
#include <dsp/extents.hpp>
#include <dsp/plan/mesh_plan.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <utility>

namespace dsp {
namespace detail {
/// The agreement of a mesh's construction: the shape fits the communicator
/// (every extent >= 1, product equal to the rank count, formed with overflow
/// checks: shape {7623851, 409891, 5462, 4323} wraps 2^64 to exactly 2), and
/// every rank passes the same one. Collective; raises on every rank.
DSP_FUNC void agree_on_mesh(Port& world, std::span<const int> shape, const std::source_location& loc);
#if DSP_FUNC_BODIES
DSP_FUNC void agree_on_mesh(Port& world, std::span<const int> shape, const std::source_location& loc) {
  Signature sig;
  sig.op = static_cast<std::uint32_t>(Op::make_mesh);
  sig.mesh_axes = std::uint32_t(shape.size());
  for (std::size_t a = 0; a < shape.size() && a < kMaxAxes; ++a) sig.mesh_shape[a] = shape[a];
  set_site(sig, loc);
  std::size_t product = 1;
  bool fits = true;
  std::string t = "[";
  for (std::size_t a = 0; a < shape.size(); ++a) {
    const int x = shape[a];
    t += (a ? ", " : "") + std::to_string(x);
    fits = fits && x >= 1 && !mul_overflows(product, std::size_t(x));
    if (fits) product *= std::size_t(x);
  }
  std::string err;
  if (!fits || product != std::size_t(world.size())) {
    err = "dsp::Mesh: the shape " + t + "] does not fit a communicator of " + std::to_string(world.size()) +
          " ranks (every extent >= 1, product equal to the rank count)";
    sig.status = static_cast<std::uint32_t>(Status::bad_argument);
  }
  ExclusiveUse use(world, "dsp::Mesh construction");
  agree(world, sig, err);
}
#endif
}  // namespace detail

/// The ranks of a communicator arranged as a K-dim grid of shape
/// `shape()` (1 to 4 axes), in row-major order: rank = c0 * (s1 * ... *
/// sK-1) + ... + cK-1, the last axis varying fastest. `axis(a)` is a
/// communicator of the same type over the ranks that differ only in
/// coordinate a; its rank() is this rank's coords()[a]. Copies share the
/// axis communicators, which are made once, by the constructor.
///
/// Tensors on a mesh have one placement per axis (dsp::Axes): a dim sharded
/// by several axes is split by them in axis order, over the lowest axis first
/// (the 1-D rule), then each block over the next axis; a rank's block is still
/// one box. dsp::redistribute moves a tensor between placements.
template <std::size_t K, Communicator Comm>
class Mesh {
  static_assert(K >= 1 && K <= kMaxAxes, "dsp::Mesh: a mesh has 1 to 4 axes.");
  static_assert(K == 1 || Splittable<Comm>,
                "dsp::Mesh: a mesh of two or more axes needs a communicator that can split into subgroups "
                "(dsp::Splittable: MpiCommunicator, NCCL, the staged and counting wrappers of those).");

 public:
  using communicator_type = Comm;
  using memory_space = typename Comm::memory_space;
  static constexpr std::size_t axes = K;

  /// Collective over `comm`. Throws InvalidArgument on every rank unless every
  /// extent of `shape` is at least 1 and their product is comm.size(), and
  /// MismatchError when the ranks pass different shapes; nothing is split then.
  Mesh(const Comm& comm, const std::array<int, K>& shape, std::source_location loc = std::source_location::current())
      : s_(std::make_shared<State>(comm, shape)) {
    State& s = *s_;
    {
      detail::PortOf<Comm> world(s.world);
      detail::agree_on_mesh(world, shape, loc);
    }
    int rest = comm.rank();
    for (std::size_t a = K; a-- > 0;) {
      s.coords[a] = rest % shape[a];
      rest /= shape[a];
    }
    for (std::size_t a = 0; a < K; ++a) {
      if constexpr (K == 1) {
        s.axes[a].emplace(s.world);
      } else {
        int color = 0;  // the linear index of the other coordinates: one group per line along axis a
        for (std::size_t b = 0; b < K; ++b)
          if (b != a) color = color * shape[b] + s.coords[b];
        s.axes[a].emplace(s.world.split(color, s.coords[a]));
      }
    }
  }

  /// The mesh's extents, one per axis.
  const std::array<int, K>& shape() const noexcept { return s_->shape; }
  /// This rank's coordinates, one per axis.
  const std::array<int, K>& coords() const noexcept { return s_->coords; }
  /// The communicator of the ranks that differ from this one only in
  /// coordinate a (rank = coords()[a], size = shape()[a]). Throws
  /// InvalidArgument for a >= K.
  const Comm& axis(std::size_t a) const {
    if (a >= K)
      throw InvalidArgument("dsp::Mesh::axis: axis " + std::to_string(a) + " of a mesh of " + std::to_string(K) +
                            " axes");
    return *s_->axes[a];
  }
  /// The communicator the mesh was built from (all ranks).
  const Comm& world() const noexcept { return s_->world; }
  int rank() const noexcept { return s_->world.rank(); }
  int size() const noexcept { return s_->world.size(); }
  /// The identity of this mesh (copies share it; two meshes of one communicator differ).
  const void* id() const noexcept { return s_.get(); }
  const CommResources& resources() const noexcept { return s_->world.resources(); }

  /// The same group of ranks arranged the same way.
  friend bool operator==(const Mesh& a, const Mesh& b) {
    if (a.s_ == b.s_) return true;
    if (a.s_->shape != b.s_->shape) return false;
    if (a.s_->world.id() == b.s_->world.id()) return true;
    if constexpr (requires { a.s_->world == b.s_->world; }) return a.s_->world == b.s_->world;
    else return false;
  }

 private:
  struct State {
    State(const Comm& c, const std::array<int, K>& s) : world(c), shape(s) {}
    Comm world;
    std::array<int, K> shape{}, coords{};
    std::array<std::optional<Comm>, K> axes;
  };
  std::shared_ptr<State> s_;
};

namespace detail {
/// mesh_shape's search: the factorizations of n into `left` more extents, each
/// at most `cap` and non-increasing (cur[0..depth) chosen so far), among the
/// divisors of the original n (ascending); keeps the best one in `best`.
struct BalancedSearch {
  std::array<int, 1600> divisors{};  // n < 2^31 has at most 1600
  std::size_t count = 0;
  std::array<int, kMaxAxes> cur{}, best{};
  std::size_t axes = 0;
  bool found = false;
  /// Balance: the largest minus the smallest extent, then the largest, then
  /// the sum of squares (of {5, 2, 2, 1} and {5, 4, 1, 1}, the first).
  bool better(const std::array<int, kMaxAxes>& x, const std::array<int, kMaxAxes>& y) const {
    const auto key = [&](const std::array<int, kMaxAxes>& v) {
      long long squares = 0;
      for (std::size_t a = 0; a < axes; ++a) squares += static_cast<long long>(v[a]) * v[a];
      return std::array<long long, 3>{v[0] - v[axes - 1], v[0], squares};
    };
    return key(x) < key(y);
  }
  void run(long long n, std::size_t depth, long long cap) {
    const std::size_t left = axes - depth;
    if (left == 1) {
      if (n > cap) return;
      cur[depth] = static_cast<int>(n);
      if (!found || better(cur, best)) best = cur;
      found = true;
      return;
    }
    for (std::size_t k = count; k-- > 0;) {  // the largest remaining extent first
      const long long d = divisors[k];
      if (d > cap || n % d != 0) continue;
      long long power = 1;  // d is the largest of `left` extents whose product is n: d^left >= n
      for (std::size_t i = 0; i < left && power < n; ++i) power *= d;
      if (power < n) break;  // smaller divisors cannot be the largest either
      cur[depth] = static_cast<int>(d);
      run(n / d, depth + 1, d);
    }
  }
};
}  // namespace detail

/// A balanced shape of K axes for n ranks, for dsp::Mesh<K, Comm>: extents
/// whose product is n, the largest minus the smallest as small as n's factors
/// allow (then the largest, then the sum of squares), in non-increasing order
/// (MPI_Dims_create's order: the last axis, whose ranks are adjacent, is the
/// smallest). mesh_shape<2>(12) is {4, 3}, mesh_shape<3>(8) {2, 2, 2},
/// mesh_shape<2>(7) {7, 1}, mesh_shape<2>(72) {9, 8} (MPI_Dims_create, which
/// hands out prime factors greedily, gives {12, 6}). Local; raises
/// InvalidArgument for n < 1.
template <std::size_t K>
std::array<int, K> mesh_shape(int n) {
  static_assert(K >= 1 && K <= kMaxAxes, "dsp::mesh_shape<K>: K must be 1 to dsp::kMaxAxes (4) axes");
  if (n < 1) throw InvalidArgument("dsp::mesh_shape: the rank count must be at least 1, got " + std::to_string(n));
  detail::BalancedSearch s;
  s.axes = K;
  std::size_t high = 0;  // divisors above sqrt(n), collected descending, then appended in ascending order
  std::array<int, 800> above{};
  for (int d = 1; d <= n / d; ++d)
    if (n % d == 0) {
      s.divisors[s.count++] = d;
      if (d != n / d) above[high++] = n / d;
    }
  while (high > 0) s.divisors[s.count++] = above[--high];
  s.run(n, 0, n);
  std::array<int, K> shape{};
  for (std::size_t a = 0; a < K; ++a) shape[a] = s.best[a];
  return shape;
}

/// The mesh of grouped-query attention's replicate-to-fill (docs/attention.md):
/// {n / g, g} with g = gcd(h_kv, n), for n ranks and h_kv key/value heads.
/// Axis 1 holds the g head groups, axis 0 the n / g copies of each. From the
/// sequence sharded over every rank (Axes<Sharded<seq>, Sharded<seq>>), K and
/// V go to Axes<Replicated, Sharded<heads>> (an all-to-all along axis 1, an
/// all-gather along axis 0: each rank receives only what it lacks of its
/// h_kv / g heads' whole sequence) and Q to Axes<Sharded<seq>, Sharded<heads>>
/// (the all-to-all along axis 1 alone), so every rank holds the key/value
/// heads of its query heads. n a multiple of h_kv: {n / h_kv, h_kv}, one
/// head per group; h_kv a multiple of n: {1, n}, the plain Ulysses switch.
/// Local; raises InvalidArgument for n < 1 or h_kv < 1.
inline std::array<int, 2> gqa_mesh_shape(int n, int h_kv) {
  if (n < 1 || h_kv < 1)
    throw InvalidArgument(
        "dsp::gqa_mesh_shape(n, h_kv): the rank count and the key/value heads must be at least 1, "
        "got n = " +
        std::to_string(n) + ", h_kv = " + std::to_string(h_kv));
  int a = n, b = h_kv;
  while (b != 0) a = std::exchange(b, a % b);
  return {n / a, a};
}

template <class G>
struct is_mesh : std::false_type {};
template <std::size_t K, class Comm>
struct is_mesh<Mesh<K, Comm>> : std::true_type {};
/// True for dsp::Mesh types.
template <class G>
inline constexpr bool is_mesh_v = is_mesh<std::remove_cvref_t<G>>::value;

namespace detail {

/// A mesh as the engine sees it (engine/group.hpp): itself.
template <std::size_t K, class Comm>
struct group_traits<Mesh<K, Comm>> {
  static constexpr std::size_t axes = K;
  using comm_type = Comm;
  static const Comm& world(const Mesh<K, Comm>& m) { return m.world(); }
  static const Comm& axis(const Mesh<K, Comm>& m, std::size_t a) { return m.axis(a); }
  static const std::array<int, K>& shape(const Mesh<K, Comm>& m) { return m.shape(); }
  static const std::array<int, K>& coords(const Mesh<K, Comm>& m) { return m.coords(); }
};

}  // namespace detail
}  // namespace dsp
