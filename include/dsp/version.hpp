// SPDX-License-Identifier: BSD-3-Clause
// dsp's version. It is written here and nowhere else: the top-level
// CMakeLists.txt reads the three DSP_VERSION_* lines below (keep them as
// `#define DSP_VERSION_X <number>`) and hands them to project(VERSION), from
// which the installed package files (dspConfigVersion.cmake) get theirs.
#pragma once

#include <string_view>

/// Major version: changes that break source compatibility.
#define DSP_VERSION_MAJOR 0
/// Minor version: additions.
#define DSP_VERSION_MINOR 1
/// Patch version: fixes.
#define DSP_VERSION_PATCH 0

#define DSP_VERSION_STR_IMPL_(x) #x
#define DSP_VERSION_STR_(x) DSP_VERSION_STR_IMPL_(x)
/// The version as a string literal, "MAJOR.MINOR.PATCH".
#define DSP_VERSION_STRING \
  DSP_VERSION_STR_(DSP_VERSION_MAJOR) "." DSP_VERSION_STR_(DSP_VERSION_MINOR) "." DSP_VERSION_STR_(DSP_VERSION_PATCH)

namespace dsp {

/// The version of the dsp headers in use, "MAJOR.MINOR.PATCH" (DSP_VERSION_STRING).
constexpr std::string_view version() noexcept { return DSP_VERSION_STRING; }

}  // namespace dsp
