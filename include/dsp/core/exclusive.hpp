// SPDX-License-Identifier: BSD-3-Clause
// dsp: the start of every collective: Kokkos must be usable, and the
// communicator free (one collective at a time per communicator) and not
// given up after a timeout. Used by the engine and by the front ends that
// agree before they hand anything to it (construction from a view, meshes,
// groups, distribute).
#pragma once

#include <dsp/core/agree.hpp>
#include <dsp/error.hpp>

#include <Kokkos_Core.hpp>

#include <exception>
#include <string>

namespace dsp::detail {

/// Throws UsageError when Kokkos cannot be used: before Kokkos::initialize or
/// after Kokkos::finalize.
DSP_FUNC void require_kokkos(const char* op);
#if DSP_FUNC_BODIES
DSP_FUNC void require_kokkos(const char* op) {
#if defined(KOKKOS_VERSION) && KOKKOS_VERSION >= 40000
  if (Kokkos::is_finalized())
    throw UsageError(std::string(op) +
                     ": Kokkos is finalized; finish every dsp call and destroy dsp tensors "
                     "before Kokkos::finalize");
#endif
  if (!Kokkos::is_initialized())
    throw UsageError(std::string(op) +
                     ": Kokkos is not initialized (or already finalized); call "
                     "Kokkos::initialize before using dsp tensors, and finish with them before "
                     "Kokkos::finalize");
}
#endif

/// One collective at a time per communicator: dsp's threading model. Marks
/// the communicator busy for the duration of a collective; a second thread
/// that enters a collective on it meanwhile gets UsageError (its peers may
/// then wait: use one communicator per thread). Also refuses a communicator
/// whose collective deadline expired.
class ExclusiveUse {
 public:
  template <class Comm>
  ExclusiveUse(const Comm& comm, const char* op) : res_(comm.resources()) {
    acquire(res_, op);
  }
  ~ExclusiveUse() { res_.release(); }
  ExclusiveUse(const ExclusiveUse&) = delete;
  ExclusiveUse& operator=(const ExclusiveUse&) = delete;

 private:
  DSP_FUNC static void acquire(const CommResources& res, const char* op);
  const CommResources& res_;
};
#if DSP_FUNC_BODIES
DSP_FUNC void ExclusiveUse::acquire(const CommResources& res, const char* op) {
  require_kokkos(op);
  if (res.poisoned())
    throw UsageError(std::string(op) +
                     ": this communicator timed out in an earlier collective "
                     "(dsp::set_collective_deadline) and cannot be used any more");
  if (!res.try_acquire())
    throw UsageError(std::string(op) +
                     ": another thread is running a dsp collective on this communicator; "
                     "dsp runs one collective at a time per communicator (use one "
                     "communicator per thread: MpiCommunicator{comm} makes a new one)");
}
#endif

DSP_FUNC std::string failure_text(std::uint32_t op, int rank, const std::exception& e);
#if DSP_FUNC_BODIES
DSP_FUNC std::string failure_text(std::uint32_t op, int rank, const std::exception& e) {
  return std::string(op_name(op)) + " (rank " + std::to_string(rank) + "): " + e.what();
}
#endif

}  // namespace dsp::detail
