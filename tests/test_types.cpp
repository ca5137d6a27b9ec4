// SPDX-License-Identifier: BSD-3-Clause
// Every primitive for float, double, int32_t, int64_t and Kokkos::complex<double>.
#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace dsp_test;

namespace {

template <class T, std::size_t I, std::size_t J>
void check(const std::array<std::size_t, 3>& g) {
  using Rep = dsp::DistTensor<T, 3, dsp::Replicated, dsp::MpiCommunicator>;
  Rep r{world(), g};
  fill(r);
  auto x = dsp::split<I>(r);
  CHECK(count_wrong(x) == 0);
  auto y = dsp::dynamic_switch<J>(x);
  CHECK(count_wrong(y) == 0);
  auto z = dsp::gather(y);
  CHECK(count_wrong(z) == 0);
  CHECK(count_wrong(x) == 0);
}

template <class T>
void check_type() {
  const std::size_t n = static_cast<std::size_t>(world().size());
  for (auto g : {std::array<std::size_t, 3>{2 * n + 1, n + 2, 3}, std::array<std::size_t, 3>{1, 2, 2 * n}}) {
    check<T, 0, 1>(g);
    check<T, 1, 0>(g);
    check<T, 0, 2>(g);
    check<T, 2, 0>(g);
    check<T, 1, 2>(g);
    check<T, 2, 1>(g);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("every primitive moves this element type exactly", T, float, double, std::int32_t, std::int64_t,
                   Kokkos::complex<double>, std::uint8_t, std::int16_t) {
  check_type<T>();
}
