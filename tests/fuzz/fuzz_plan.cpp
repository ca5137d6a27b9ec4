// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target for the partition and plan arithmetic: the fuzzer's bytes
// are decoded into a shape, dims and a rank count, which go through the same
// checks as tests/test_plan_property.cpp (small shapes simulated element by
// element and through the real copy kernel, huge shapes by arithmetic). Any failed check prints
// what was being checked and aborts, which libFuzzer reports as a crash and
// saves as build-fuzz/crash-<hash>; scripts/fuzz.sh builds and runs this target.
//
// A crash input becomes a regression test: rerun it with
//   build-fuzz/fuzz_plan crash-<hash>
// to read the failing case (shape, dims, rank count) from the message, and
// add that case to tests/test_plan_property.cpp.
#include <cstdio>
#include <cstdlib>
#include <string>

#define DSP_PLAN_FAIL(message)                                             \
  do {                                                                     \
    std::fprintf(stderr, "fuzz_plan: %s\n", std::string(message).c_str()); \
    std::abort();                                                          \
  } while (0)
#include "../plan_checks.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <random>

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  Kokkos::initialize(*argc, *argv);  // the small cases run the real (host) copy kernel
  std::atexit([] { Kokkos::finalize(); });
  return 0;
}

namespace {
/// Reads the input front to back; past its end, zeros.
struct Bytes {
  const std::uint8_t* p;
  std::size_t n;
  std::uint64_t take(std::size_t k) {
    std::uint64_t v = 0;
    for (std::size_t b = 0; b < k; ++b, ++p, n = n ? n - 1 : 0) v = v << 8 | (n ? *p : 0);
    return v;
  }
};
}  // namespace

// Byte 0 picks the mode. Small: rank (1..5), ranks (1..9), one byte per
// extent (0..11); every primitive is simulated. Huge: rank (2..8), ranks
// (1..4096), the two switch dims and the gather dim, four bytes per extent
// (0..1e9), then the total is capped at 2^52 elements.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Bytes in{data + 1, size - 1};
  std::mt19937_64 rng(size);  // only for sampling inside the huge checks
  if (data[0] % 2 == 0) {
    const std::size_t rank = 1 + in.take(1) % 5, n = 1 + in.take(1) % 9;
    Ext g(rank);
    for (auto& x : g) x = in.take(1) % 12;
    check_small_shape(g, n);
  } else {
    const std::size_t rank = 2 + in.take(1) % 7, n = 1 + in.take(2) % 4096;
    const std::size_t i = in.take(1) % rank, j0 = in.take(1) % rank, d = in.take(1) % rank;
    const std::size_t j = j0 == i ? (i + 1) % rank : j0;
    Ext g(rank);
    for (auto& x : g) x = in.take(4) % 1000000001;
    shrink_to(rng, g, std::size_t(1) << 52);
    check_huge_shape(rng, g, i, j, d, n);
  }
  return 0;
}
