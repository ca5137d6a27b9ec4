// SPDX-License-Identifier: BSD-3-Clause
// dsp: the exception hierarchy and the helper every backend check macro feeds.
#pragma once

#include <dsp/config.hpp>

#include <stdexcept>
#include <string>

namespace dsp {

/// Base of every exception dsp throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller's argument is invalid on this rank (a view of the wrong shape, a
/// non-contiguous view, an output of the wrong shape or communicator, a bad
/// setting, ...). Raised on the rank whose argument is bad; the other ranks of
/// the collective raise MismatchError.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// The ranks of a communicator disagree (operation, call site, global extents,
/// element type, layouts, ...), or another rank failed locally before a
/// collective. Raised on every rank that did not fail itself.
class MismatchError : public Error {
 public:
  using Error::Error;
};

/// This rank could not get a resource it needed (memory, most often). The
/// other ranks of the collective raise MismatchError naming this rank.
class ResourceError : public Error {
 public:
  using Error::Error;
};

/// dsp was used where it cannot work: before Kokkos::initialize or after
/// Kokkos::finalize or MPI_Finalize, from two threads at once on one
/// communicator, or on a communicator whose collective deadline expired.
class UsageError : public Error {
 public:
  using Error::Error;
};

/// Some ranks did not reach a collective within the deadline set with
/// dsp::set_collective_deadline (or DSP_DEADLINE_SECONDS). The message names
/// the operation and the ranks that did not arrive. The communicator cannot
/// be used afterwards.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// A communication backend (MPI, NCCL, CUDA) reported a failure; the message
/// carries the backend's own error text and the call site.
class BackendError : public Error {
 public:
  BackendError(const std::string& what, int code) : Error(what), code_(code) {}
  /// The backend's error code (MPI error class, ncclResult_t, cudaError_t).
  int code() const noexcept { return code_; }

 private:
  int code_;
};

namespace detail {

[[noreturn]] DSP_FUNC void throw_backend(const char* backend, const char* call, const char* file, int line, int code,
                                         const std::string& text);
#if DSP_FUNC_BODIES
[[noreturn]] DSP_FUNC void throw_backend(const char* backend, const char* call, const char* file, int line, int code,
                                         const std::string& text) {
  throw BackendError(std::string("dsp: ") + backend + " call `" + call + "` failed at " + file + ":" +
                         std::to_string(line) + ": " + text,
                     code);
}
#endif

}  // namespace detail
}  // namespace dsp
