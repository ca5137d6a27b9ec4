// SPDX-License-Identifier: BSD-3-Clause
// The wire kernels' schedules (kernels/convert.hpp): the block loop the host
// runs, and the device schedules (DeviceKernels::tuned: groups of 8 elements,
// 1 or 3 per thread, and fp8 lanes, here a thread per block: test_nccl runs
// the warp form on a CUDA device; segments: a thread per element, a team per
// fp8 block), run here on the host's execution space, must write the same
// bytes for every element kind, every wire that carries it, run patterns
// contiguous or not, and chunks of any length (partial last fp8 blocks
// included). The block loop itself is checked against the documented bounds
// by test_wire and test_half through whole switches.
#include <doctest/doctest.h>

#include <dsp/half.hpp>
#include <dsp/kernels/convert.hpp>
#include <dsp/wire.hpp>

#include "wire_cases.hpp"

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
using dsp_test::elem_bytes;
using dsp_test::pattern;
using dsp_test::random_elements;

}  // namespace

TEST_CASE("wire kernels: both device schedules write the bytes of the block schedule, every kind and wire") {
  std::mt19937 rng(20261126);
  const ElemKind kinds[] = {ElemKind::f32, ElemKind::f64, ElemKind::bf16, ElemKind::f16};
  const HostExec exec;
  std::size_t cases = 0;
  auto& tuning = dsp::detail::device_tuning();
  const dsp::detail::DeviceTuning saved = tuning;
  for (std::size_t groups : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(4)})
    for (ElemKind k : kinds)
      for (Wire w : dsp::kWires) {
        tuning.groups = groups;  // groups per thread of the group schedule
        if (w == Wire::exact || !dsp::wire_carries(w, k)) continue;
        for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(127), std::size_t(128), std::size_t(129),
                              std::size_t(1000), std::size_t(4096 + 77)})
          for (int layout : {0, 1, 2}) {
            const bool contiguous = layout == 0, aligned = layout == 2;
            INFO("kind ", std::string(dsp::elem_kind_name(k)), " wire ", std::string(dsp::wire_name(w)), " n ", n,
                 " layout ", layout, " groups per thread ", groups);
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
  tuning = saved;
  CHECK(cases == 4 * 3 * 7 * 7);  // kind-wire pairs (float 3, double 1, bf16 1, fp16 2) x lengths x layouts, 4 tunings
}
