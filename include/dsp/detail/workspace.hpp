// dsp: communication buffers, cached per communicator and memory space.
#pragma once

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dsp::detail {

// What dsp::release_workspaces() calls: one entry per registry and pool.
struct Releasers {
  std::mutex mutex;
  std::vector<std::function<void()>> all;
};
inline Releasers& releasers() {
  static Releasers r;
  return r;
}

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
  std::size_t generation = 1;  // changes whenever entries are dropped

  static WorkspaceRegistry& get() {
    static WorkspaceRegistry* r = [] {
      auto* p = new WorkspaceRegistry;
      auto clear = [p] {
        std::lock_guard<std::mutex> lock(p->mutex);
        p->by_comm.clear();
        ++p->generation;
      };
      Kokkos::push_finalize_hook(clear);
      std::lock_guard<std::mutex> lock(releasers().mutex);
      releasers().all.push_back(clear);
      return p;
    }();
    return *r;
  }
};

template <class MemorySpace>
Workspace<MemorySpace>& workspace(const void* comm_id) {
  auto& r = WorkspaceRegistry<MemorySpace>::get();
  // The last workspace this thread used, valid while the registry was not cleared.
  thread_local const void* last_id = nullptr;
  thread_local std::size_t last_generation = 0;
  thread_local Workspace<MemorySpace>* last = nullptr;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (last && last_id == comm_id && last_generation == r.generation) return *last;
  last = &r.by_comm[comm_id];
  last_id = comm_id;
  last_generation = r.generation;
  return *last;
}

// Outputs of the allocating calls (`y = dynamic_switch<D>(x)`, `gather(x)`),
// recycled: the pool keeps a reference to each view it hands out, and a view
// whose only reference is the pool's (the caller dropped or overwrote it) is
// handed out again for the next request of the same extents. A steady loop
// then allocates, page-faults and zero-fills nothing. At most kKeep views per
// view type are kept; all are released at Kokkos::finalize.
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
  std::size_t idle_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t b = 0;
    for (auto& [ext, v] : views_)
      if (v.use_count() == 1) b += v.span() * sizeof(typename View::value_type);
    return b;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    views_.clear();
  }

  static OutputPool& get() {
    static OutputPool* p = [] {
      auto* q = new OutputPool;
      Kokkos::push_finalize_hook([q] { q->clear(); });
      std::lock_guard<std::mutex> lock(releasers().mutex);
      releasers().all.push_back([q] { q->clear(); });
      return q;
    }();
    return *p;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::array<std::size_t, R>, View>> views_;
};

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

/// Frees every cached communication workspace and every recycled output of
/// the allocating calls (dsp::dynamic_switch(x), dsp::gather(x)) that no
/// tensor uses any more; the next call allocates again. Local, not
/// collective. Call it between phases to return memory; not needed before
/// Kokkos::finalize, which releases them.
inline void release_workspaces() {
  auto& r = detail::releasers();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& f : r.all) f();
}

}  // namespace dsp
