// SPDX-License-Identifier: BSD-3-Clause
// dsp: the NCCL communicator (device memory, stream ordered).
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/comm/resources.hpp>
#include <dsp/error.hpp>

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

/// Calls a CUDA runtime function; throws dsp::BackendError with CUDA's error
/// name and string and file:line on failure.
#define DSP_CHECK_CUDA(call)                                                                      \
  do {                                                                                            \
    const cudaError_t dsp_cuda_rc_ = (call);                                                      \
    if (dsp_cuda_rc_ != cudaSuccess)                                                              \
      ::dsp::detail::throw_backend(                                                               \
          "CUDA", #call, __FILE__, __LINE__, int(dsp_cuda_rc_),                                   \
          std::string(cudaGetErrorName(dsp_cuda_rc_)) + ": " + cudaGetErrorString(dsp_cuda_rc_)); \
  } while (0)

/// Calls an NCCL function on communicator `comm`; throws dsp::BackendError with
/// ncclGetErrorString, ncclGetLastError and file:line on failure.
#define DSP_CHECK_NCCL(comm, call)                                              \
  do {                                                                          \
    const ncclResult_t dsp_nccl_rc_ = (call);                                   \
    if (dsp_nccl_rc_ != ncclSuccess && dsp_nccl_rc_ != ncclInProgress)          \
      ::dsp::detail::throw_nccl(comm, dsp_nccl_rc_, #call, __FILE__, __LINE__); \
  } while (0)

namespace dsp {
namespace detail {

[[noreturn]] inline void throw_nccl(ncclComm_t comm, ncclResult_t rc, const char* call, const char* file, int line) {
  std::string text = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += std::string(" (") + last + ")";
  throw_backend("NCCL", call, file, line, int(rc), text);
}

/// NCCL version of the library loaded at run time, as NCCL_VERSION_CODE.
inline int nccl_runtime_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
}

inline constexpr int kNcclAlltoAllVersion = 22800;  // ncclAlltoAll appeared in NCCL 2.28

struct NcclState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int rank = 0, size = 1;
  bool has_alltoall = false;
  std::mutex scratch_mutex;
  void* scratch = nullptr;  // device buffer of the control channel
  std::size_t scratch_bytes = 0;
  CommResources resources;
  bool owns_comm = false;  // a split's result: dsp destroys it with the last copy

  ~NcclState() {
    // No throw from a destructor; an error here has nowhere to go.
    if (scratch) cudaFree(scratch);
    if (owns_comm && comm) ncclCommDestroy(comm);
  }
};

}  // namespace detail

/// Communicator over an existing NCCL communicator and CUDA stream, for data
/// in `MemorySpace` (device memory). Neither the communicator nor the stream
/// is owned: both must outlive every copy of this object. Collectives are
/// enqueued on the stream and return without waiting; kernels that pack and
/// unpack run on the same stream, so nothing synchronizes the host between
/// pack, transfer and unpack. The agreement check (dsp::agreement_checks())
/// is the exception: it copies a few bytes back to the host and waits.
///
/// Equal counts use ncclAlltoAll when the loaded NCCL is 2.28 or newer, and
/// grouped ncclSend/ncclRecv otherwise; per-peer counts always use grouped
/// ncclSend/ncclRecv with zero-size peers skipped. Counts are size_t: no int
/// limit applies.
template <class MemorySpace>
class BasicNcclCommunicator {
 public:
  using memory_space = MemorySpace;
  /// Collectives are ordered on the stream: the engine need not fence between steps.
  static constexpr bool stream_ordered = true;
  /// What this backend offers beyond the Communicator concept (checked against the concepts); its own
  /// execution space (the stream's Kokkos::Cuda instance) with a CUDA Kokkos.
  static constexpr unsigned capabilities = kStreamOrdered | kSplittable | kReductions
#if defined(KOKKOS_ENABLE_CUDA)
                                           | kOwnExecutionSpace
#endif
      ;

  BasicNcclCommunicator(ncclComm_t comm, cudaStream_t stream) : state_(std::make_shared<detail::NcclState>()) {
    if (comm == nullptr) throw InvalidArgument("dsp::NcclCommunicator: null ncclComm_t");
    state_->comm = comm;
    state_->stream = stream;
    DSP_CHECK_NCCL(comm, ncclCommUserRank(comm, &state_->rank));
    DSP_CHECK_NCCL(comm, ncclCommCount(comm, &state_->size));
#if NCCL_VERSION_CODE >= 22800
    state_->has_alltoall = detail::nccl_runtime_version() >= detail::kNcclAlltoAllVersion;
#endif
  }

#if defined(KOKKOS_ENABLE_CUDA)
  /// Kernels run on a Kokkos::Cuda instance bound to the communicator's
  /// stream: one per communicator, made on first use and shared by its
  /// copies; released with the last copy, at Kokkos::finalize, or by
  /// dsp::release_workspaces(). Not one per call: a Kokkos::Cuda made from a
  /// stream allocates device scratch memory, and destroying it frees that
  /// memory (cudaFree), which waits for the whole device.
  Kokkos::Cuda execution_space() const {
    detail::release_resources_at_kokkos_finalize();
    auto& slot = state_->resources.template slot<ExecSlot>();
    std::call_once(slot.once, [&] { slot.exec.emplace(state_->stream); });
    return *slot.exec;
  }
#endif

  /// Collective over this communicator: ncclCommSplit into one communicator
  /// per `color`, ranks ordered by `key`, on the same stream. The result owns
  /// its ncclComm_t (destroyed with its last copy).
  BasicNcclCommunicator split(int color, int key) const {
    ncclComm_t out = nullptr;
    DSP_CHECK_NCCL(state_->comm, ncclCommSplit(state_->comm, color, key, &out, nullptr));
    BasicNcclCommunicator c(out, state_->stream);
    c.state_->owns_comm = true;
    return c;
  }

  int rank() const noexcept { return state_->rank; }
  int size() const noexcept { return state_->size; }
  const void* id() const noexcept { return state_->resources.id(); }
  const CommResources& resources() const noexcept { return state_->resources; }
  ncclComm_t native() const noexcept { return state_->comm; }
  cudaStream_t stream() const noexcept { return state_->stream; }
  /// Whether equal-count exchanges use ncclAlltoAll (else grouped send/recv).
  bool uses_nccl_alltoall() const noexcept { return state_->has_alltoall; }

  void all_to_all(const void* s, void* r, std::size_t count, std::size_t elem) {
    const std::size_t bytes = count * elem;
#if NCCL_VERSION_CODE >= 22800
    if (state_->has_alltoall) {
      DSP_CHECK_NCCL(state_->comm, ncclAlltoAll(s, r, bytes, ncclUint8, state_->comm, state_->stream));
      return;
    }
#endif
    group([&] {
      for (int q = 0; q < size(); ++q) {
        send(static_cast<const char*>(s) + q * bytes, bytes, q);
        recv(static_cast<char*>(r) + q * bytes, bytes, q);
      }
    });
  }

  void all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                    std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t elem,
                    std::size_t /*bound: NCCL counts are size_t*/) {
    group([&] {
      for (int q = 0; q < size(); ++q) {
        send(static_cast<const char*>(s) + sd[q] * elem, sc[q] * elem, q);
        recv(static_cast<char*>(r) + rd[q] * elem, rc[q] * elem, q);
      }
    });
  }

  void all_gather(const void* s, void* r, std::size_t count, std::size_t elem) {
    DSP_CHECK_NCCL(state_->comm, ncclAllGather(s, r, count * elem, ncclUint8, state_->comm, state_->stream));
  }

  void all_gather_v(const void* s, std::size_t count, void* r, std::span<const std::size_t> rc,
                    std::span<const std::size_t> rd, std::size_t elem) {
    // rc and rd are the same on every rank: equal blocks in rank order are one ncclAllGather everywhere.
    bool regular = true;
    for (std::size_t k = 0; k < rc.size() && regular; ++k) regular = rc[k] == rc[0] && rd[k] == k * rc[0];
    if (regular) return all_gather(s, r, count, elem);
    group([&] {
      for (int q = 0; q < size(); ++q) {
        send(s, count * elem, q);
        recv(static_cast<char*>(r) + rd[q] * elem, rc[q] * elem, q);
      }
    });
  }

  /// ncclAllReduce. Complex sums reduce the real and imaginary parts as
  /// floats (Max and Min of complex values are refused before reaching here).
  void all_reduce(const void* s, void* r, std::size_t count, ReduceType t, ReduceOp o) {
    const auto [dt, k] = nccl_type(t);
    DSP_CHECK_NCCL(state_->comm, ncclAllReduce(s, r, count * k, dt, nccl_op(o), state_->comm, state_->stream));
  }
  /// ncclReduceScatter for equal counts; otherwise one grouped ncclReduce per
  /// rank (each rank the root of its own block).
  void reduce_scatter(const void* s, void* r, std::span<const std::size_t> counts, ReduceType t, ReduceOp o) {
    const auto [dt, k] = nccl_type(t);
    bool equal = true;
    for (std::size_t c : counts) equal = equal && c == counts[0];
    if (equal) {
      DSP_CHECK_NCCL(state_->comm,
                     ncclReduceScatter(s, r, counts[0] * k, dt, nccl_op(o), state_->comm, state_->stream));
      return;
    }
    const std::size_t eb = reduce_bytes(t);
    group([&] {
      std::size_t at = 0;
      for (int q = 0; q < size(); ++q) {
        const std::size_t c = counts[std::size_t(q)];
        if (c)
          DSP_CHECK_NCCL(state_->comm, ncclReduce(static_cast<const char*>(s) + at * eb, q == rank() ? r : nullptr,
                                                  c * k, dt, nccl_op(o), q, state_->comm, state_->stream));
        at += c;
      }
    });
  }

  void broadcast(void* b, std::size_t count, std::size_t elem, int root) {
    DSP_CHECK_NCCL(state_->comm, ncclBroadcast(b, b, count * elem, ncclUint8, root, state_->comm, state_->stream));
  }

  /// Host bytes in, host bytes out: staged through a device buffer; waits for the stream.
  void control_all_gather(const void* s, void* r, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(state_->scratch_mutex);
    const std::size_t need = bytes * (static_cast<std::size_t>(size()) + 1);
    if (state_->scratch_bytes < need) {
      if (state_->scratch) DSP_CHECK_CUDA(cudaFree(state_->scratch));
      state_->scratch = nullptr;
      state_->scratch_bytes = 0;
      DSP_CHECK_CUDA(cudaMalloc(&state_->scratch, need));
      state_->scratch_bytes = need;
    }
    char* dev = static_cast<char*>(state_->scratch);
    DSP_CHECK_CUDA(cudaMemcpyAsync(dev, s, bytes, cudaMemcpyHostToDevice, state_->stream));
    DSP_CHECK_NCCL(state_->comm, ncclAllGather(dev, dev + bytes, bytes, ncclUint8, state_->comm, state_->stream));
    DSP_CHECK_CUDA(cudaMemcpyAsync(r, dev + bytes, bytes * size(), cudaMemcpyDeviceToHost, state_->stream));
    DSP_CHECK_CUDA(cudaStreamSynchronize(state_->stream));
    check_async_error();
  }

  /// Throws if NCCL reported an asynchronous error on this communicator
  /// (ncclCommGetAsyncError), e.g. a peer that failed during a transfer.
  void check_async_error() const {
    ncclResult_t async = ncclSuccess;
    DSP_CHECK_NCCL(state_->comm, ncclCommGetAsyncError(state_->comm, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      detail::throw_nccl(state_->comm, async, "ncclCommGetAsyncError", __FILE__, __LINE__);
  }

  friend bool operator==(const BasicNcclCommunicator& a, const BasicNcclCommunicator& b) {
    return a.state_->comm == b.state_->comm;
  }

 private:
#if defined(KOKKOS_ENABLE_CUDA)
  struct ExecSlot {  // in the communicator's CommResources (execution_space())
    std::once_flag once;
    std::optional<Kokkos::Cuda> exec;
  };
#endif
  static std::pair<ncclDataType_t, std::size_t> nccl_type(ReduceType t) {
    switch (t) {
      case ReduceType::f32: return {ncclFloat32, 1};
      case ReduceType::f64: return {ncclFloat64, 1};
      case ReduceType::i32: return {ncclInt32, 1};
      case ReduceType::i64: return {ncclInt64, 1};
      case ReduceType::u32: return {ncclUint32, 1};
      case ReduceType::u64: return {ncclUint64, 1};
      case ReduceType::c64: return {ncclFloat32, 2};
      case ReduceType::c128: return {ncclFloat64, 2};
    }
    return {ncclUint8, 1};
  }
  static ncclRedOp_t nccl_op(ReduceOp o) {
    switch (o) {
      case ReduceOp::sum: return ncclSum;
      case ReduceOp::max: return ncclMax;
      case ReduceOp::min: return ncclMin;
    }
    return ncclSum;
  }
  template <class F>
  void group(F&& body) {
    DSP_CHECK_NCCL(state_->comm, ncclGroupStart());
    try {
      body();
    } catch (...) {
      ncclGroupEnd();  // close the group before reporting; its own result would only repeat the error
      throw;
    }
    DSP_CHECK_NCCL(state_->comm, ncclGroupEnd());
  }
  void send(const void* p, std::size_t bytes, int peer) {
    if (bytes) DSP_CHECK_NCCL(state_->comm, ncclSend(p, bytes, ncclUint8, peer, state_->comm, state_->stream));
  }
  void recv(void* p, std::size_t bytes, int peer) {
    if (bytes) DSP_CHECK_NCCL(state_->comm, ncclRecv(p, bytes, ncclUint8, peer, state_->comm, state_->stream));
  }

  std::shared_ptr<detail::NcclState> state_;
};

#if defined(KOKKOS_ENABLE_CUDA)
/// The NCCL communicator for Kokkos::CudaSpace tensors.
using NcclCommunicator = BasicNcclCommunicator<Kokkos::CudaSpace>;
static_assert(Communicator<NcclCommunicator>);
#endif

}  // namespace dsp
