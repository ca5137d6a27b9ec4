// dsp: the exception hierarchy and the checks that feed it.
#pragma once

#include <stdexcept>
#include <string>

namespace dsp {

/// Base of every exception dsp throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller's argument is invalid on this rank (a view of the wrong shape, a
/// non-contiguous view, an output of the wrong shape or communicator, ...).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// The ranks of a communicator disagree (global extents, element type, layouts),
/// or another rank failed locally before a collective. Raised on every rank.
class MismatchError : public Error {
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

[[noreturn]] inline void throw_backend(const char* backend, const char* call, const char* file,
                                       int line, int code, const std::string& text) {
  throw BackendError(std::string("dsp: ") + backend + " call `" + call + "` failed at " + file +
                         ":" + std::to_string(line) + ": " + text,
                     code);
}

}  // namespace detail
}  // namespace dsp
