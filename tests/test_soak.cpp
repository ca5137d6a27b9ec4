// SPDX-License-Identifier: BSD-3-Clause
// Soak: 10,000 random split / dynamic_switch / gather operations (DSP_SOAK_OPS
// overrides the count; switches and gathers are plain, split-phase, computed
// on arrival or batched at random) on tensors of rank 2 to 4 with random small shapes,
// uneven and empty ones included. Every result is checked element by element
// against the global-index reference, and a position-weighted checksum of
// every result, summed over the ranks every 1,000 operations, must equal the
// checksum of the whole tensor: an element held twice or by nobody would pass
// the per-rank check but not this one. Resident memory after the run may
// exceed resident memory after warm-up by at most kRssToleranceBytes.
// A second case walks 5,000 random mesh redistributes (DSP_SOAK_MESH_OPS):
// plain, into existing tensors, batched with a double tensor, split-phase
// and on arrival, each result and input checked element by element.
#include "helpers.hpp"

#include <dsp/async.hpp>
#include <dsp/batch.hpp>
#include <dsp/redistribute.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <unistd.h>
#include <utility>
#include <variant>

using namespace dsp_test;

namespace {

using Comm = dsp::MpiCommunicator;
template <std::size_t R>
using Rep = dsp::DistTensor<float, R, dsp::Replicated, Comm>;
template <std::size_t R, std::size_t D>
using Sh = dsp::DistTensor<float, R, dsp::Sharded<D>, Comm>;

template <std::size_t R, class Seq>
struct state_of;
template <std::size_t R, std::size_t... D>
struct state_of<R, std::index_sequence<D...>> {
  using type = std::variant<Rep<R>, Sh<R, D>...>;
};
template <std::size_t R>
using State = typename state_of<R, std::make_index_sequence<R>>::type;

/// Calls f(std::integral_constant<std::size_t, d>) for a run-time d < R.
template <std::size_t R, class F>
void with_dim(std::size_t d, F&& f) {
  [&]<std::size_t... D>(std::index_sequence<D...>) {
    ((d == D ? (f(std::integral_constant<std::size_t, D>{}), 0) : 0), ...);
  }
  (std::make_index_sequence<R>{});
}

// Leaking 512 bytes per operation (less than a tensor of the soak's typical
// shape) would exceed this over the 8,000 operations after warm-up; below it
// is allocator noise (glibc keeps freed blocks of varying sizes).
constexpr long kRssToleranceBytes = 4L << 20;

long resident_bytes() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

std::uint64_t weight(std::size_t g, float v) {
  return (static_cast<std::uint64_t>(v) + 1) * (2 * std::uint64_t(g) + 1) * 0x9E3779B97F4A7C15ull;
}

/// Position-weighted checksum of this rank's block.
template <class X>
std::uint64_t local_checksum(const X& x) {
  std::uint64_t s = 0;
  const float* p = x.local().data();
  for_each_local(x, [&](auto&, auto& g, std::size_t k) { s += weight(linear(g, x.global_extents()), p[k]); });
  return s;
}

struct Soak {
  std::mt19937 rng;  // the same seed on every rank: every rank makes the same choices
  std::size_t ops = 0, wrong = 0, counts[5] = {0, 0, 0, 0, 0};  // split, switch, gather, split-phase, batched
  std::uint64_t got = 0, want = 0;                              // sums of checksums: over ranks, and of the reference

  template <class X>
  void record(const X& y, std::uint64_t whole) {
    wrong += count_wrong(y);
    got += local_checksum(y);
    if (world().rank() == 0) want += is_replicated_v_of<X>() ? whole * std::uint64_t(world().size()) : whole;
    ++ops;
  }
  template <class X>
  static constexpr bool is_replicated_v_of() {
    return dsp::is_replicated_v<typename X::layout_type>;
  }

  /// One chain: a new random shape, then `steps` random transitions.
  template <std::size_t R>
  void chain(std::size_t steps) {
    const auto g = random_extents<R>(rng);
    Rep<R> start{world(), g};
    fill(start);
    std::uint64_t whole = 0;  // checksum of the whole tensor
    for_each_local(start, [&](auto&, auto& gi, std::size_t) {
      const std::size_t l = linear(gi, g);
      whole += weight(l, value_at<float>(l));
    });
    State<R> cur = start;
    for (std::size_t s = 0; s < steps; ++s) {
      const bool into = rng() % 2 == 0;  // into an existing output, or allocating
      const std::size_t d = rng() % R;
      const bool to_gather = rng() % 4 == 0;
      State<R> next = std::visit(
          [&](const auto& x) -> State<R> {
            using X = std::remove_cvref_t<decltype(x)>;
            std::optional<State<R>> out;
            if constexpr (dsp::is_replicated_v<typename X::layout_type>) {
              ++counts[0];
              with_dim<R>(d, [&](auto D) {
                if (into) {
                  Sh<R, decltype(D)::value> y{world(), g};
                  dsp::split<decltype(D)::value>(x, y);
                  out = y;
                } else {
                  out = dsp::split<decltype(D)::value>(x);
                }
              });
            } else if (to_gather) {
              ++counts[2];
              if (into) {
                Rep<R> y{world(), g};
                if (rng() % 2) {
                  ++counts[3];
                  auto h = dsp::start_gather(x, y);
                  h.wait();
                } else {
                  dsp::gather(x, y);
                }
                out = y;
              } else {
                out = dsp::gather(x);
              }
            } else {
              ++counts[1];
              with_dim<R>(d, [&](auto D) {
                constexpr std::size_t Dv = decltype(D)::value;
                const unsigned kind = rng() % 4;  // plain, split-phase, compute on arrival, batched
                if (kind == 1 || kind == 2) {
                  ++counts[3];
                  Sh<R, Dv> y{world(), g};
                  if (kind == 1) {
                    auto h = dsp::start_switch<Dv>(x, y);
                    while (!h.test()) {
                    }
                    h.wait();
                  } else {
                    std::size_t seen = 0;
                    dsp::switch_each<Dv>(x, y, [&](const auto& block, const auto&, int) { seen += block.size(); });
                    if (seen != y.local_size()) ++wrong;
                  }
                  out = y;
                } else if (kind == 3) {
                  ++counts[4];
                  auto [y1, y2] = dsp::dynamic_switch<Dv>(dsp::batch(x, x));
                  wrong += count_wrong(y2);
                  out = y1;
                } else if (into) {
                  Sh<R, Dv> y{world(), g};
                  dsp::dynamic_switch<Dv>(x, y);
                  out = y;
                } else {
                  out = dsp::dynamic_switch<Dv>(x);
                }
              });
            }
            std::visit([&](const auto& y) { record(y, whole); }, *out);
            // primitives never modify their input
            wrong += count_wrong(x);
            return std::move(*out);
          },
          cur);
      cur = std::move(next);
    }
  }

  void compare_checksums(std::size_t upto) {
    std::uint64_t sum_got = 0, sum_want = 0;
    MPI_Allreduce(&got, &sum_got, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&want, &sum_want, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    INFO("checksums of the operations up to " << upto);
    CHECK(sum_got == sum_want);
  }
};

}  // namespace

TEST_CASE(
    "soak: 10,000 random split / switch / gather operations (split-phase and batched among them), verified, with flat "
    "memory") {
  const char* env = std::getenv("DSP_SOAK_OPS");
  const std::size_t total = env && std::atol(env) > 0 ? std::size_t(std::atol(env)) : 10000;
  const std::size_t warmup = total / 5;
  Soak soak{std::mt19937(12345)};
  long rss_warm = 0;
  std::size_t next_check = 1000;
  while (soak.ops < total) {
    const std::size_t steps = std::min<std::size_t>(8 + soak.rng() % 24, total - soak.ops);
    switch (soak.rng() % 3) {
      case 0: soak.chain<2>(steps); break;
      case 1: soak.chain<3>(steps); break;
      default: soak.chain<4>(steps); break;
    }
    if (rss_warm == 0 && soak.ops >= warmup) rss_warm = resident_bytes();
    if (soak.ops >= next_check || soak.ops >= total) {
      soak.compare_checksums(soak.ops);
      next_check += 1000;
    }
  }
  const long rss_end = resident_bytes();
  CHECK(soak.ops == total);
  CHECK(soak.wrong == 0);
  CHECK(soak.counts[0] > 0);
  CHECK(soak.counts[1] > 0);
  CHECK(soak.counts[2] > 0);
  CHECK(soak.counts[3] > 0);
  CHECK(soak.counts[4] > 0);
  if (world().rank() == 0)
    std::printf(
        "soak: %zu ops (%zu split, %zu switch, %zu gather; of these %zu split-phase, %zu batched); resident %ld KiB "
        "after warm-up, %ld KiB at end\n",
        soak.ops, soak.counts[0], soak.counts[1], soak.counts[2], soak.counts[3], soak.counts[4], rss_warm >> 10,
        rss_end >> 10);
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer keeps freed memory in quarantine, so resident memory
    // grows by design; LeakSanitizer checks for leaks in this build instead.
#else
  CHECK(rss_end - rss_warm <= kRssToleranceBytes);
#endif
}

namespace {

using Mesh2 = dsp::Mesh<2, Comm>;
template <class L>
using OnMesh = dsp::DistTensor<float, 3, L, Mesh2>;
template <class L>
using OnMeshD = dsp::DistTensor<double, 3, L, Mesh2>;
using MeshState = std::variant<
    OnMesh<dsp::Axes<dsp::Replicated, dsp::Replicated>>, OnMesh<dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>>,
    OnMesh<dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>>, OnMesh<dsp::Axes<dsp::Sharded<2>, dsp::Replicated>>,
    OnMesh<dsp::Axes<dsp::Replicated, dsp::Sharded<0>>>>;

/// Calls f(std::integral_constant<std::size_t, k>) for a run-time k < N.
template <std::size_t N, class F>
void with_index(std::size_t k, F&& f) {
  with_dim<N>(k, std::forward<F>(f));
}

}  // namespace

TEST_CASE("soak on a mesh: random redistributes (batched, split-phase, on arrival) of one tensor, verified") {
  // A 2-axis mesh of every rank ({2, P/2}, or {1, P} at odd P); a random walk
  // over five placements, each step plain, into an existing tensor, a batch
  // of a float and a double tensor, start_redistribute (test until done,
  // then wait), or redistribute_each (every element reported once).
  const char* env = std::getenv("DSP_SOAK_MESH_OPS");
  const std::size_t total = env && std::atol(env) > 0 ? std::size_t(std::atol(env)) : 5000;
  const int p = world().size();
  Mesh2 mesh{world(), {p % 2 ? 1 : 2, p % 2 ? p : p / 2}};
  std::mt19937 rng(777);
  std::size_t ops = 0, wrong = 0, kinds[5] = {0, 0, 0, 0, 0};
  while (ops < total) {
    const auto g = random_extents<3>(rng);
    OnMesh<dsp::Axes<dsp::Replicated, dsp::Replicated>> start{mesh, g};
    fill(start);
    MeshState cur = start;
    const std::size_t steps = std::min<std::size_t>(4 + rng() % 12, total - ops);
    for (std::size_t s = 0; s < steps; ++s, ++ops) {
      const std::size_t to = rng() % std::variant_size_v<MeshState>;
      const unsigned kind = rng() % 5;
      ++kinds[kind];
      cur = std::visit(
          [&](const auto& x) -> MeshState {
            std::optional<MeshState> out;
            with_index<std::variant_size_v<MeshState>>(to, [&](auto T) {
              using Y = std::variant_alternative_t<decltype(T)::value, MeshState>;
              using L = typename Y::layout_type;
              if (kind == 0) {
                out = dsp::redistribute<L>(x);
              } else if (kind == 1) {
                Y y{mesh, g};
                dsp::redistribute<L>(x, y);
                out = y;
              } else if (kind == 2) {
                OnMeshD<typename std::remove_cvref_t<decltype(x)>::layout_type> xd{mesh, g};
                fill(xd);
                auto [y, yd] = dsp::redistribute<L>(dsp::batch(x, xd));
                wrong += count_wrong(yd) + count_wrong(xd);
                out = y;
              } else if (kind == 3) {
                Y y{mesh, g};
                auto h = dsp::start_redistribute<L>(x, y);
                while (!h.test()) {
                }
                h.wait();
                out = y;
              } else {
                Y y{mesh, g};
                std::size_t seen = 0;
                dsp::redistribute_each<L>(x, y, [&](const auto& block, const auto&, int) { seen += block.size(); });
                if (seen != y.local_size()) ++wrong;
                out = y;
              }
            });
            std::visit([&](const auto& y) { wrong += count_wrong(y); }, *out);
            wrong += count_wrong(x);  // the input is unchanged
            return std::move(*out);
          },
          cur);
    }
  }
  CHECK(ops == total);
  CHECK(wrong == 0);
  for (std::size_t k : kinds) CHECK(k > 0);
  if (world().rank() == 0)
    std::printf(
        "soak on a %dx%d mesh: %zu redistributes (%zu plain, %zu into, %zu batched, %zu split-phase, %zu on arrival)\n",
        mesh.shape()[0], mesh.shape()[1], ops, kinds[0], kinds[1], kinds[2], kinds[3], kinds[4]);
}
