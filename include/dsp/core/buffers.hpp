// SPDX-License-Identifier: BSD-3-Clause
// dsp: communication buffers and recycled outputs, kept in the
// communicator's own CommResources (one set per memory space), so they live
// as long as the communicator and no longer than Kokkos.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/comm/resources.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dsp::detail {

inline void watch_kokkos_finalize() { release_resources_at_kokkos_finalize(); }

/// Grow-only send and receive buffers in MemorySpace. A collective reserves
/// what it needs while it prepares (where a failure can still be reported to
/// every rank), and takes the pointers afterwards without allocating.
template <class MemorySpace>
class Workspace {
 public:
  /// May throw (allocation); grows each buffer to at least the bytes given.
  void reserve(std::size_t send_bytes, std::size_t recv_bytes) {
    grow(send_, send_bytes, "dsp::workspace::send");
    grow(recv_, recv_bytes, "dsp::workspace::recv");
  }
  unsigned char* send() const noexcept { return send_.data(); }
  unsigned char* recv() const noexcept { return recv_.data(); }
  std::size_t bytes() const noexcept { return send_.extent(0) + recv_.extent(0); }

 private:
  using Buffer = Kokkos::View<unsigned char*, MemorySpace>;
  static void grow(Buffer& b, std::size_t bytes, const char* label) {
    if (b.extent(0) >= bytes) return;
    b = Buffer();  // release first: peak memory is the new size, not old + new
    b = Buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), bytes);
  }
  Buffer send_, recv_;
};

template <class MemorySpace, class Comm>
Workspace<MemorySpace>& workspace(const Comm& comm) {
  watch_kokkos_finalize();
  return comm.resources().template slot<Workspace<MemorySpace>>();
}

/// The workspace's send and receive buffers on comm, as the prepare step
/// reserved them (null where nothing was reserved: a plan that reserved
/// nothing reads neither).
struct WorkspaceBuffers {
  unsigned char *send = nullptr, *recv = nullptr;
};
template <class MemorySpace, class Comm>
WorkspaceBuffers workspace_buffers(const Comm& comm) {
  const Workspace<MemorySpace>* ws = comm.resources().template find<Workspace<MemorySpace>>();
  return ws ? WorkspaceBuffers{ws->send(), ws->recv()} : WorkspaceBuffers{};
}

/// Outputs of the allocating calls (`y = dynamic_switch<D>(x)`, `gather(x)`),
/// recycled: the pool keeps a reference to each view it hands out, and a view
/// whose only reference is the pool's (the caller dropped or overwrote it) is
/// handed out again for the next request of the same extents. A steady loop
/// then allocates, page-faults and zero-fills nothing. At most kKeep views
/// per view type and communicator are kept.
template <class View>
class OutputPool {
 public:
  static constexpr std::size_t kKeep = 4;
  static constexpr std::size_t R = View::rank;

  template <class Make>
  View get(const std::array<std::size_t, R>& e, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [ext, v] : views_)
        if (ext == e && v.use_count() == 1) return v;
    }
    View v = make();  // may throw; nothing held yet
    std::lock_guard<std::mutex> lock(mutex_);
    if (views_.size() >= kKeep) {  // drop an idle view, else keep the new one untracked
      for (auto it = views_.begin(); it != views_.end(); ++it)
        if (it->second.use_count() == 1) {
          views_.erase(it);
          break;
        }
    }
    if (views_.size() < kKeep) views_.emplace_back(e, v);
    return v;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::array<std::size_t, R>, View>> views_;
};

template <class View, class Comm>
OutputPool<View>& output_pool(const Comm& comm) {
  watch_kokkos_finalize();
  return comm.resources().template slot<OutputPool<View>>();
}

}  // namespace dsp::detail
