// SPDX-License-Identifier: BSD-3-Clause
// dsp: the state dsp keeps for one communicator (its workspaces, its recycled
// outputs, its in-use flag), held by the communicator itself so that it lives
// exactly as long as the communicator's last copy. No Kokkos, no backend.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <typeindex>
#include <typeinfo>
#include <vector>

namespace dsp {

/// What dsp caches for one communicator. A backend holds one CommResources in
/// the state its copies share and returns it from `resources()` (see the
/// Communicator concept); copies of a CommResources share one block, so the
/// caches go when the last copy of the communicator goes (or at
/// Kokkos::finalize, or dsp::release_workspaces(), whichever comes first).
/// Its address is also the communicator's identity (`id()`).
class CommResources {
 public:
  CommResources() : b_(std::make_shared<Block>()) { registry().add(b_); }

  /// The identity of the group this block belongs to.
  const void* id() const noexcept { return b_.get(); }

  /// The cached object of type S, created (default-constructed) on first use.
  /// Thread-safe; the reference stays valid until the block is released.
  template <class S>
  S& slot() const {
    std::lock_guard<std::mutex> lock(b_->mutex);
    if (void* q = b_->recent(typeid(S))) return *static_cast<S*>(q);
    auto& p = b_->slots[std::type_index(typeid(S))];
    if (!p) p = std::make_shared<S>();
    b_->remember(typeid(S), p.get());
    return *static_cast<S*>(p.get());
  }
  /// The cached object of type S, or nullptr when none was made.
  template <class S>
  S* find() const {
    std::lock_guard<std::mutex> lock(b_->mutex);
    if (void* q = b_->recent(typeid(S))) return static_cast<S*>(q);
    auto it = b_->slots.find(std::type_index(typeid(S)));
    if (it == b_->slots.end()) return nullptr;
    b_->remember(typeid(S), it->second.get());
    return static_cast<S*>(it->second.get());
  }

  /// Marks the communicator busy; false when it already was (another thread
  /// is inside a dsp collective on it).
  bool try_acquire() const noexcept { return !b_->busy.exchange(true, std::memory_order_acquire); }
  void release() const noexcept { b_->busy.store(false, std::memory_order_release); }

  /// AgreementMode::first_call: whether the call with key `k` (a digest of
  /// everything the agreement compares) was agreed on this communicator
  /// before; remember_agreed records one. Kept apart from the cached objects,
  /// so release_workspaces() on some ranks only cannot make the ranks' sets
  /// differ; at 4096 keys the set starts over (on every rank alike, as every
  /// rank records the same calls).
  bool agreed(const std::array<std::uint64_t, 3>& k) const {
    std::lock_guard<std::mutex> lock(b_->mutex);
    return b_->agreed.count(k) != 0;
  }
  void remember_agreed(const std::array<std::uint64_t, 3>& k) const {
    std::lock_guard<std::mutex> lock(b_->mutex);
    if (b_->agreed.size() >= 4096) b_->agreed.clear();
    b_->agreed.insert(k);
  }

  /// A communicator whose collective deadline expired cannot be used again.
  void poison() const noexcept { b_->poisoned.store(true); }
  bool poisoned() const noexcept { return b_->poisoned.load(); }

  /// Drops every cached object of every live communicator (workspaces and
  /// recycled outputs): dsp::release_workspaces() and Kokkos::finalize call it.
  static void release_all() { registry().clear_all(); }

 private:
  struct Block {
    std::mutex mutex;
    std::map<std::type_index, std::shared_ptr<void>> slots;
    // Every collective looks up its workspace: a few entries compared by the
    // address of their std::type_info sit in front of the map, whose
    // type_index ordering compares type names as strings.
    struct Recent {
      const std::type_info* type = nullptr;
      void* object = nullptr;
    };
    std::array<Recent, 8> recent_{};
    std::size_t next_ = 0;
    void* recent(const std::type_info& t) const {
      for (const Recent& r : recent_)
        if (r.type == &t) return r.object;
      return nullptr;
    }
    void remember(const std::type_info& t, void* object) { recent_[next_++ % recent_.size()] = Recent{&t, object}; }
    std::atomic<bool> busy{false};
    std::set<std::array<std::uint64_t, 3>> agreed;
    std::atomic<bool> poisoned{false};
  };
  // Weak references to every live block, so release_all reaches them without
  // keeping any alive.
  struct Registry {
    std::mutex mutex;
    std::vector<std::weak_ptr<Block>> blocks;
    void add(const std::shared_ptr<Block>& b) {
      std::lock_guard<std::mutex> lock(mutex);
      blocks.erase(std::remove_if(blocks.begin(), blocks.end(), [](auto& w) { return w.expired(); }), blocks.end());
      blocks.push_back(b);
    }
    void clear_all() {
      std::vector<std::shared_ptr<Block>> live;
      {
        std::lock_guard<std::mutex> lock(mutex);
        for (auto& w : blocks)
          if (auto b = w.lock()) live.push_back(std::move(b));
      }
      for (auto& b : live) {
        std::map<std::type_index, std::shared_ptr<void>> drop;
        {
          std::lock_guard<std::mutex> lock(b->mutex);
          drop.swap(b->slots);
          b->recent_ = {};
        }
      }  // objects are destroyed outside the locks
    }
  };
  static Registry& registry() {
    static Registry* r = new Registry;  // never destroyed: blocks may outlive static destruction
    return *r;
  }

  std::shared_ptr<Block> b_;
};

}  // namespace dsp
