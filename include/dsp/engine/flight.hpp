// SPDX-License-Identifier: BSD-3-Clause
// dsp: a split-phase operation (engine/run.hpp's, in two halves).
// start_operation prepares, agrees and runs every step but the last, then
// copies the last step's own blocks, packs its chunks into buffers of its own
// (a FlightPool per communicator keeps them, since other collectives may run
// before the wait) and posts its messages; Flight::complete waits for them,
// unpacking and reporting each block as it lands; Flight::settle agrees once
// more on the statuses, so that a failure in flight reaches every rank.
#pragma once

#include <dsp/core/agree.hpp>
#include <dsp/core/buffers.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/engine/execute.hpp>
#include <dsp/engine/prepare.hpp>
#include <dsp/engine/run.hpp>

#include <array>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dsp::detail {

/// The buffers of one split-phase operation in flight: the blocks between
/// steps, and the packed chunks of its last step. Other collectives may run
/// on the same communicators before it completes, so it cannot use their
/// workspaces. Recycled through the world communicator's FlightPool.
template <class M>
struct FlightBuffers {
  Scratch<M> steps;
  Scratch<M> chunks;  // [0] send, [1] receive
};
template <class M>
class FlightPool {
 public:
  std::shared_ptr<FlightBuffers<M>> take() {
    std::lock_guard<std::mutex> lock(m_);
    for (auto& b : idle_)
      if (b.use_count() == 1) return b;
    auto b = std::make_shared<FlightBuffers<M>>();
    if (idle_.size() < 4) idle_.push_back(b);
    return b;
  }

 private:
  std::mutex m_;
  std::vector<std::shared_ptr<FlightBuffers<M>>> idle_;
};

/// What a Flight holds: what the messages need (the ports, through `keep`;
/// the plan; private buffers), and this rank's failure.
template <class M>
struct FlightState {
  OpGroup<M> g;
  std::shared_ptr<void> keep;
  Signature sig;
  PreparedOp op;
  std::vector<PackedItem> items;
  std::vector<std::size_t> global;
  std::array<long, kMaxAxes> from{};
  CutSizes sizes;  // the tensors' Blocks sizes (they live as long as the tensors)
  Wire wire = Wire::exact;
  std::array<PackedItem, kMaxBatch> last_items{};  // the last step's in/out pointers
  std::shared_ptr<FlightBuffers<M>> buffers;
  std::unique_ptr<PortPending> pending;
  bool landed = false;    // test() saw every message complete (complete() still unpacks and reports)
  bool finished = false;  // nothing left: complete() ran, or the operation ran at start
  std::string error;
  std::exception_ptr thrown;

  /// Records the exception being handled (any type) as this rank's failure,
  /// the first one only.
  void fail_current() {
    if (!error.empty()) return;
    thrown = std::current_exception();
    try {
      throw;
    } catch (const std::exception& e) {
      error = failure_text(sig.op, g.world->rank(), e);
    } catch (...) {
      error = std::string(op_name(sig.op)) + " (rank " + std::to_string(g.world->rank()) +
              "): a block function threw an exception not derived from std::exception";
    }
  }

  const PreparedStep& last() const { return op.step(op.size - 1); }
  std::size_t last_axis() const { return op.size ? std::size_t(last().step.axis) : 0; }
  PortOn<M>& last_port() const { return *g.axis[last_axis()]; }
  /// Whether the output arrives block by block: the last step is a switch or
  /// a gather (else the whole output is this rank's one block).
  bool blockwise() const {
    return op.size && (last().step.kind == StepKind::switch_dims || last().step.kind == StepKind::gather);
  }
  int axis_rank() const { return blockwise() ? g.coords[last_axis()] : 0; }
  int axis_size() const { return blockwise() ? g.shape[last_axis()] : 1; }
  std::size_t block_dim() const { return blockwise() ? std::size_t(last().step.from) : 0; }
  std::array<std::size_t, kMaxRank> out_box() const {
    if (op.size) return last().out;
    return nested_counts(global, std::span<const long>(from.data(), g.axes),
                         std::span<const int>(g.shape.data(), g.axes), std::span<const int>(g.coords.data(), g.axes),
                         sizes);
  }
  /// The world rank of the rank at coordinate q of the last step's axis.
  int world_rank(int q) const {
    if (!blockwise()) return g.world->rank();
    int r = 0;
    for (std::size_t x = 0; x < g.axes; ++x) r = r * g.shape[x] + (x == last_axis() ? q : g.coords[x]);
    return r;
  }
  /// The range along block_dim() of the block from axis rank q.
  std::pair<std::size_t, std::size_t> range_of(int q) const {
    if (!blockwise()) return {0, out_box()[0]};
    const Partition p{last().group[block_dim()], std::size_t(axis_size())};
    return {p.offset(std::size_t(q)), p.count(std::size_t(q))};
  }
  std::size_t block_elems(std::size_t count) const {
    std::array<std::size_t, kMaxRank> e = out_box();
    e[block_dim()] = count;
    return product(std::span<const std::size_t>(e.data(), global.size()));
  }
  /// The receive (of the plan's peer list) behind posted message k.
  std::size_t recv_of(std::size_t k) const {
    const PreparedStep& p = last();
    const std::vector<long>* m = p.packed          ? &p.packed->message_of
                                 : p.packed_gather ? &p.packed_gather->message_of
                                                   : nullptr;
    if (!m) return k;
    for (std::size_t r = 0; r < m->size(); ++r)
      if ((*m)[r] == long(k)) return r;
    return k;
  }
  /// Whether receive r of the plan's peer list had a message (empty ones have none).
  bool message_landed(std::size_t r) const {
    const PreparedStep& p = last();
    if (p.packed) return p.packed->message_of[r] >= 0;
    if (p.packed_gather) return p.packed_gather->message_of[r] >= 0;
    return true;
  }
  int axis_peer_of(std::size_t r) const {
    const PreparedStep& p = last();
    if (p.single) return std::get<PeerPlan>(*p.single).recvs[r].peer;
    if (p.packed) return p.packed->peer.recvs[r].peer;
    if (p.packed_gather) return p.packed_gather->peer.recvs[r].peer;
    return std::get<PeerPlan>(p.gather).recvs[r].peer;
  }
  /// Unpacks receive r where it landed in a buffer; true when it did.
  template <class Exec>
  bool unpack(const Exec& exec, std::size_t r) {
    const PreparedStep& p = last();
    const std::span<const PackedItem> its(last_items.data(), items.size());
    const std::span<const std::size_t> ge(p.group.data(), op.rank);
    if (p.packed)
      packed_unpack_one(exec, *p.packed, PackedArgs{its, ge, std::size_t(p.step.from), std::size_t(p.step.to), wire},
                        buffers->chunks.buf[1].data(), r);
    else if (p.packed_gather)
      packed_gather_unpack_one(exec, *p.packed_gather, PackedGatherArgs{its, ge, std::size_t(p.step.from), wire},
                               buffers->chunks.buf[1].data(), r);
    return p.packed || p.packed_gather;  // single tensors land in place
  }
};

template <class M>
Flight<M>::Flight(std::unique_ptr<FlightState<M>> s) : s_(std::move(s)) {}
template <class M>
Flight<M>::~Flight() = default;
template <class M>
bool Flight<M>::finished() const noexcept {
  return s_->finished || !s_->pending;
}

template <class M>
bool Flight<M>::test() {
  FlightState<M>& s = *s_;
  if (s.pending && !s.landed && !s.finished) {
    try {
      if (s.last_port().test_runs(*s.pending)) s.landed = true;
    } catch (...) {
      s.fail_current();
    }
  }
  return s.finished || s.landed || !s.pending || !s.error.empty();
}

template <class M>
void Flight<M>::complete(Arrived arrived, FunctionRef<void()> started) {
  FlightState<M>& s = *s_;
  ExclusiveUse use(s.last_port(), op_name(s.sig.op));
  started();
  const auto exec = s.last_port().exec();
  auto report = [&](int axis_peer, std::size_t off, std::size_t count) {
    if (!s.error.empty() || count == 0 || s.block_elems(count) == 0) return;
    try {
      arrived(s.world_rank(axis_peer), off, count);
    } catch (...) {
      s.fail_current();
    }
  };
  {
    const auto [off, count] = s.range_of(s.axis_rank());
    report(s.axis_rank(), off, count);
  }
  if (s.pending) {
    auto landed = [&](std::size_t r) {
      if (s.unpack(exec, r)) exec.fence();  // the block function may read the block on the host
      const int q = s.axis_peer_of(r);
      const auto [off, count] = s.range_of(q);
      report(q, off, count);
    };
    try {
      if (!s.landed) {
        s.last_port().wait_runs(*s.pending, [&](std::size_t k) { landed(s.recv_of(k)); });
      } else {  // test() saw every message land: unpack and report them all now
        const std::size_t n = s.last().single          ? std::get<PeerPlan>(*s.last().single).recvs.size()
                              : s.last().packed        ? s.last().packed->peer.recvs.size()
                              : s.last().packed_gather ? s.last().packed_gather->peer.recvs.size()
                                                       : std::get<PeerPlan>(s.last().gather).recvs.size();
        for (std::size_t r = 0; r < n; ++r)
          if (s.message_landed(r)) landed(r);
      }
    } catch (...) {
      s.fail_current();
    }
    s.pending.reset();  // cancels what is left after a failure
    s.finished = true;
    fence_after(s.last_port(), exec);
    return;
  }
  // Nothing in flight (it ran at start, or finished): every other block, in rank order.
  if (s.blockwise())
    for (int q = 0; q < s.axis_size(); ++q)
      if (q != s.axis_rank()) {
        const auto [off, count] = s.range_of(q);
        report(q, off, count);
      }
  s.finished = true;
}

template <class M>
void Flight<M>::settle() {
  FlightState<M>& s = *s_;
  Signature sig = s.sig;
  if (!s.error.empty()) sig.status = static_cast<std::uint32_t>(Status::failed_in_flight);
  const std::string mine = std::exchange(s.error, std::string());
  const std::exception_ptr own = std::exchange(s.thrown, nullptr);
  try {
    ExclusiveUse use(*s.g.world, op_name(sig.op));
    agree(*s.g.world, sig, mine);
  } catch (...) {
    if (own) std::rethrow_exception(own);
    throw;
  }
}

/// The private buffers of a flight: the blocks between steps, and the last
/// step's packed chunks when it is posted. Records an allocation failure.
template <class M>
void reserve_flight(FlightState<M>& f, Signature& sig, std::string& err) {
  const PreparedOp& op = f.op;
  try {
    maybe_inject_fault();
    if (op.size <= 1 && !op.posted_last) return;
    f.buffers = f.g.world->resources().template slot<FlightPool<M>>().take();
    watch_kokkos_finalize();
    f.buffers->steps.reserve(0, op.scratch_bytes[0]);
    f.buffers->steps.reserve(1, op.scratch_bytes[1]);
    if (!op.posted_last) return;
    const PreparedStep& p = op.step(op.size - 1);
    f.buffers->chunks.reserve(0, p.packed ? p.packed->send_bytes : p.packed_gather ? p.packed_gather->send_bytes : 0);
    f.buffers->chunks.reserve(1, p.packed ? p.packed->recv_bytes : p.packed_gather ? p.packed_gather->recv_bytes : 0);
  } catch (const std::exception& e) {
    sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
    err = failure_text(sig.op, f.g.world->rank(), e);
  }
}

/// Posts the last step of a flight: its own blocks first, then every message.
template <class M>
void post_last_step(FlightState<M>& f, std::span<const PackedItem> last) {
  const PreparedStep& p = f.last();
  PortOn<M>& port = f.last_port();
  const auto exec = port.exec();
  const std::span<const std::size_t> ge(p.group.data(), f.op.rank);
  unsigned char* sbuf = f.buffers->chunks.buf[0].data();
  unsigned char* rbuf = f.buffers->chunks.buf[1].data();
  if (p.packed) {
    const PackedArgs pa{last, ge, std::size_t(p.step.from), std::size_t(p.step.to), f.wire};
    packed_own_blocks(exec, *p.packed, pa);
    packed_pack(exec, *p.packed, pa, sbuf);
    fence_before_transfer(port, exec);
    f.pending = port.post_runs(sbuf, p.packed->section_sends, rbuf, p.packed->section_recvs, 1);
  } else if (p.packed_gather) {
    const PackedGatherArgs pa{last, ge, std::size_t(p.step.from), f.wire};
    packed_gather_own(exec, *p.packed_gather, pa, port.rank(), sbuf);
    fence_before_transfer(port, exec);
    f.pending = port.post_runs(sbuf, p.packed_gather->section_sends, rbuf, p.packed_gather->section_recvs, 1);
  } else {
    const PeerPlan& pp = p.single ? std::get<PeerPlan>(*p.single) : std::get<PeerPlan>(p.gather);
    copy_runs(exec, last[0].out, last[0].in, last[0].elem_bytes, std::span(&pp.self, 1));
    fence_before_transfer(port, exec);
    f.pending = port.post_runs(last[0].in, pp.sends, last[0].out, pp.recvs, last[0].elem_bytes);
  }
}

/// Starts an operation: prepare, agree (errors raise here, on every rank,
/// before anything moves), the steps before the last (blocking), then the
/// last step's own blocks copied and its messages posted. Backends without
/// split-phase exchange, and last steps that are not a switch or a gather,
/// run to the end here; complete() then reports every block at once.
template <class M>
std::unique_ptr<Flight<M>> start_operation(const OpGroup<M>& g, std::shared_ptr<void> keep, const OpArgs& a,
                                           Signature sig, std::string err) {
  auto st = std::make_unique<FlightState<M>>();
  FlightState<M>& f = *st;
  f.g = g;
  f.keep = std::move(keep);
  f.items.assign(a.items.begin(), a.items.end());
  f.global.assign(a.global.begin(), a.global.end());
  f.wire = a.wire;
  for (std::size_t x = 0; x < g.axes; ++x) f.from[x] = a.from[x];
  f.sizes = a.sizes;
  const OpArgs args{f.items, f.global, a.steps, std::span<const long>(f.from.data(), g.axes), a.wire, a.rtype,
                    a.recut, a.sizes,  {}};  // each: refused split-phase (batch_error)
  ExclusiveUseGroup use(g, a.steps, op_name(sig.op));
  prepare_operation(f.op, g, args, sig, err, true);
  PreparedOp& op = f.op;
  if (err.empty()) {
    sig.path = static_cast<std::uint32_t>(op.path);
    reserve_flight(f, sig, err);
  }
  f.sig = sig;
  agree(*g.world, sig, err);
  auto flight = std::make_unique<Flight<M>>(std::move(st));
  if (op.size == 0) {
    execute_identity(g, args);
    f.finished = true;
    return flight;
  }
  const Scratch<M>* scratch = f.buffers ? &f.buffers->steps : nullptr;
  std::array<PackedItem, kMaxBatch> items{};
  for (std::size_t t = 0; t + 1 < op.size; ++t) {
    step_items(op, args, t, scratch, items);
    execute_step(g, op, args, t, std::span<const PackedItem>(items.data(), args.items.size()));
  }
  step_items(op, args, op.size - 1, scratch, f.last_items);
  const std::span<const PackedItem> last(f.last_items.data(), args.items.size());
  if (op.posted_last) {
    post_last_step(f, last);
  } else {
    execute_step(g, op, args, op.size - 1, last);
    f.finished = true;
  }
  return flight;
}

template <class M>
std::unique_ptr<Flight<M>> start_call(const OpGroup<M>& g, std::shared_ptr<void> keep, const CallFacts& f) {
  PreparedCall c;
  prepare_call(f, c);
  return start_operation(g, std::move(keep), c.args, c.sig, std::move(c.err));
}

}  // namespace dsp::detail
