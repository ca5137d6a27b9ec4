// SPDX-License-Identifier: BSD-3-Clause
// dsp: the device kernels' tuning knobs, for measurements on a GPU: one
// binary times variants of the tuned kernels side by side (scripts/gpu-checks.sh
// takes them as kernel sets "tuned@KNOBS"; docs/gpu.md, "Tuning knobs"). Not
// part of the API. The defaults are the configuration measured best on an
// H200 (2026-11-27, fourth device session); other values are kept where a
// test or a comparison uses them, and a knob goes once its question is
// answered (stream hints and fp8 blocks per warp lost and went).
//
//   DSP_DEVICE_TUNING="waves=0,unroll=8,groups=1,convert=hardware"
//
//   waves      the tile copy kernel's grid: 0 a virtual team per tile, the
//              hardware's block scheduler balancing them (measured: pack
//              0.84 -> 0.90-0.92 of cudaMemcpyAsync); k >= 1 about k waves
//              of the device's threads walking the tiles grid-stride
//   unroll     the most 16-byte words a thread of the tile kernel copies per
//              tile, 1 to 8 (kTileUnroll; 8 measured, 4 no better)
//   groups     groups of 8 elements per thread of the wire kernels, 1 to 4
//              (kGroupsMax), a compile-time count: each thread loads all of
//              its groups before it stores any (measured: 1 packs fastest,
//              2 switches within 0.02 either way, 4 slower)
//   convert    hardware (measured: fp16 +20%, fp8 +24%, bf16 +5%): the wire
//              kernels convert with the device's instructions where it has
//              them (CUDA: bf16 from sm_80, fp16, fp8 e4m3 from sm_89);
//              software: with wire::to_bf16 and the others, as on the host.
//              The bits are the same either way (test_nccl checks it on the
//              device).
//
// Read once, at the first device kernel; an item that does not parse is
// ignored and keeps its default (the knob is for measurements, not for users'
// runs). Tests set device_tuning() directly.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string_view>

namespace dsp::detail {

struct DeviceTuning {
  std::size_t waves = 0;
  std::size_t unroll = 8;
  std::size_t groups = 1;
  bool hardware_convert = true;
};

/// DSP_DEVICE_TUNING parsed (see above).
inline DeviceTuning parse_device_tuning(std::string_view s) {
  DeviceTuning t;
  while (!s.empty()) {
    const std::size_t comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    std::size_t number = 0;
    bool is_number = !value.empty() && value.size() < 6;
    for (char c : value) is_number = is_number && c >= '0' && c <= '9', number = number * 10 + std::size_t(c - '0');
    if (key == "waves" && is_number) t.waves = number;
    else if (key == "unroll" && is_number && number >= 1 && number <= 8) t.unroll = number;
    else if (key == "groups" && is_number && number >= 1 && number <= 4) t.groups = number;
    else if (key == "convert" && (value == "hardware" || value == "software")) t.hardware_convert = value == "hardware";
  }
  return t;
}

inline DeviceTuning& device_tuning() {
  static DeviceTuning t = [] {
    const char* e = std::getenv("DSP_DEVICE_TUNING");
    return e ? parse_device_tuning(e) : DeviceTuning{};
  }();
  return t;
}

}  // namespace dsp::detail
