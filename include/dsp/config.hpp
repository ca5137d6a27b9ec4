// SPDX-License-Identifier: BSD-3-Clause
// dsp: every configuration macro, in one place. A leaf header: every other
// header that tests one of these includes it.
//
//   DSP_COMPILED         defined by the dsp::compiled target (or by hand, with
//                        -ldsp_compiled): the host-memory engine and every
//                        DSP_FUNC function are compiled once, in the library
//   DSP_COMPILED_SOURCE  defined only by src/compiled.cpp, the library itself
//   DSP_CHECK_IN_FLIGHT  1 (the default) or 0: the split-phase in-flight guard
//
// and what they imply, for the headers:
//
//   DSP_FUNC                `inline` header-only; nothing (declared, defined in
//                           the library) with DSP_COMPILED
//   DSP_FUNC_BODIES         1 where the headers hold DSP_FUNC bodies
//   DSP_ENGINE_DEFINITIONS  1 where the headers hold the engine's definitions
#pragma once

// Header-only or compiled. By default dsp is header-only: every function is
// defined in the headers (DSP_FUNC is `inline`). A program that links the
// dsp::compiled library gets DSP_COMPILED: then the functions marked DSP_FUNC
// are only declared in its files, and defined once in the library
// (src/compiled.cpp, which defines DSP_COMPILED_SOURCE), with the host-memory
// engine (engine/api.hpp).
#if defined(DSP_COMPILED) || defined(DSP_COMPILED_SOURCE)
#define DSP_FUNC
#else
#define DSP_FUNC inline
#endif
#if !defined(DSP_COMPILED) || defined(DSP_COMPILED_SOURCE)
#define DSP_FUNC_BODIES 1
#else
#define DSP_FUNC_BODIES 0
#endif

// Whether the engine's definitions are in the headers: always, but with
// DSP_COMPILED on a host-only Kokkos, where the library has every memory
// space there is (a device backend's memory spaces instantiate from the
// headers). Only the compiled mode needs Kokkos' configuration to say.
#if !defined(DSP_COMPILED) || defined(DSP_COMPILED_SOURCE)
#define DSP_ENGINE_DEFINITIONS 1
#else
#include <Kokkos_Macros.hpp>
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || defined(KOKKOS_ENABLE_SYCL) || \
    defined(KOKKOS_ENABLE_OPENMPTARGET)
#define DSP_ENGINE_DEFINITIONS 1
#else
#define DSP_ENGINE_DEFINITIONS 0
#endif
#endif

/// DSP_CHECK_IN_FLIGHT: 1 (the default, in every build) makes
/// DistTensor::local() raise UsageError on the output of a split-phase
/// operation that has not been waited for (reading it then gives stale data).
/// It costs one relaxed atomic load per local() while nothing is in flight,
/// and a lock with a short list per start and wait (docs/reliability.md has
/// the measurement). 0 compiles it out. Define it the same way in every
/// translation unit of a program.
#ifndef DSP_CHECK_IN_FLIGHT
#define DSP_CHECK_IN_FLIGHT 1
#endif
