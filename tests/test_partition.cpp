// SPDX-License-Identifier: BSD-3-Clause
// Partition arithmetic, exhaustive for small extents and rank counts.
#include <dsp/partition.hpp>

#include <doctest/doctest.h>

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
