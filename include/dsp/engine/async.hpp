// SPDX-License-Identifier: BSD-3-Clause
// dsp: the engine of split-phase switches and gathers (start now, complete
// later, optionally computing on each block as it lands). Generic in the
// communicator and the memory space only, like engine.hpp.
//
// start: prepare (the point-to-point plan), agree (errors raise here, on every
//        rank, before anything is posted), copy the own block, post every
//        message; return.
// wait:  complete the messages, reporting each block as it lands; then, with
//        agreement checks on, one more small all-gather of every rank's status,
//        so that a rank that failed after start (a backend error, a callback
//        that threw) makes every rank raise.
// Backends without AsyncPeerExchange run the whole operation at start, and
// wait reports every block at once.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/engine/agree.hpp>
#include <dsp/engine/engine.hpp>
#include <dsp/plan/gather.hpp>
#include <dsp/plan/switch.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dsp::detail {

template <class Comm>
struct pending_type {
  struct type {};
};
template <AsyncPeerExchange Comm>
struct pending_type<Comm> {
  using type = typename Comm::Pending;
};

/// A split-phase operation in flight: what the handle holds.
template <class M, class Comm>
struct AsyncOp {
  AsyncOp(const Comm& c, const Signature& s) : comm(c), sig(s) {}
  Comm comm;
  Signature sig;
  std::shared_ptr<const SwitchPlan> switch_plan;  // switch: the pairwise plan
  PeerPlan gather_plan;                           // gather: the point-to-point plan
  std::optional<typename pending_type<Comm>::type> pending;
  bool posted = false, finished = false;
  std::string error;          // this rank's failure after the agreement, reported at wait
  std::exception_ptr thrown;  // the exception itself: this rank gets it back at wait

  const PeerPlan& peers() const { return switch_plan ? std::get<PeerPlan>(*switch_plan) : gather_plan; }

  /// Progresses the messages; true when all have landed.
  bool test() {
    if constexpr (AsyncPeerExchange<Comm>) {
      if (posted && !finished) {
        try {
          if (comm.test_runs(*pending)) finished = true;
        } catch (...) {
          fail_current();
        }
      }
    }
    return finished || !posted || !error.empty();
  }

  /// Completes the messages, calling arrived(peer) for each non-empty
  /// incoming block as it lands (the own block is reported first, by the
  /// caller). A callback that throws stops the reports; the messages still
  /// complete.
  template <class Arrived>
  void complete(Arrived&& arrived) {
    const PeerPlan& plan = peers();
    if constexpr (AsyncPeerExchange<Comm>) {
      if (posted && !finished) {
        try {
          comm.wait_runs(*pending, [&](std::size_t k) {
            if (!error.empty()) return;
            try {
              arrived(plan.recvs[k].peer);
            } catch (...) {
              fail_current();
            }
          });
        } catch (...) {
          fail_current();
          pending.reset();  // cancels what is left
        }
        finished = true;
        return;
      }
    }
    // Nothing in flight (finished already, or a blocking backend): report every block.
    for (const PeerRuns& r : plan.recvs) {
      if (!error.empty()) break;
      try {
        arrived(r.peer);
      } catch (...) {
        fail_current();
      }
    }
    finished = true;
  }

  /// The status agreement at the end: every rank raises when any failed;
  /// a rank that failed itself gets its own exception back (what the block
  /// function threw, or the backend's error), the others MismatchError.
  void settle() {
    Signature s = sig;
    if (!error.empty()) s.status = static_cast<std::uint32_t>(Status::failed_in_flight);
    const std::string mine = error;
    error.clear();
    const std::exception_ptr own = std::exchange(thrown, nullptr);
    try {
      Busy busy(comm, op_name(s.op));
      agree(comm, s, mine);
    } catch (...) {
      if (own) std::rethrow_exception(own);
      throw;
    }
  }

  /// Records the exception being handled (any type: a block function may
  /// throw anything) as this rank's failure, the first one only.
  void fail_current() {
    if (!error.empty()) return;
    thrown = std::current_exception();
    try {
      throw;
    } catch (const std::exception& e) {
      error = failure_text(sig.op, comm.rank(), e);
    } catch (...) {
      error = std::string(op_name(sig.op)) + " (rank " + std::to_string(comm.rank()) +
              "): a block function threw an exception not derived from std::exception";
    }
  }
};

/// Posts the prepared, agreed exchange of `plan` after copying the own block.
template <class M, class Comm>
void post(AsyncOp<M, Comm>& op, const PeerPlan& plan, const void* in, void* out, std::size_t eb,
          std::span<const std::size_t> global) {
  auto exec = execution_space_for<M>(op.comm);
  copy_runs(exec, out, in, eb, std::span(&plan.self, 1));
  fence_before_transfer<Comm>(exec);
  if constexpr (AsyncPeerExchange<Comm>) {
    if (op.comm.size() > 1 && product(global) > 0) {
      op.pending.emplace(op.comm.post_runs(in, plan.sends, out, plan.recvs, eb));
      op.posted = true;
      return;
    }
  }
  fence_after<Comm>(exec);
  op.finished = true;
}

/// Start of a split-phase switch Sharded<i> -> Sharded<j>: prepare, agree,
/// own block, post. Throws (on every rank) when the agreement fails. On a
/// backend without AsyncPeerExchange, the whole switch runs here.
template <class M, class Comm>
std::unique_ptr<AsyncOp<M, Comm>> start_switch(Comm comm, Signature sig, std::string err, const SwitchArgs& a) {
  auto op = std::make_unique<AsyncOp<M, Comm>>(comm, sig);
  if constexpr (!AsyncPeerExchange<Comm>) {
    op->switch_plan = std::make_shared<const SwitchPlan>(
        a.i == a.j ? PeerPlan{} : plan_peer_switch(a.global, a.i, a.j, comm.rank(), comm.size()));
    run_switch<M>(comm, sig, std::move(err), a);
    op->finished = true;
    return op;
  } else {
    Busy busy(comm, op_name(sig.op));
    op->switch_plan = prepare(comm.rank(), sig, err, [&] {
      const SwitchAlgorithm forced = a.i == a.j ? SwitchAlgorithm::alltoallv : SwitchAlgorithm::pairwise;
      return cached_switch_plan(a.global, a.i, a.j, comm.rank(), comm.size(), a.eb, capabilities_of<Comm>(), forced);
    });
    sig.algorithm = static_cast<std::uint32_t>(a.i == a.j ? Path::identity : Path::pairwise);
    op->sig = sig;
    agree(comm, sig, err);
    if (a.i == a.j) {  // the identity: a copy, nothing in flight
      execute_switch<M>(comm, *op->switch_plan, a);
      op->switch_plan = std::make_shared<const SwitchPlan>(PeerPlan{});
      op->finished = true;
      return op;
    }
    post(*op, std::get<PeerPlan>(*op->switch_plan), a.in, a.out, a.eb, a.global);
    return op;
  }
}

/// Start of a split-phase gather of Sharded<d>: as start_switch.
template <class M, class Comm>
std::unique_ptr<AsyncOp<M, Comm>> start_gather(Comm comm, Signature sig, std::string err, const GatherArgs& a) {
  auto op = std::make_unique<AsyncOp<M, Comm>>(comm, sig);
  if constexpr (!AsyncPeerExchange<Comm>) {
    op->gather_plan = plan_peer_gather(a.global, a.d, comm.rank(), comm.size());
    run_gather<M>(comm, sig, std::move(err), a);
    op->finished = true;
    return op;
  } else {
    Busy busy(comm, op_name(sig.op));
    op->gather_plan =
        prepare(comm.rank(), sig, err, [&] { return plan_peer_gather(a.global, a.d, comm.rank(), comm.size()); });
    sig.algorithm = static_cast<std::uint32_t>(Path::peer_gather);
    op->sig = sig;
    agree(comm, sig, err);
    post(*op, op->gather_plan, a.in, a.out, a.eb, a.global);
    return op;
  }
}

}  // namespace dsp::detail
