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
