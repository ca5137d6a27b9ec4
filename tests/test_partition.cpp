// SPDX-License-Identifier: BSD-3-Clause
// Partition arithmetic, exhaustive for small extents and rank counts; the
// balanced mesh shapes of dsp::mesh_shape against a brute-force search.
#include <dsp/mesh.hpp>
#include <dsp/partition.hpp>

#include <doctest/doctest.h>

#include <array>
#include <vector>

TEST_CASE("partition: exhaustive for extents 0..200 over 1..40 parts") {
  for (std::size_t parts = 1; parts <= 40; ++parts) {
    for (std::size_t e = 0; e <= 200; ++e) {
      const dsp::Partition p{e, parts};
      std::size_t sum = 0;
      std::vector<int> owned(e, 0);
      for (std::size_t r = 0; r < parts; ++r) {
        CHECK(p.offset(r) == sum);  // contiguous, in rank order
        // the first e % parts parts hold one more
        CHECK(p.count(r) == e / parts + (r < e % parts ? 1 : 0));
        for (std::size_t i = p.offset(r); i < p.offset(r) + p.count(r); ++i) {
          ++owned[i];
          if (p.owner(i) != r) {
            FAIL_CHECK("owner(" << i << ") of " << e << " over " << parts << " is " << p.owner(i) << ", not " << r);
          }
        }
        sum += p.count(r);
      }
      CHECK(sum == e);
      for (int o : owned) CHECK(o == 1);
      CHECK(p.even() == (e % parts == 0));
    }
  }
}

TEST_CASE("partition: large extents do not overflow") {
  const std::size_t e = (std::size_t(1) << 40) + 7;
  const dsp::Partition p{e, 4096};
  CHECK(p.offset(4095) + p.count(4095) == e);
  CHECK(p.owner(e - 1) == 4095);
  CHECK(p.owner(0) == 0);
  CHECK(p.count(0) == p.count(6));
  CHECK(p.count(7) + 1 == p.count(0));
}

static_assert(dsp::Partition{10, 4}.count(0) == 3 && dsp::Partition{10, 4}.count(3) == 2);
static_assert(dsp::Partition{2, 4}.count(2) == 0 && dsp::Partition{2, 4}.offset(3) == 2);

TEST_CASE("the nested partition of meshes, exhaustively for small extents and meshes") {
  // For every extent up to 9, every mesh of up to 3 axes with up to 4 ranks
  // per axis, and every assignment of one dim to a subset of the axes: the
  // blocks of the sharding axes, in axis order (the first axis outermost),
  // tile [0, E) contiguously, and each split of a parent block follows the 1-D
  // rule (counts differ by at most one, larger first).
  for (std::size_t e = 0; e <= 9; ++e)
    for (int s0 = 1; s0 <= 4; ++s0)
      for (int s1 = 1; s1 <= 4; ++s1)
        for (int s2 = 1; s2 <= 3; ++s2)
          for (int mask = 1; mask < 8; ++mask) {
            const std::array<int, 3> shape{s0, s1, s2};
            std::array<long, 3> codes{};
            for (std::size_t a = 0; a < 3; ++a) codes[a] = (mask >> a) & 1 ? 0 : -1;
            std::size_t next = 0;  // the next offset, in axis order of the sharding axes' coordinates
            for (int c0 = 0; c0 < (codes[0] == 0 ? s0 : 1); ++c0)
              for (int c1 = 0; c1 < (codes[1] == 0 ? s1 : 1); ++c1)
                for (int c2 = 0; c2 < (codes[2] == 0 ? s2 : 1); ++c2) {
                  const std::array<int, 3> coords{c0, c1, c2};
                  const auto b = dsp::detail::nested_box(std::array<std::size_t, 1>{e}, codes, shape, coords);
                  CHECK(b.offset[0] == next);
                  next += b.count[0];
                  // the 1-D rule at the innermost split: this block against its parent's
                  std::size_t last = 2;
                  while (codes[last] != 0) --last;
                  std::array<long, 3> parent_codes = codes;
                  parent_codes[last] = -1;
                  const auto parent =
                      dsp::detail::nested_box(std::array<std::size_t, 1>{e}, parent_codes, shape, coords);
                  const dsp::Partition p{parent.count[0], std::size_t(shape[last])};
                  CHECK(b.count[0] == p.count(std::size_t(coords[last])));
                  CHECK(b.offset[0] == parent.offset[0] + p.offset(std::size_t(coords[last])));
                }
            CHECK(next == e);
          }
}

namespace {
/// The balance key of mesh_shape's contract: largest minus smallest extent,
/// then the largest, then the sum of squares.
std::array<long long, 3> balance(const std::vector<int>& v) {
  long long lo = v[0], hi = v[0], squares = 0;
  for (int x : v) {
    lo = std::min<long long>(lo, x);
    hi = std::max<long long>(hi, x);
    squares += static_cast<long long>(x) * x;
  }
  return {hi - lo, hi, squares};
}
/// Every K-tuple of extents whose product is n (in any order), the best key.
void all_shapes(int n, std::size_t k, std::vector<int>& cur, std::array<long long, 3>& best) {
  if (k == 0) {
    if (n == 1) best = std::min(best, balance(cur));
    return;
  }
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) {
      cur.push_back(d);
      all_shapes(n / d, k - 1, cur, best);
      cur.pop_back();
    }
}
template <std::size_t K>
void check_mesh_shapes(int up_to) {
  for (int n = 1; n <= up_to; ++n) {
    const auto s = dsp::mesh_shape<K>(n);
    long long product = 1;
    for (std::size_t a = 0; a < K; ++a) product *= s[a];
    CHECK(product == n);
    for (std::size_t a = 1; a < K; ++a) CHECK(s[a - 1] >= s[a]);  // MPI_Dims_create's order
    std::vector<int> cur;
    std::array<long long, 3> best{1LL << 62, 0, 0};
    all_shapes(n, K, cur, best);
    CHECK_MESSAGE(balance(std::vector<int>(s.begin(), s.end())) == best, "n = ", n, ", K = ", K);
  }
}
}  // namespace

TEST_CASE("mesh_shape: balanced shapes, non-increasing, against every factorization") {
  CHECK(dsp::mesh_shape<1>(6) == std::array<int, 1>{6});
  CHECK(dsp::mesh_shape<2>(12) == std::array<int, 2>{4, 3});
  CHECK(dsp::mesh_shape<2>(7) == std::array<int, 2>{7, 1});
  CHECK(dsp::mesh_shape<2>(72) == std::array<int, 2>{9, 8});  // MPI_Dims_create gives {12, 6}
  CHECK(dsp::mesh_shape<3>(8) == std::array<int, 3>{2, 2, 2});
  CHECK(dsp::mesh_shape<4>(20) == std::array<int, 4>{5, 2, 2, 1});
  CHECK(dsp::mesh_shape<4>(1) == std::array<int, 4>{1, 1, 1, 1});
  check_mesh_shapes<2>(400);
  check_mesh_shapes<3>(200);
  check_mesh_shapes<4>(120);
  // the largest rank counts: 2^31 - 1 is prime; 735134400 has 1344 divisors
  CHECK(dsp::mesh_shape<4>(2147483647) == std::array<int, 4>{2147483647, 1, 1, 1});
  CHECK(dsp::mesh_shape<2>(1 << 30) == std::array<int, 2>{32768, 32768});
  const auto h = dsp::mesh_shape<4>(735134400);
  CHECK(static_cast<long long>(h[0]) * h[1] * h[2] * h[3] == 735134400);
  CHECK(h == std::array<int, 4>{170, 168, 165, 156});
  CHECK_THROWS_AS(dsp::mesh_shape<2>(0), dsp::InvalidArgument);
  CHECK_THROWS_AS(dsp::mesh_shape<3>(-4), dsp::InvalidArgument);
}
