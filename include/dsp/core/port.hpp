// SPDX-License-Identifier: BSD-3-Clause
// dsp: the engine's view of a communicator. The engine is written once per
// memory space against Port, an interface of virtual functions; PortOf<Comm>
// adapts any type that meets the Communicator concept to it, turning its
// optional capabilities (comm/concepts.hpp) into run-time flags. So a switch
// over MpiCommunicator, CountingCommunicator<MpiCommunicator> and
// StagedCommunicator<...> runs one engine, compiled once: the engine is not
// instantiated per backend (nor per element type, tensor rank or layout),
// and a virtual call per collective costs nothing next to the collective.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/comm/resources.hpp>
#include <dsp/comm/self.hpp>
#include <dsp/core/type_name.hpp>
#include <dsp/error.hpp>
#include <dsp/plan/tasks.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace dsp::detail {

/// A borrowed callable: a function pointer and the address of the callable,
/// valid while the callable lives (for the length of the call it is passed to).
template <class Sig>
class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef>) FunctionRef(F&& f)
  noexcept  // NOLINT: implicit
      : obj_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, A... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...);
        }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

/// What a backend offers beyond the Communicator concept, as flags the engine
/// reads at run time (each is the concept of the same name).
struct PortCaps {
  bool peer = false;            // PeerExchange
  bool typed = false;           // TypedExchange
  bool async = false;           // AsyncPeerExchange
  bool stream_ordered = false;  // StreamOrdered
  bool reductions = false;      // Reductions
  bool deadline = false;        // DeadlineControl
};

/// A posted point-to-point exchange (Port::post_runs).
struct PortPending {
  virtual ~PortPending() = default;
};

/// A communicator as the engine sees it. Every data collective of the
/// Communicator concept and every optional capability is a virtual function;
/// calling one the backend lacks (caps says which it has) is a bug in dsp and
/// raises Error.
class Port {
 public:
  virtual ~Port() = default;
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  const void* id() const noexcept { return id_; }
  const CommResources& resources() const noexcept { return *resources_; }
  const PortCaps& caps() const noexcept { return caps_; }
  /// The communicator's type, as wisdom names its backend.
  std::string_view backend() const noexcept { return backend_; }

  virtual void all_to_all(const void* s, void* r, std::size_t count, std::size_t elem_bytes) = 0;
  virtual void all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                            std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t elem_bytes,
                            std::size_t bound) = 0;
  virtual void all_gather_v(const void* s, std::size_t count, void* r, std::span<const std::size_t> rc,
                            std::span<const std::size_t> rd, std::size_t elem_bytes) = 0;
  virtual void broadcast(void* b, std::size_t count, std::size_t elem_bytes, int root) = 0;
  virtual void control_all_gather(const void* s, void* r, std::size_t bytes) = 0;
  virtual std::vector<int> control_all_gather_until(const void*, void*, std::size_t, Deadline) { missing("deadline"); }
  virtual void exchange_runs(const void*, std::span<const PeerRuns>, void*, std::span<const PeerRuns>, std::size_t,
                             FunctionRef<void()>) {
    missing("point-to-point exchange");
  }
  virtual void exchange_runs_typed(const void*, std::span<const PeerRuns>, void*, std::span<const PeerRuns>,
                                   std::size_t, FunctionRef<void()>) {
    missing("typed exchange");
  }
  virtual std::unique_ptr<PortPending> post_runs(const void*, std::span<const PeerRuns>, void*,
                                                 std::span<const PeerRuns>, std::size_t) {
    missing("split-phase exchange");
  }
  virtual bool test_runs(PortPending&) { missing("split-phase exchange"); }
  virtual void wait_runs(PortPending&, FunctionRef<void(std::size_t)>) { missing("split-phase exchange"); }
  virtual void all_reduce(const void*, void*, std::size_t, ReduceType, ReduceOp) { missing("reductions"); }
  virtual void reduce_scatter(const void*, void*, std::span<const std::size_t>, ReduceType, ReduceOp) {
    missing("reductions");
  }

 protected:
  [[noreturn]] static void missing(const char* what) {
    throw Error(std::string("dsp: internal error: the engine used a capability the backend lacks (") + what + ")");
  }
  int rank_ = 0, size_ = 1;
  const void* id_ = nullptr;
  const CommResources* resources_ = nullptr;
  PortCaps caps_;
  std::string_view backend_;
};

/// A Port whose data lives in memory space M: it also names the execution
/// space instance dsp's kernels run on (the backend's own stream where it has
/// one, else the default instance).
template <class M>
class PortOn : public Port {
 public:
  using exec_type = typename M::execution_space;
  virtual exec_type exec() const = 0;
};

/// The Port of a communicator of type Comm: holds a copy of it (copies of a
/// communicator share its state) and forwards every call.
template <class Comm, class M = typename Comm::memory_space>
class PortOf final : public PortOn<M> {
  static_assert(check_declared_capabilities<Comm>());

  template <class P>
  struct PendingOf final : PortPending {
    explicit PendingOf(P&& v) : p(std::move(v)) {}
    P p;
  };

 public:
  explicit PortOf(const Comm& c) : c_(c) {
    this->rank_ = c_.rank();
    this->size_ = c_.size();
    this->id_ = c_.id();
    this->resources_ = &c_.resources();
    this->backend_ = backend_name<Comm>();
    this->caps_ = PortCaps{PeerExchange<Comm>,  TypedExchange<Comm>, AsyncPeerExchange<Comm>,
                           StreamOrdered<Comm>, Reductions<Comm>,    DeadlineControl<Comm>};
  }
  Comm& comm() noexcept { return c_; }

  typename M::execution_space exec() const override { return execution_space_for<M>(c_); }
  void all_to_all(const void* s, void* r, std::size_t count, std::size_t elem_bytes) override {
    c_.all_to_all(s, r, count, elem_bytes);
  }
  void all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                    std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t elem_bytes,
                    std::size_t bound) override {
    c_.all_to_all_v(s, sc, sd, r, rc, rd, elem_bytes, bound);
  }
  void all_gather_v(const void* s, std::size_t count, void* r, std::span<const std::size_t> rc,
                    std::span<const std::size_t> rd, std::size_t elem_bytes) override {
    c_.all_gather_v(s, count, r, rc, rd, elem_bytes);
  }
  void broadcast(void* b, std::size_t count, std::size_t elem_bytes, int root) override {
    c_.broadcast(b, count, elem_bytes, root);
  }
  void control_all_gather(const void* s, void* r, std::size_t bytes) override { c_.control_all_gather(s, r, bytes); }
  std::vector<int> control_all_gather_until(const void* s, void* r, std::size_t bytes, Deadline t) override {
    if constexpr (DeadlineControl<Comm>) return c_.control_all_gather_until(s, r, bytes, t);
    else this->missing("deadline");
  }
  void exchange_runs(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                     std::size_t elem_bytes, FunctionRef<void()> local) override {
    if constexpr (PeerExchange<Comm>) c_.exchange_runs(s, sends, r, recvs, elem_bytes, local);
    else this->missing("point-to-point exchange");
  }
  void exchange_runs_typed(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                           std::size_t elem_bytes, FunctionRef<void()> local) override {
    if constexpr (TypedExchange<Comm>) c_.exchange_runs_typed(s, sends, r, recvs, elem_bytes, local);
    else this->missing("typed exchange");
  }
  std::unique_ptr<PortPending> post_runs(const void* s, std::span<const PeerRuns> sends, void* r,
                                         std::span<const PeerRuns> recvs, std::size_t elem_bytes) override {
    if constexpr (AsyncPeerExchange<Comm>) {
      using P = typename Comm::Pending;
      return std::make_unique<PendingOf<P>>(c_.post_runs(s, sends, r, recvs, elem_bytes));
    } else {
      this->missing("split-phase exchange");
    }
  }
  bool test_runs(PortPending& p) override {
    if constexpr (AsyncPeerExchange<Comm>) return c_.test_runs(static_cast<PendingOf<typename Comm::Pending>&>(p).p);
    else this->missing("split-phase exchange");
  }
  void wait_runs(PortPending& p, FunctionRef<void(std::size_t)> arrived) override {
    if constexpr (AsyncPeerExchange<Comm>) c_.wait_runs(static_cast<PendingOf<typename Comm::Pending>&>(p).p, arrived);
    else this->missing("split-phase exchange");
  }
  void all_reduce(const void* s, void* r, std::size_t count, ReduceType t, ReduceOp o) override {
    if constexpr (Reductions<Comm>) c_.all_reduce(s, r, count, t, o);
    else this->missing("reductions");
  }
  void reduce_scatter(const void* s, void* r, std::span<const std::size_t> counts, ReduceType t, ReduceOp o) override {
    if constexpr (Reductions<Comm>) c_.reduce_scatter(s, r, counts, t, o);
    else this->missing("reductions");
  }

 private:
  Comm c_;
};

}  // namespace dsp::detail

#ifdef DSP_COMPILED
namespace dsp::detail {
// The one-rank communicator's Port is compiled once, in the dsp::compiled
// library (src/compiled.cpp); the MPI communicator's is declared in mpi.hpp.
extern template class PortOf<BasicSelfCommunicator<Kokkos::HostSpace>, Kokkos::HostSpace>;
}  // namespace dsp::detail
#endif
