// SPDX-License-Identifier: BSD-3-Clause
// dsp: process-wide settings, each with an environment variable that sets its
// start value. Every rank must use the same settings; the agreement check of
// each collective compares the ones that decide which collective runs.
//
//   setting                       environment variable      default
//   set_agreement_checks(bool)    DSP_AGREEMENT_CHECKS=1|0  on
//   set_call_site_checks(bool)    DSP_CALL_SITE_CHECKS=1|0  on
//   set_switch_algorithm(a)       DSP_SWITCH_ALGORITHM=...  automatic
//   set_collective_deadline(d)    DSP_DEADLINE_SECONDS=s    none (0)
//   set_planning(p)               DSP_PLANNING=...          heuristic
//   set_agreement_mode(m)         DSP_AGREEMENT_MODE=...    every_call
//   set_device_kernels(k)         DSP_DEVICE_KERNELS=...    tuned
//
// An environment variable with a value dsp does not accept makes the next
// collective raise dsp::InvalidArgument on every rank, naming the accepted
// values (until the setting is made by a call). The setters are not
// synchronized: call them between collectives, not while another thread runs one.
#pragma once

#include <dsp/error.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>

namespace dsp {

/// How dynamic_switch moves data between ranks. Every rank must use the same
/// setting: dsp picks from values equal on all ranks, never from local counts,
/// and the agreement check compares the resolved choice.
enum class SwitchAlgorithm {
  automatic,  ///< per shape, from the global extents, element size and rank count (the default)
  alltoall,   ///< pack every chunk, the own one included, into one equal-count all-to-all, unpack:
              ///< the fewest calls, best for small tensors; needs both dims divisible by the rank
              ///< count (otherwise resolves to alltoallv)
  alltoallv,  ///< pack only non-contiguous chunks, one all-to-all-v with the own chunk excluded
              ///< (copied input to output directly), unpack only where needed
  pairwise,   ///< point-to-point messages straight from the input's contiguous runs into the
              ///< output's, no pack or unpack, own chunk copied while they fly; resolves to
              ///< alltoallv on backends without point-to-point exchange (dsp::PeerExchange);
              ///< gathers whose blocks do not land contiguously go point to point too
  datatypes,  ///< one all-to-all-w with a strided datatype per peer: the backend (MPI) packs and
              ///< unpacks while it transfers; resolves to alltoallv on backends without it
              ///< (dsp::TypedExchange) or for tensors whose byte offsets pass INT_MAX
};

/// The name of an algorithm, as DSP_SWITCH_ALGORITHM spells it.
constexpr const char* to_string(SwitchAlgorithm a) noexcept {
  switch (a) {
    case SwitchAlgorithm::automatic: return "automatic";
    case SwitchAlgorithm::alltoall: return "alltoall";
    case SwitchAlgorithm::alltoallv: return "alltoallv";
    case SwitchAlgorithm::pairwise: return "pairwise";
    case SwitchAlgorithm::datatypes: return "datatypes";
  }
  return "unknown";
}

/// How dsp chooses what it does not get told: the switch algorithm, whether
/// a batch packs its tensors or moves each on its own, how a gather moves,
/// for each step of an operation. Every rank must use the same setting (the
/// agreement check compares it).
enum class Planning {
  heuristic,  ///< rules over the global shape, element size and rank count (the default)
  measure,    ///< the first time a shape is seen, time the candidates on this machine (max over
              ///< ranks), keep the fastest; see dsp/wisdom.hpp
};

/// The name of a planning mode, as DSP_PLANNING spells it.
constexpr const char* to_string(Planning p) noexcept { return p == Planning::measure ? "measure" : "heuristic"; }

/// When the agreement check runs (with agreement checks on). Every rank must
/// use the same mode (the check compares it).
enum class AgreementMode {
  every_call,  ///< before every collective (the default)
  first_call,  ///< before the first call of each call description (operation, call site, shapes, layouts,
               ///< types, settings) on each communicator; later identical calls run with no agreement
               ///< collective and no host wait. docs/reliability.md says what this no longer catches.
};

/// The name of an agreement mode, as DSP_AGREEMENT_MODE spells it.
constexpr const char* to_string(AgreementMode m) noexcept {
  return m == AgreementMode::first_call ? "first_call" : "every_call";
}

/// Which device kernels copy and convert (GPU execution spaces only; host
/// execution spaces always run the host kernels). Both are in every build, so
/// one run can measure them side by side (scripts/gpu-checks.sh).
enum class DeviceKernels {
  tuned,     ///< tiles of up to 8 words of up to 16 bytes per thread, the index arithmetic once per thread and
             ///< tile, the copy engine for large contiguous tasks; wires a group of 8 elements per thread, fp8
             ///< blocks on 32 vector lanes (the default)
  segments,  ///< the first tuned kernels (docs/gpu.md, 2026-11-27): a team per segment of a task, 4 words
             ///< in flight per thread; wires one element per thread, fp8 a team per block
  baseline,  ///< the first device run's kernels (docs/gpu.md): a thread per word found by binary search,
             ///< wires a thread per block of 128 elements
};

/// The name of a kernel set, as DSP_DEVICE_KERNELS spells it.
constexpr const char* to_string(DeviceKernels k) noexcept {
  return k == DeviceKernels::baseline ? "baseline" : k == DeviceKernels::segments ? "segments" : "tuned";
}

namespace detail {

/// One setting: its value, and why the environment's value was refused ("" if not).
template <class T>
struct Setting {
  T value;
  std::string error;
};

DSP_FUNC std::string env_error(const char* name, std::string_view value, const char* accepted);
#if DSP_FUNC_BODIES
DSP_FUNC std::string env_error(const char* name, std::string_view value, const char* accepted) {
  return std::string(name) + "=" + std::string(value) + " is not a value dsp accepts; accepted: " + accepted;
}
#endif

inline Setting<bool> env_bool(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return {fallback, ""};
  const std::string_view v = e;
  if (v == "1" || v == "on" || v == "true" || v == "yes") return {true, ""};
  if (v == "0" || v == "off" || v == "false" || v == "no") return {false, ""};
  return {fallback, env_error(name, v, "1, on, true, yes, 0, off, false, no")};
}

inline Setting<bool>& agreement_setting() {
  static Setting<bool> s = env_bool("DSP_AGREEMENT_CHECKS", true);
  return s;
}
inline Setting<bool>& call_site_setting() {
  static Setting<bool> s = env_bool("DSP_CALL_SITE_CHECKS", true);
  return s;
}
inline Setting<SwitchAlgorithm>& switch_setting() {
  static Setting<SwitchAlgorithm> s = [] {
    const char* e = std::getenv("DSP_SWITCH_ALGORITHM");
    if (!e || !*e) return Setting<SwitchAlgorithm>{SwitchAlgorithm::automatic, ""};
    for (SwitchAlgorithm a : {SwitchAlgorithm::automatic, SwitchAlgorithm::alltoall, SwitchAlgorithm::alltoallv,
                              SwitchAlgorithm::pairwise, SwitchAlgorithm::datatypes})
      if (std::string_view(e) == to_string(a)) return Setting<SwitchAlgorithm>{a, ""};
    return Setting<SwitchAlgorithm>{
        SwitchAlgorithm::automatic,
        env_error("DSP_SWITCH_ALGORITHM", e, "automatic, alltoall, alltoallv, pairwise, datatypes")};
  }();
  return s;
}
inline Setting<Planning>& planning_setting() {
  static Setting<Planning> s = [] {
    const char* e = std::getenv("DSP_PLANNING");
    if (!e || !*e || std::string_view(e) == "heuristic") return Setting<Planning>{Planning::heuristic, ""};
    if (std::string_view(e) == "measure") return Setting<Planning>{Planning::measure, ""};
    return Setting<Planning>{Planning::heuristic, env_error("DSP_PLANNING", e, "heuristic, measure")};
  }();
  return s;
}
inline Setting<AgreementMode>& agreement_mode_setting() {
  static Setting<AgreementMode> s = [] {
    const char* e = std::getenv("DSP_AGREEMENT_MODE");
    if (!e || !*e || std::string_view(e) == "every_call") return Setting<AgreementMode>{AgreementMode::every_call, ""};
    if (std::string_view(e) == "first_call") return Setting<AgreementMode>{AgreementMode::first_call, ""};
    return Setting<AgreementMode>{AgreementMode::every_call,
                                  env_error("DSP_AGREEMENT_MODE", e, "every_call, first_call")};
  }();
  return s;
}
inline Setting<DeviceKernels>& device_kernels_setting() {
  static Setting<DeviceKernels> s = [] {
    const char* e = std::getenv("DSP_DEVICE_KERNELS");
    if (!e || !*e || std::string_view(e) == "tuned") return Setting<DeviceKernels>{DeviceKernels::tuned, ""};
    if (std::string_view(e) == "baseline") return Setting<DeviceKernels>{DeviceKernels::baseline, ""};
    if (std::string_view(e) == "segments") return Setting<DeviceKernels>{DeviceKernels::segments, ""};
    return Setting<DeviceKernels>{DeviceKernels::tuned,
                                  env_error("DSP_DEVICE_KERNELS", e, "tuned, segments, baseline")};
  }();
  return s;
}
/// DSP_DEADLINE_SECONDS as a setting (read by deadline_setting, once).
inline Setting<std::chrono::milliseconds> read_deadline_env() {
  using ms = std::chrono::milliseconds;
  const char* e = std::getenv("DSP_DEADLINE_SECONDS");
  if (!e || !*e) return Setting<ms>{ms(0), ""};
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  if (end == e || *end != '\0' || !(v >= 0) || v > 1e9)
    return Setting<ms>{ms(0), env_error("DSP_DEADLINE_SECONDS", e,
                                        "a number of seconds from 0 to 1e9 (about 31 years); 0: no deadline")};
  return Setting<ms>{ms(static_cast<long long>(v * 1000.0 + 0.5)), ""};
}
inline Setting<std::chrono::milliseconds>& deadline_setting() {
  static Setting<std::chrono::milliseconds> s = read_deadline_env();
  return s;
}

/// Whether every setting from the environment was accepted: the check every
/// collective makes, without building text.
inline bool settings_ok() {
  return agreement_setting().error.empty() && call_site_setting().error.empty() && switch_setting().error.empty() &&
         deadline_setting().error.empty() && planning_setting().error.empty() &&
         agreement_mode_setting().error.empty() && device_kernels_setting().error.empty();
}

/// Why a setting from the environment was refused ("" when all are fine).
/// Collectives check it before they communicate, so it raises on every rank.
inline std::string settings_error() {
  std::string why;
  for (const std::string* e :
       {&agreement_setting().error, &call_site_setting().error, &switch_setting().error, &deadline_setting().error,
        &planning_setting().error, &agreement_mode_setting().error, &device_kernels_setting().error})
    if (!e->empty()) why += (why.empty() ? "" : "; ") + *e;
  return why;
}

}  // namespace detail

/// Turns the cross-rank agreement check of every collective on or off (on by
/// default). Off saves one small all-gather per call, but ranks that then
/// disagree may hang or corrupt data. Every rank must use the same setting.
inline void set_agreement_checks(bool on) { detail::agreement_setting() = {on, ""}; }
/// Whether collectives check cross-rank agreement first.
inline bool agreement_checks() { return detail::agreement_setting().value; }

/// Turns the call-site part of the agreement check on or off (on by default).
/// On, ranks that reach one collective from different places in the source
/// (a rank that skipped a call and is already at the next one, say) raise
/// MismatchError instead of exchanging data of two different calls. Turn it
/// off for codes that reach the same collective from different places on
/// purpose (e.g. rank 0 in one branch, the others in another), or whose ranks
/// run different executables.
inline void set_call_site_checks(bool on) { detail::call_site_setting() = {on, ""}; }
/// Whether the agreement check compares call sites.
inline bool call_site_checks() { return detail::call_site_setting().value; }

/// Forces the algorithm of every following dynamic_switch (automatic by
/// default; see SwitchAlgorithm). Every rank must use the same setting.
inline void set_switch_algorithm(SwitchAlgorithm a) { detail::switch_setting() = {a, ""}; }
/// The algorithm setting dynamic_switch uses.
inline SwitchAlgorithm switch_algorithm() { return detail::switch_setting().value; }

/// Chooses how the following collectives plan (Planning::heuristic by
/// default). Under Planning::measure, an operation whose plan is not known
/// yet times its candidates once, on every rank together, and every later
/// call with the same shape runs the fastest at no extra cost. A forced
/// switch algorithm (set_switch_algorithm) is still obeyed. Every rank must
/// use the same setting.
inline void set_planning(Planning p) { detail::planning_setting() = {p, ""}; }
/// The planning mode collectives use.
inline Planning planning() { return detail::planning_setting().value; }

/// Chooses when the agreement check runs (AgreementMode::every_call by
/// default). Under first_call, the first call of each call description on a
/// communicator is checked in full and identical later calls are not: no
/// agreement collective, no host wait (a stream-ordered backend's warm call
/// can then be captured in a CUDA graph). What that gives up is in
/// docs/reliability.md. Every rank must use the same mode.
inline void set_agreement_mode(AgreementMode m) { detail::agreement_mode_setting() = {m, ""}; }
/// The agreement mode collectives use.
inline AgreementMode agreement_mode() { return detail::agreement_mode_setting().value; }

/// Chooses the device kernels (DeviceKernels::tuned by default): for
/// measuring them side by side in one run. Local; results are identical.
inline void set_device_kernels(DeviceKernels k) { detail::device_kernels_setting() = {k, ""}; }
/// The device kernels in use.
inline DeviceKernels device_kernels() { return detail::device_kernels_setting().value; }

/// How long a rank waits in a collective's agreement check for the other
/// ranks to arrive before it raises dsp::TimeoutError naming the operation and
/// the ranks that did not come (0, the default: wait forever). Needs the
/// agreement check on, and a backend with a deadline-aware control channel
/// (MPI, Self; NCCL waits forever). After a timeout the communicator cannot be
/// used again. Every rank must use the same setting.
inline void set_collective_deadline(std::chrono::milliseconds d) {
  detail::deadline_setting() = {d < std::chrono::milliseconds(0) ? std::chrono::milliseconds(0) : d, ""};
}
/// The collective deadline (0: none).
inline std::chrono::milliseconds collective_deadline() { return detail::deadline_setting().value; }

}  // namespace dsp
