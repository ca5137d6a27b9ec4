// dsp: communication buffers, cached per communicator and memory space.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

namespace dsp::detail {

// Grow-only send and receive buffers. A steady loop of equal-shaped calls
// allocates once and then never again.
template <class MemorySpace>
class Workspace {
 public:
  unsigned char* send(std::size_t bytes) { return grow(send_, bytes, "dsp::workspace::send"); }
  unsigned char* recv(std::size_t bytes) { return grow(recv_, bytes, "dsp::workspace::recv"); }
  std::size_t bytes() const { return send_.extent(0) + recv_.extent(0); }

 private:
  using Buffer = Kokkos::View<unsigned char*, MemorySpace>;
  static unsigned char* grow(Buffer& b, std::size_t bytes, const char* label) {
    if (b.extent(0) < bytes) {
      b = Buffer();  // release first: peak memory is the new size, not old + new
      b = Buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), bytes);
    }
    return b.data();
  }
  Buffer send_, recv_;
};

// The registry is released by a Kokkos finalize hook, so no buffer outlives
// Kokkos::finalize.
template <class MemorySpace>
struct WorkspaceRegistry {
  std::mutex mutex;
  std::map<const void*, Workspace<MemorySpace>> by_comm;

  static WorkspaceRegistry& get() {
    static WorkspaceRegistry* r = [] {
      auto* p = new WorkspaceRegistry;
      Kokkos::push_finalize_hook([p] {
        std::lock_guard<std::mutex> lock(p->mutex);
        p->by_comm.clear();
      });
      return p;
    }();
    return *r;
  }
};

template <class MemorySpace>
Workspace<MemorySpace>& workspace(const void* comm_id) {
  auto& r = WorkspaceRegistry<MemorySpace>::get();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.by_comm[comm_id];
}

}  // namespace dsp::detail

namespace dsp {

/// Bytes of communication workspace dsp holds for `comm` in `MemorySpace`
/// (by default the communicator's). Local, not collective.
template <class MemorySpace = void, class Comm>
std::size_t workspace_bytes(const Comm& comm) {
  using M = std::conditional_t<std::is_void_v<MemorySpace>, typename Comm::memory_space, MemorySpace>;
  auto& r = detail::WorkspaceRegistry<M>::get();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_comm.find(comm.id());
  return it == r.by_comm.end() ? 0 : it->second.bytes();
}

}  // namespace dsp
