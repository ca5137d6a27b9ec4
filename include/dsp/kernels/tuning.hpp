// SPDX-License-Identifier: BSD-3-Clause
// dsp: the device kernels' tuning knobs, for measurements on a GPU: one
// binary times variants of the tuned kernels side by side (scripts/gpu-checks.sh
// takes them as kernel sets "tuned@KNOBS"; docs/gpu.md, "Tuning knobs"). Not
// part of the API. The defaults are the configuration measured on an H200 on
// 2026-11-27; the other values are candidates written since, to be measured
// against them before one becomes a default, and a knob goes once its
// question is answered.
//
//   DSP_DEVICE_TUNING="waves=1,unroll=8,stream=0,groups=1,convert=software"
//
//   waves    the tile copy kernel's grid: k >= 1 about k waves of the device's
//            threads walking the tiles grid-stride (measured: 1); 0 a virtual
//            team per tile, the hardware's block scheduler balancing them
//   unroll   the most 16-byte words a thread of the tile kernel copies per
//            tile, 1 to 8 (kTileUnroll)
//   stream   1: the tile kernel's 16-byte loads and stores carry the
//            streaming cache hint (evict first); 0: plain (measured)
//   groups   groups of 8 elements per thread of the wire kernels, 1 (measured)
//            to 4 (kGroupsMax): each thread loads all of its groups before it
//            stores any
//   convert  software: the wire kernels convert with wire::to_bf16 and the
//            others, as on the host (measured); hardware: with the device's
//            conversion instructions where it has them (CUDA: bf16 from sm_80,
//            fp16, fp8 e4m3 from sm_89). The bits are the same either way
//            (test_nccl checks it on the device).
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
  std::size_t waves = 1;
  std::size_t unroll = 8;
  bool stream = false;
  std::size_t groups = 1;
  bool hardware_convert = false;
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
    else if (key == "stream" && (value == "0" || value == "1")) t.stream = value == "1";
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
