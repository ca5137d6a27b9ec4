// dsp: sequence-parallel x data-parallel groups, and handing every rank of a
// sequence-parallel group the same input (the paper's dsp_dataloader).
#pragma once

#include <dsp/detail/agree.hpp>
#include <dsp/detail/plan.hpp>
#include <dsp/detail/workspace.hpp>
#include <dsp/primitives.hpp>
#include <dsp/tensor.hpp>

#include <optional>
#include <string>
#include <vector>

namespace dsp {

/// A communicator split into sequence-parallel groups of `sequence_size`
/// consecutive ranks, and data-parallel groups of the ranks that hold the same
/// position in their sequence-parallel group.
template <class Comm>
struct ParallelGroups {
  Comm sequence;          ///< this rank's sequence-parallel group (shards move inside it)
  Comm data;              ///< this rank's data-parallel group (one rank per sequence group)
  int sequence_group = 0; ///< index of this rank's sequence-parallel group
  int data_group = 0;     ///< index of this rank's data-parallel group (= rank in `sequence`)
};

/// Collective over `world`. Throws InvalidArgument on every rank (before any
/// communication) unless 1 <= sequence_size and it divides world.size().
template <class Comm>
  requires requires(const Comm& c) { c.split(0, 0); }
ParallelGroups<Comm> make_parallel_groups(const Comm& world, int sequence_size) {
  const int n = world.size(), r = world.rank();
  if (sequence_size < 1 || n % sequence_size != 0)
    throw InvalidArgument("dsp::make_parallel_groups: the sequence-parallel size " + std::to_string(sequence_size) +
                          " must be at least 1 and divide the communicator size " + std::to_string(n));
  const int g = r / sequence_size, pos = r % sequence_size;
  Comm sp = world.split(g, pos);
  Comm dp = world.split(pos, g);
  return ParallelGroups<Comm>{sp, dp, g, pos};
}

/// Collective over `comm`: the tensor `source` held by rank `root` becomes a
/// DistTensor with layout L on every rank: broadcast for Replicated, scatter of
/// blocks for Sharded<D>. Other ranks pass a view of the same type (it may be
/// empty); they learn the extents from the root. `source` must be contiguous
/// row-major on the root. Throws on every rank when the ranks disagree on the
/// element type, rank, layout or root, or the root's view is unusable.
template <Layout L, Communicator Comm, class V>
  requires Kokkos::is_view<V>::value
auto distribute(const Comm& comm, const V& source, int root = 0) {
  using T = typename V::non_const_value_type;
  constexpr std::size_t R = V::rank;
  static_assert(layout_fits_v<L, R>, "dsp::distribute: Sharded<D> requires D < the source view's rank.");
  using M = typename Comm::memory_space;
  using Out = DistTensor<T, R, L, Comm, M>;
  Comm c = comm;
  const int n = c.size(), p = c.rank();
  // A root out of range is reported through the agreement check like any local
  // failure: ranks may disagree on the root, and a rank that threw here alone
  // would leave the others waiting in the check.
  std::string err;
  if (root < 0 || root >= n)
    err = "dsp::distribute: root " + std::to_string(root) + " is not a rank of a communicator of " + std::to_string(n);

  detail::Signature sig;
  sig.op = static_cast<std::uint32_t>(detail::Op::distribute);
  detail::set_type<T>(sig);
  sig.tensor_rank = R;
  sig.dst_layout = detail::layout_code<L>();
  sig.root = root;
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(detail::Status::other);
  std::array<std::size_t, R> global{};
  if (p == root) {
    for (std::size_t d = 0; d < R; ++d) global[d] = source.extent(d);
    std::size_t expect = 1;
    for (std::size_t d = R; d-- > 0;) {
      if (source.extent(d) > 1 && static_cast<std::size_t>(source.stride(d)) != expect)
        err = "dsp::distribute (root " + std::to_string(root) + "): the source view is not contiguous row-major";
      expect *= source.extent(d);
    }
    if (!err.empty()) sig.status = static_cast<std::uint32_t>(detail::Status::bad_local_view);
  }
  detail::agree(c, sig, err);
  {
    std::vector<std::array<std::size_t, R>> all(static_cast<std::size_t>(n));
    c.control_all_gather(global.data(), all.data(), sizeof global);
    global = all[static_cast<std::size_t>(root)];
  }

  // Allocate everywhere, then agree again: a rank that cannot allocate makes all throw.
  std::optional<Out> out;
  detail::Signature sig2 = sig;
  detail::set_extents(sig2, global);
  std::string err2;
  std::vector<std::size_t> sc(n, 0), sd(n, 0), rc(n, 0), rd(n, 0);
  unsigned char* sbuf = nullptr;
  std::vector<detail::CopyTask> pack;
  try {
    if (const std::string why = detail::size_error(global, sizeof(T)); !why.empty()) throw InvalidArgument(why);
    out.emplace(Out::uninitialized(c, global));
    if constexpr (is_sharded_v<L>) {
      const Partition pd{global[L::dim], std::size_t(n)};
      const detail::Slab g = detail::slab(global, L::dim);
      rc[root] = g.elems(pd.count(std::size_t(p)));
      if (p == root) {
        std::size_t at = 0;
        for (int q = 0; q < n; ++q) {
          const std::size_t cnt = g.elems(pd.count(std::size_t(q)));
          sc[q] = cnt;
          sd[q] = at;
          pack.push_back({detail::contiguous(at, cnt), g.runs(pd.offset(std::size_t(q)), pd.count(std::size_t(q))), cnt});
          at += cnt;
        }
        sbuf = detail::workspace<M>(c.id()).send(at * sizeof(T));
      }
    }
  } catch (const std::exception& e) {
    sig2.status = static_cast<std::uint32_t>(detail::Status::alloc_failed);
    err2 = detail::failure_text("dsp::distribute", p, e);
  }
  detail::agree(c, sig2, err2);

  auto exec = detail::execution_space_for<M>(c);
  Out& y = *out;
  if constexpr (is_replicated_v<L>) {
    if (p == root) {
      const std::size_t total = y.local_size();
      const detail::CopyTask t{detail::contiguous(0, total), detail::contiguous(0, total), total};
      detail::copy_runs(exec, y.local().data(), source.data(), sizeof(T), std::span(&t, 1));
      exec.fence();
    }
    if (y.local_size() > 0) c.broadcast(y.local().data(), y.local_size(), sizeof(T), root);
  } else {
    detail::copy_runs(exec, sbuf, source.data(), sizeof(T), pack);
    exec.fence();
    if (y.global_size() > 0) c.all_to_all_v(sbuf, sc, sd, y.local().data(), rc, rd, sizeof(T), y.global_size());
  }
  return y;
}

}  // namespace dsp
