// SPDX-License-Identifier: BSD-3-Clause
// The wire kernels' two schedules (kernels/convert.hpp): the block loop the
// host runs, and the element schedule devices run (a thread per element; a
// team per fp8 block), run here on the host's execution space, must write
// the same bytes for every element kind, every wire that carries it, run
// patterns contiguous or not, and chunks of any length (partial last fp8
// blocks included). The block loop itself is checked against the documented
// bounds by test_wire and test_half through whole switches.
#include <doctest/doctest.h>

#include <dsp/half.hpp>
#include <dsp/kernels/convert.hpp>
#include <dsp/wire.hpp>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using dsp::ElemKind;
using dsp::Runs;
using dsp::Wire;
using HostExec = Kokkos::DefaultHostExecutionSpace;

std::size_t elem_bytes(ElemKind k) { return k == ElemKind::f64 ? 8 : k == ElemKind::f32 ? 4 : 2; }

/// Random raw values of kind k: mostly finite values of many magnitudes, some NaN and infinities.
std::vector<unsigned char> random_elements(ElemKind k, std::size_t n, std::mt19937& rng) {
  std::vector<unsigned char> v(n * elem_bytes(k));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) {
    float f = u(rng) * std::ldexp(1.0f, int(rng() % 30) - 15);
    if (rng() % 50 == 0) f = std::numeric_limits<float>::infinity();
    if (rng() % 60 == 0) f = std::numeric_limits<float>::quiet_NaN();
    unsigned char* p = v.data() + i * elem_bytes(k);
    if (k == ElemKind::f32) std::memcpy(p, &f, 4);
    else if (k == ElemKind::f64) {
      const double d = double(f) * (1 + std::ldexp(1.0, -35));
      std::memcpy(p, &d, 8);
    } else {
      const std::uint16_t h = k == ElemKind::bf16 ? dsp::wire::to_bf16(f) : dsp::wire::to_fp16(f);
      std::memcpy(p, &h, 2);
    }
  }
  return v;
}

/// A run pattern of n elements inside a buffer: contiguous from element 3,
/// or runs of `len` at `stride`; `aligned`: runs of 64 from element 8 at a
/// stride of 72, so groups of 8 elements start 16-byte aligned (the device
/// group schedule's vector path).
Runs pattern(std::size_t n, bool contiguous, std::size_t len, std::size_t& extent, bool aligned = false) {
  if (aligned && n > 0) {
    extent = 8 + (n / 64 + 1) * 72;
    return Runs{8, 72, 64};
  }
  if (contiguous || n == 0) {
    extent = n + 3;
    return Runs{3, n ? n : 1, n ? n : 1};
  }
  while (n % len) --len;
  extent = 5 + (n / len) * (len + 2);
  return Runs{5, len + 2, len};
}

}  // namespace

TEST_CASE("wire kernels: both device schedules write the bytes of the block schedule, every kind and wire") {
  std::mt19937 rng(20261126);
  const ElemKind kinds[] = {ElemKind::f32, ElemKind::f64, ElemKind::bf16, ElemKind::f16};
  const HostExec exec;
  std::size_t cases = 0;
  for (ElemKind k : kinds)
    for (Wire w : dsp::kWires) {
      if (w == Wire::exact || !dsp::wire_carries(w, k)) continue;
      for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(127), std::size_t(128), std::size_t(129),
                            std::size_t(1000), std::size_t(4096 + 77)})
        for (int layout : {0, 1, 2}) {
          const bool contiguous = layout == 0, aligned = layout == 2;
          INFO("kind ", std::string(dsp::elem_kind_name(k)), " wire ", std::string(dsp::wire_name(w)), " n ", n,
               " layout ", layout);
          ++cases;
          std::size_t ext = 0;
          const Runs runs = pattern(n, contiguous, 1 + rng() % 40, ext, aligned);
          const auto src = random_elements(k, ext, rng);
          const std::size_t sec_bytes = dsp::wire_section_bytes(w, n, elem_bytes(k));
          // pack: the block loop (the host's), then each device schedule
          constexpr int E = dsp::detail::kElements, G = dsp::detail::kGroups;
          std::vector<unsigned char> a(sec_bytes + 8, 0xab), b(a), g(a);
          dsp::detail::wire_pack(exec, w, k, a.data(), src.data(), runs, n);
          dsp::detail::wire_pack<E>(exec, w, k, b.data(), src.data(), runs, n);
          dsp::detail::wire_pack<G>(exec, w, k, g.data(), src.data(), runs, n);
          exec.fence();
          CHECK(a == b);
          CHECK(a == g);
          // unpack (of that section) into a buffer whose other bytes must stay
          std::vector<unsigned char> ua(ext * elem_bytes(k), 0x5a), ub(ua), ug(ua);
          dsp::detail::wire_unpack(exec, w, k, ua.data(), runs, a.data(), n);
          dsp::detail::wire_unpack<E>(exec, w, k, ub.data(), runs, a.data(), n);
          dsp::detail::wire_unpack<G>(exec, w, k, ug.data(), runs, a.data(), n);
          exec.fence();
          CHECK(ua == ub);
          CHECK(ua == ug);
          // the own block: one run pattern to another
          std::size_t ext2 = 0;
          const Runs other = pattern(n, !contiguous, 1 + rng() % 40, ext2, aligned);
          std::vector<unsigned char> ra(ext2 * elem_bytes(k), 0x33), rb(ra), rg(ra);
          const dsp::detail::CopyTask t{other, runs, n};
          dsp::detail::wire_round(exec, w, k, ra.data(), src.data(), t);
          dsp::detail::wire_round<E>(exec, w, k, rb.data(), src.data(), t);
          dsp::detail::wire_round<G>(exec, w, k, rg.data(), src.data(), t);
          exec.fence();
          CHECK(ra == rb);
          CHECK(ra == rg);
          // what a peer receives equals the own block's rounding (unpack of the pack vs round)
          std::vector<unsigned char> rc(ext2 * elem_bytes(k), 0x33);
          dsp::detail::wire_unpack(exec, w, k, rc.data(), other, a.data(), n);
          exec.fence();
          CHECK(rc == ra);
        }
    }
  CHECK(cases == 3 * 7 * 7);  // float: 3 wires, double 1, bf16 1, fp16 2
}
