// dsp: the three layout transitions of Dynamic Sequence Parallelism.
//   split<D>          Replicated -> Sharded<D>   local slice, no communication
//   dynamic_switch<D> Sharded<i> -> Sharded<D>   one all-to-all
//   gather            Sharded<i> -> Replicated   one all-gather
// Each comes allocating (returns the output) and into an existing output.
// None modifies its input, also on error.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/detail/agree.hpp>
#include <dsp/detail/plan.hpp>
#include <dsp/detail/workspace.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/tensor.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

namespace dsp {
namespace detail {

template <class X>
using tensor_t = std::remove_cvref_t<X>;

/// The DistTensor type like X but with layout L.
template <class X, class L>
struct relayout;
template <class T, std::size_t R, class L0, class Comm, class M, class L>
struct relayout<DistTensor<T, R, L0, Comm, M>, L> {
  using type = DistTensor<T, R, L, Comm, M>;
};
template <class X, class L>
using relayout_t = typename relayout<tensor_t<X>, L>::type;

template <class Comm>
bool same_group(const Comm& a, const Comm& b) {
  if (a.id() == b.id()) return true;
  if constexpr (requires { a == b; }) return a == b;
  else return false;
}

template <class V>
bool overlaps(const V& a, const V& b) {
  if (a.size() == 0 || b.size() == 0) return false;
  const auto* a0 = a.data();
  const auto* b0 = b.data();
  return a0 < b0 + b.size() && b0 < a0 + a.size();
}

/// Why `y` cannot receive a transition of `x`, or "". Builds text only on error.
template <class X, class Y>
std::string check_output(const char* op, const X& x, const Y& y) {
  auto who = [&] { return std::string(op) + " (rank " + std::to_string(x.communicator().rank()) + ")"; };
  if (y.global_extents() != x.global_extents())
    return who() + ": the output has global extents " + text(y.global_extents()) + " but the input " +
           text(x.global_extents());
  if (!same_group(x.communicator(), y.communicator()))
    return who() + ": the output lives on a different communicator than the input";
  if (overlaps(x.local(), y.local()))
    return who() + ": the output shares memory with the input; dsp does not work in place";
  return "";
}

template <class X>
Signature signature_of(Op op, const X& x, long dst_layout) {
  Signature s;
  s.op = static_cast<std::uint32_t>(op);
  set_type<typename X::value_type>(s);
  set_extents(s, x.global_extents());
  s.src_layout = layout_code<typename X::layout_type>();
  s.dst_layout = dst_layout;
  return s;
}

inline std::string failure_text(const char* op, int rank, const std::exception& e) {
  return std::string(op) + " (rank " + std::to_string(rank) + "): " + e.what();
}

/// Collective: this rank failed before the collective; make every rank throw.
template <class Comm>
[[noreturn]] void fail_everywhere(Comm comm, Signature sig, Status st, const std::string& msg) {
  sig.status = static_cast<std::uint32_t>(st);
  agree(comm, sig, msg);
  throw InvalidArgument(msg);  // reached only if agree did not throw (it always does)
}

template <class Exec>
void fence(const Exec& exec) {
  exec.fence();
}

/// True for backends whose collectives are ordered on the kernels' stream (NCCL).
template <class Comm>
inline constexpr bool stream_ordered_v = requires { requires Comm::stream_ordered; };

/// The fence between a step that writes a buffer and the collective that
/// reads it: needed when the collective is issued from the host (MPI), not
/// when it is ordered on the same stream as the kernels.
template <class Comm, class Exec>
void fence_before_transfer(const Exec& exec) {
  if constexpr (!stream_ordered_v<Comm>) exec.fence();
}

// ---- type-erased engines: compiled once per (communicator, memory space) ----

/// Whether the backend offers point-to-point exchange of run patterns.
template <class Comm>
inline constexpr bool has_exchange_runs_v =
    requires(Comm& c, const void* s, void* r, std::span<const PeerRuns> v, std::size_t n) {
      c.exchange_runs(s, v, r, v, n, [] {});
    };

/// Whether the backend offers the same exchange as one call with strided datatypes.
template <class Comm>
inline constexpr bool has_exchange_typed_v =
    requires(Comm& c, const void* s, void* r, std::span<const PeerRuns> v, std::size_t n) {
      c.exchange_runs_typed(s, v, r, v, n, [] {});
    };

template <class M, class Comm>
void run_switch(Comm comm, Signature sig, std::string err, const void* in, void* out, std::size_t eb,
                std::span<const std::size_t> global, std::size_t i, std::size_t j) {
  auto exec = execution_space_for<M>(comm);
  const int n = comm.size(), p = comm.rank();
  std::shared_ptr<const SwitchPlan> plan;
  unsigned char* sbuf = nullptr;
  unsigned char* rbuf = nullptr;
  if (err.empty()) {
    try {
      maybe_inject_fault();
      if (i != j) {
        plan = cached_switch_plan(global, i, j, p, n, eb, has_exchange_runs_v<Comm>, has_exchange_typed_v<Comm>);
        sig.algorithm = 1 + static_cast<std::uint32_t>(plan->algorithm);
        if (plan->send_elems > 0 || plan->recv_elems > 0) {
          Workspace<M>& ws = workspace<M>(comm.id());
          if (plan->send_elems > 0) sbuf = ws.send(plan->send_elems * eb);
          if (plan->recv_elems > 0) rbuf = ws.recv(plan->recv_elems * eb);
        }
      }
    } catch (const std::exception& e) {
      sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
      err = failure_text(op_name(sig.op), p, e);
    }
  }
  agree(comm, sig, err);
  if (i == j) {  // identity: a copy
    const std::size_t total = product(global, 0, global.size()) / (global[i] ? global[i] : 1) *
                              Partition{global[i], std::size_t(n)}.count(std::size_t(p));
    const CopyTask t{contiguous(0, total), contiguous(0, total), total};
    copy_runs(exec, out, in, eb, std::span(&t, 1));
    fence(exec);
    return;
  }
  const SwitchPlan& pl = *plan;
  const bool empty = product(global, 0, global.size()) == 0;
  const void* send = pl.send_from_input ? in : sbuf;
  void* recv = pl.recv_into_output ? out : rbuf;
  switch (pl.algorithm) {
    case SwitchAlgorithm::pairwise:
      if constexpr (has_exchange_runs_v<Comm>) {
        comm.exchange_runs(in, pl.sends, out, pl.recvs, eb, [&] {
          copy_runs(exec, out, in, eb, std::span(&pl.self, 1));
          fence(exec);
        });
        return;
      }
      break;
    case SwitchAlgorithm::datatypes:
      if constexpr (has_exchange_typed_v<Comm>) {
        comm.exchange_runs_typed(in, pl.sends, out, pl.recvs, eb, [&] {
          copy_runs(exec, out, in, eb, std::span(&pl.self, 1));
          fence(exec);
        });
        return;
      }
      break;
    case SwitchAlgorithm::alltoall:  // own chunk included: the backend copies it
      copy_runs(exec, sbuf, in, eb, pl.pack);
      fence_before_transfer<Comm>(exec);
      if (!empty) comm.all_to_all(send, recv, pl.equal_count, eb);
      copy_runs(exec, out, rbuf, eb, pl.unpack);
      fence(exec);
      return;
    default:
      break;
  }
  copy_runs(exec, sbuf, in, eb, pl.pack);
  copy_runs(exec, out, in, eb, std::span(&pl.self, 1));
  fence_before_transfer<Comm>(exec);
  if (n > 1 && !empty)
    comm.all_to_all_v(send, pl.send_counts, pl.send_displs, recv, pl.recv_counts, pl.recv_displs, eb, pl.bound);
  copy_runs(exec, out, rbuf, eb, pl.unpack);
  fence(exec);
}

template <class M, class Comm>
void run_gather(Comm comm, Signature sig, std::string err, const void* in, void* out, std::size_t eb,
                std::span<const std::size_t> global, std::size_t d) {
  auto exec = execution_space_for<M>(comm);
  const int n = comm.size(), p = comm.rank();
  GatherPlan plan;
  unsigned char* rbuf = nullptr;
  if (err.empty()) {
    try {
      maybe_inject_fault();
      plan = plan_gather(global, d, n, p, has_exchange_runs_v<Comm>, eb);
      sig.algorithm = plan.pairwise ? 2 : 1;
      if (!plan.recv_into_output && !plan.pairwise) rbuf = workspace<M>(comm.id()).recv(plan.recv_elems * eb);
    } catch (const std::exception& e) {
      sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
      err = failure_text(op_name(sig.op), p, e);
    }
  }
  agree(comm, sig, err);
  if constexpr (has_exchange_runs_v<Comm>) {
    if (plan.pairwise) {
      comm.exchange_runs(in, plan.sends, out, plan.recvs, eb, [&] {
        copy_runs(exec, out, in, eb, std::span(&plan.self, 1));
        fence(exec);
      });
      return;
    }
  }
  fence_before_transfer<Comm>(exec);
  if (product(global, 0, global.size()) > 0)
    comm.all_gather_v(in, plan.counts[p], plan.recv_into_output ? out : rbuf, plan.counts, plan.displs, eb);
  copy_runs(exec, out, rbuf, eb, plan.unpack);
  fence(exec);
}

/// The output of an allocating call: a recycled block when one of these
/// extents is idle (see OutputPool), else a new uninitialized one.
template <class Y, class X>
std::optional<Y> try_allocate(const X& x, Signature sig, const char* op) {
  try {
    using V = typename Y::view_type;
    const auto& c = x.communicator();
    const auto e = local_extents<typename Y::layout_type>(x.global_extents(), c.rank(), c.size());
    V v = OutputPool<V>::get().get(e, [&] { return Y::uninitialized(c, x.global_extents()).local(); });
    return Y(unchecked_t{}, c, x.global_extents(), std::move(v));
  } catch (const std::exception& e) {
    fail_everywhere(x.communicator(), sig, Status::alloc_failed, failure_text(op, x.communicator().rank(), e));
  }
}

template <std::size_t D, class X, class Y>
void switch_into(const X& x, Y& y) {
  using L = typename X::layout_type;
  Signature sig = signature_of(Op::dynamic_switch, x, static_cast<long>(D));
  std::string err = check_output("dsp::dynamic_switch", x, y);
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(Status::bad_output);
  run_switch<typename X::memory_space>(x.communicator(), sig, err, x.local().data(), y.local().data(),
                                       sizeof(typename X::value_type), x.global_extents(), L::dim, D);
}

template <class X, class Y>
void gather_into(const X& x, Y& y) {
  using L = typename X::layout_type;
  Signature sig = signature_of(Op::gather, x, -1);
  std::string err = check_output("dsp::gather", x, y);
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(Status::bad_output);
  run_gather<typename X::memory_space>(x.communicator(), sig, err, x.local().data(), y.local().data(),
                                       sizeof(typename X::value_type), x.global_extents(), L::dim);
}

template <std::size_t D, class X, class Y>
void split_into(const X& x, Y& y) {
  const std::string err = check_output("dsp::split", x, y);
  if (!err.empty()) throw InvalidArgument(err);
  const auto& c = x.communicator();
  const CopyTask t = plan_split(x.global_extents(), D, c.rank(), c.size());
  auto exec = execution_space_for<typename X::memory_space>(c);
  copy_runs(exec, y.local().data(), x.local().data(), sizeof(typename X::value_type), std::span(&t, 1));
  fence(exec);
}

}  // namespace detail

// The static_asserts below are the compile-time half of the API: each names the rule.

/// Moves the shard of `x` (Sharded<i>) to dim D: one all-to-all (none when
/// i == D: then a copy). Returns a new Sharded<D> tensor. Collective.
/// Throws MismatchError on every rank when the ranks disagree on extents,
/// element type or layouts, or when any rank fails to allocate.
template <std::size_t D, class X>
auto dynamic_switch(const X& x) {
  static_assert(is_dist_tensor_v<X>, "dsp::dynamic_switch: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = detail::tensor_t<X>;
    static_assert(D < Xt::rank, "dsp::dynamic_switch<D>: the target dim D must be less than the tensor's rank.");
    static_assert(is_sharded_v<typename Xt::layout_type>,
                  "dsp::dynamic_switch: the input must be Sharded<i>; a Replicated tensor enters a sharding "
                  "with dsp::split<D> (no communication).");
    if constexpr (D < Xt::rank && is_sharded_v<typename Xt::layout_type>) {
      using Y = detail::relayout_t<Xt, Sharded<D>>;
      Y y = *detail::try_allocate<Y>(x, detail::signature_of(detail::Op::dynamic_switch, x, long(D)),
                                     "dsp::dynamic_switch");
      detail::switch_into<D>(x, y);
      return y;
    }
  }
}

/// As above, into an existing Sharded<D> tensor `y` of the same global extents
/// on the same communicator (its old contents are overwritten). Once warm, it
/// allocates nothing. Collective; an invalid `y` on any rank throws on all.
template <std::size_t D, class X, class Y>
void dynamic_switch(const X& x, Y& y) {
  static_assert(is_dist_tensor_v<X>, "dsp::dynamic_switch: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = detail::tensor_t<X>;
    static_assert(D < Xt::rank, "dsp::dynamic_switch<D>: the target dim D must be less than the tensor's rank.");
    static_assert(is_sharded_v<typename Xt::layout_type>,
                  "dsp::dynamic_switch: the input must be Sharded<i>; a Replicated tensor enters a sharding "
                  "with dsp::split<D> (no communication).");
    if constexpr (D < Xt::rank && is_sharded_v<typename Xt::layout_type>) {
      static_assert(std::is_same_v<detail::tensor_t<Y>, detail::relayout_t<Xt, Sharded<D>>>,
                    "dsp::dynamic_switch<D>(x, y): y must be a DistTensor with x's element type, rank, "
                    "communicator and memory space, and layout Sharded<D>.");
      detail::switch_into<D>(x, y);
    }
  }
}

/// Gathers a Sharded<i> tensor so every rank holds all of it: one all-gather.
/// Returns a new Replicated tensor. Collective; errors as dynamic_switch.
template <class X>
auto gather(const X& x) {
  static_assert(is_dist_tensor_v<X>, "dsp::gather: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = detail::tensor_t<X>;
    static_assert(is_sharded_v<typename Xt::layout_type>,
                  "dsp::gather: the input must be Sharded<i>; a Replicated tensor is already whole on every rank.");
    if constexpr (is_sharded_v<typename Xt::layout_type>) {
      using Y = detail::relayout_t<Xt, Replicated>;
      Y y = *detail::try_allocate<Y>(x, detail::signature_of(detail::Op::gather, x, -1), "dsp::gather");
      detail::gather_into(x, y);
      return y;
    }
  }
}

/// As above, into an existing Replicated tensor `y`. Collective.
template <class X, class Y>
void gather(const X& x, Y& y) {
  static_assert(is_dist_tensor_v<X>, "dsp::gather: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = detail::tensor_t<X>;
    static_assert(is_sharded_v<typename Xt::layout_type>,
                  "dsp::gather: the input must be Sharded<i>; a Replicated tensor is already whole on every rank.");
    if constexpr (is_sharded_v<typename Xt::layout_type>) {
      static_assert(std::is_same_v<detail::tensor_t<Y>, detail::relayout_t<Xt, Replicated>>,
                    "dsp::gather(x, y): y must be a Replicated DistTensor with x's element type, rank, "
                    "communicator and memory space.");
      detail::gather_into(x, y);
    }
  }
}

/// Keeps this rank's block of dim D of a Replicated tensor: a local slice, no
/// communication (and so no cross-rank check). Returns a new Sharded<D> tensor.
template <std::size_t D, class X>
auto split(const X& x) {
  static_assert(is_dist_tensor_v<X>, "dsp::split: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = detail::tensor_t<X>;
    static_assert(D < Xt::rank, "dsp::split<D>: the target dim D must be less than the tensor's rank.");
    static_assert(is_replicated_v<typename Xt::layout_type>,
                  "dsp::split: the input must be Replicated; a Sharded tensor moves to another dim with "
                  "dsp::dynamic_switch, or becomes Replicated with dsp::gather.");
    if constexpr (D < Xt::rank && is_replicated_v<typename Xt::layout_type>) {
      using Y = detail::relayout_t<Xt, Sharded<D>>;
      Y y = Y::uninitialized(x.communicator(), x.global_extents());
      detail::split_into<D>(x, y);
      return y;
    }
  }
}

/// As above, into an existing Sharded<D> tensor `y`. Local.
template <std::size_t D, class X, class Y>
void split(const X& x, Y& y) {
  static_assert(is_dist_tensor_v<X>, "dsp::split: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = detail::tensor_t<X>;
    static_assert(D < Xt::rank, "dsp::split<D>: the target dim D must be less than the tensor's rank.");
    static_assert(is_replicated_v<typename Xt::layout_type>,
                  "dsp::split: the input must be Replicated; a Sharded tensor moves to another dim with "
                  "dsp::dynamic_switch, or becomes Replicated with dsp::gather.");
    if constexpr (D < Xt::rank && is_replicated_v<typename Xt::layout_type>) {
      static_assert(std::is_same_v<detail::tensor_t<Y>, detail::relayout_t<Xt, Sharded<D>>>,
                    "dsp::split<D>(x, y): y must be a DistTensor with x's element type, rank, communicator "
                    "and memory space, and layout Sharded<D>.");
      detail::split_into<D>(x, y);
    }
  }
}

}  // namespace dsp
