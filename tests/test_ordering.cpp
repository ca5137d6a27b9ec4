// SPDX-License-Identifier: BSD-3-Clause
// Every path orders the work queued on the tensors' execution space before
// its data leaves the rank: a communicator that checks, at each transfer,
// that the engine fenced (or stream-ordered) since the previous transfer.
// Regression: the pairwise and datatypes paths posted their sends from the
// input without that fence, so with device memory (CUDA-aware MPI) or any
// asynchronous execution space a send could read data not yet written.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/engine/steps.hpp>  // transfer_fences

using namespace dsp_test;

// A named namespace: nvcc warns about members of a class with internal linkage
// that only a concept check refers to (FenceSpy::all_gather, the exchanges),
// an error under -Werror=all-warnings (test_cuda_build).
namespace ordering {

/// Forwards to MpiCommunicator, with its capabilities, and counts transfers
/// that were not preceded by the engine's fence.
class FenceSpy {
 public:
  using memory_space = Kokkos::HostSpace;
  explicit FenceSpy(dsp::MpiCommunicator c) : c_(std::move(c)), log_(std::make_shared<Log>()) {}
  int rank() const { return c_.rank(); }
  int size() const { return c_.size(); }
  const void* id() const { return c_.id(); }
  const dsp::CommResources& resources() const { return c_.resources(); }
  std::size_t transfers() const { return log_->transfers; }
  std::size_t unordered() const { return log_->unordered; }

  void all_to_all(const void* s, void* r, std::size_t n, std::size_t e) { seen(), c_.all_to_all(s, r, n, e); }
  void all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                    std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t e, std::size_t b) {
    seen(), c_.all_to_all_v(s, sc, sd, r, rc, rd, e, b);
  }
  void all_gather(const void* s, void* r, std::size_t n, std::size_t e) { seen(), c_.all_gather(s, r, n, e); }
  void all_gather_v(const void* s, std::size_t n, void* r, std::span<const std::size_t> rc,
                    std::span<const std::size_t> rd, std::size_t e) {
    seen(), c_.all_gather_v(s, n, r, rc, rd, e);
  }
  void broadcast(void* b, std::size_t n, std::size_t e, int root) { seen(), c_.broadcast(b, n, e, root); }
  void control_all_gather(const void* s, void* r, std::size_t n) { c_.control_all_gather(s, r, n); }
  template <class L>
  void exchange_runs(const void* s, std::span<const dsp::PeerRuns> a, void* r, std::span<const dsp::PeerRuns> b,
                     std::size_t e, L&& local) {
    seen(), c_.exchange_runs(s, a, r, b, e, std::forward<L>(local));
  }
  template <class L>
  void exchange_runs_typed(const void* s, std::span<const dsp::PeerRuns> a, void* r, std::span<const dsp::PeerRuns> b,
                           std::size_t e, L&& local) {
    seen(), c_.exchange_runs_typed(s, a, r, b, e, std::forward<L>(local));
  }
  friend bool operator==(const FenceSpy& a, const FenceSpy& b) { return a.c_ == b.c_; }

 private:
  struct Log {
    std::size_t fences_at_last = 0, transfers = 0, unordered = 0;
  };
  void seen() {
    const std::size_t now = dsp::detail::transfer_fences().load();
    ++log_->transfers;
    if (now == log_->fences_at_last) ++log_->unordered;
    log_->fences_at_last = now;
  }
  dsp::MpiCommunicator c_;
  std::shared_ptr<Log> log_;
};
static_assert(dsp::Communicator<FenceSpy> && dsp::PeerExchange<FenceSpy> && dsp::TypedExchange<FenceSpy>);

struct Forced {
  dsp::SwitchAlgorithm saved = dsp::switch_algorithm();
  explicit Forced(dsp::SwitchAlgorithm a) { dsp::set_switch_algorithm(a); }
  ~Forced() { dsp::set_switch_algorithm(saved); }
};

}  // namespace ordering

using ordering::FenceSpy;
using ordering::Forced;

TEST_CASE("every switch algorithm, gather path and distribute fences before its data leaves") {
  FenceSpy c{world()};
  const std::size_t n = std::size_t(c.size());
  const std::array<std::size_t, 3> g{4 * n, 4 * n, 4096};  // long runs: every algorithm applies
  using A = dsp::SwitchAlgorithm;
  for (A a : {A::alltoall, A::alltoallv, A::pairwise, A::datatypes}) {
    Forced use(a);
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, FenceSpy> x{c, g};
    fill(x);
    auto y = dsp::dynamic_switch<1>(x);
    CHECK(count_wrong(y) == 0);
  }
  dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, FenceSpy> x{c, g};
  fill(x);
  CHECK(count_wrong(dsp::gather(x)) == 0);  // point to point at n > 1 (64 KiB runs)
  dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, FenceSpy> x0{c, g};
  fill(x0);
  CHECK(count_wrong(dsp::gather(x0)) == 0);  // one all-gather
  Kokkos::View<std::int32_t***, Kokkos::HostSpace> v("v", 3, 5, 2);
  for (std::size_t k = 0; k < v.size(); ++k) v.data()[k] = value_at<std::int32_t>(k);
  CHECK(count_wrong(dsp::distribute<dsp::Sharded<1>>(c, v, 0)) == 0);
  CHECK(count_wrong(dsp::distribute<dsp::Replicated>(c, v, 0)) == 0);
  CHECK(c.transfers() >= (n > 1 ? 8u : 2u));  // one rank: switches and gathers copy locally
  CHECK(c.unordered() == 0);
}
