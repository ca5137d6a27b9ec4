// SPDX-License-Identifier: BSD-3-Clause
// Every switch algorithm (alltoall, alltoallv, pairwise, automatic) against
// the serial reference on random shapes, also with MPI's count limit lowered
// so messages split; the recycled outputs of allocating calls; streaming copies.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>
#include <dsp/kernels/copy.hpp>  // internals under test: the streaming copy
#include <dsp/plan/gather.hpp>
#include <dsp/plan/packed.hpp>  // and the eager-pieces rule

#include <vector>

using namespace dsp_test;

namespace {

struct Algorithm {
  dsp::SwitchAlgorithm saved = dsp::switch_algorithm();
  explicit Algorithm(dsp::SwitchAlgorithm a) { dsp::set_switch_algorithm(a); }
  ~Algorithm() { dsp::set_switch_algorithm(saved); }
};

template <std::size_t I, std::size_t J, class T = std::int32_t>
void check(const std::array<std::size_t, 3>& g) {
  using X = dsp::DistTensor<T, 3, dsp::Sharded<I>, dsp::MpiCommunicator>;
  using Y = dsp::DistTensor<T, 3, dsp::Sharded<J>, dsp::MpiCommunicator>;
  INFO("switch ", I, " -> ", J, " of ", dsp::detail::text(g));
  X x{world(), g};
  fill(x);
  Y y{world(), g};
  dsp::dynamic_switch<J>(x, y);
  CHECK(count_wrong(y) == 0);
  CHECK(count_wrong(x) == 0);
  Y z = dsp::dynamic_switch<J>(x);
  CHECK(count_wrong(z) == 0);
}

void all(const std::array<std::size_t, 3>& g) {
  check<0, 1>(g);
  check<1, 0>(g);
  check<0, 2>(g);
  check<2, 0>(g);
  check<1, 2>(g);
  check<2, 1>(g);
}

const dsp::SwitchAlgorithm kAll[] = {dsp::SwitchAlgorithm::alltoall, dsp::SwitchAlgorithm::alltoallv,
                                     dsp::SwitchAlgorithm::pairwise, dsp::SwitchAlgorithm::datatypes,
                                     dsp::SwitchAlgorithm::automatic};

}  // namespace

TEST_CASE("every switch algorithm matches the reference on random shapes") {
  for (auto a : kAll) {
    Algorithm use(a);
    CAPTURE(static_cast<int>(a));
    std::mt19937 rng(7);
    for (int t = 0; t < 6; ++t) all(random_extents<3>(rng));
    all({8, 12, 4});  // divisible by 1, 2, 4: the equal-count path
    all({0, 5, 3});
  }
}

TEST_CASE("pairwise messages split at MPI's count limit and keep their order") {
  Algorithm use(dsp::SwitchAlgorithm::pairwise);
  const std::size_t saved = dsp::detail::mpi_count_limit();
  dsp::detail::mpi_count_limit() = 5;
  all({7, 9, 6});
  all({12, 8, 4});
  dsp::detail::mpi_count_limit() = saved;
}

TEST_CASE("automatic picks from global values, so every rank picks the same") {
  const std::size_t big[] = {64, 4096, 128}, small[] = {16, 16, 8}, rows[] = {4096, 4096, 1};
  using A = dsp::SwitchAlgorithm;
  const auto choose = [](const std::size_t* g, int n, bool peer, bool typed, A setting = A::automatic) {
    return dsp::detail::choose_switch(std::span(g, 3), 0, 1, n, 4, {peer, typed}, setting);
  };
  CHECK(choose(small, 2, true, false) == A::alltoall);
  CHECK(choose(big, 2, true, true) == A::pairwise);
  CHECK(choose(big, 2, true, false) == A::pairwise);
  CHECK(choose(rows, 2, true, false) == A::alltoallv);  // 1-element runs: packing wins
  const std::size_t mid[] = {16, 64, 128};              // 16 KiB runs, 128 KiB chunks: MPI's datatype engine
  CHECK(choose(mid, 2, true, true) == A::datatypes);
  CHECK(choose(mid, 2, true, false) == A::alltoallv);
  const std::size_t wide[] = {64, 64, 128};  // 16 KiB runs in 512 KiB chunks: packed, one copy each way
  CHECK(choose(wide, 2, true, true) == A::alltoallv);
  const std::size_t long_runs[] = {8, 512, 128};  // 128 KiB runs: pairwise
  CHECK(choose(long_runs, 2, true, true) == A::pairwise);
  // One tensor's small switch takes the datatypes from 128-byte runs (chunks up to 64 KiB); a batch's
  // member, deciding whether the batch moves tensor by tensor, from 256.
  const std::size_t runs128[] = {128, 4, 16};  // 2 x 16 floats per run, chunks of 8 KiB at 2 ranks
  CHECK(choose(runs128, 2, true, true) == A::datatypes);
  CHECK(dsp::detail::choose_switch(std::span(runs128, 3), 0, 1, 2, 4, {true, true}, A::automatic, false) ==
        A::alltoallv);
  const std::size_t runs128_big[] = {2048, 4, 16};  // the same runs in 128 KiB chunks: packed
  CHECK(choose(runs128_big, 2, true, true) == A::alltoallv);
  const std::size_t runs64[] = {256, 4, 8};  // 64-byte runs: packed (in eager pieces: plan_switch_step)
  CHECK(choose(runs64, 2, true, true) == A::alltoallv);
  CHECK(choose(big, 2, false, false) == A::alltoallv);
  const std::size_t uneven[] = {15, 17, 8};
  CHECK(choose(uneven, 2, true, false) != A::alltoall);
  // A forced algorithm the backend or shape cannot run resolves to alltoallv when chosen, never later.
  CHECK(choose(big, 2, false, false, A::pairwise) == A::alltoallv);
  CHECK(choose(big, 2, true, false, A::datatypes) == A::alltoallv);
  CHECK(choose(uneven, 2, true, true, A::alltoall) == A::alltoallv);
  CHECK(choose(big, 2, true, true, A::alltoall) == A::alltoall);
  check<0, 1, float>({64, 1024, 64});  // 16 MiB: automatic at a real size
  check<1, 0, float>({64, 1024, 64});
}

TEST_CASE("allocating calls recycle outputs nobody holds") {
  using X = dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, dsp::MpiCommunicator>;
  using Y = dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, dsp::MpiCommunicator>;
  X x{world(), {9, 10, 3}};
  fill(x);
  std::vector<const void*> seen;
  Y y = dsp::dynamic_switch<1>(x);
  for (int k = 0; k < 6; ++k) {
    y = dsp::dynamic_switch<1>(x);  // the previous output is still held during the call
    CHECK(count_wrong(y) == 0);
    seen.push_back(y.local().data());
  }
  if (y.local_size() > 0) {
    CHECK(seen[2] == seen[4]);  // steady state: two blocks alternate, no new allocation
    CHECK(seen[3] == seen[5]);
    CHECK(seen[4] != seen[5]);
  }
  Y held = y;  // a held output is never handed out again
  Y other = dsp::dynamic_switch<1>(x);
  CHECK((y.local_size() == 0 || other.local().data() != held.local().data()));
  CHECK(count_wrong(held) == 0);
  auto r = dsp::gather(x);
  CHECK(count_wrong(r) == 0);
  dsp::release_workspaces();
  CHECK(dsp::workspace_bytes(world()) == 0);
  auto again = dsp::gather(x);
  CHECK(count_wrong(again) == 0);
}

TEST_CASE("streaming copies of every alignment and length") {
  std::vector<unsigned char> src(1000), dst(1100);
  for (std::size_t k = 0; k < src.size(); ++k) src[k] = static_cast<unsigned char>(k * 31 + 7);
  for (std::size_t off : {0, 1, 7, 15, 16})
    for (std::size_t len : {0, 1, 63, 64, 65, 200, 999 - 16}) {
      std::fill(dst.begin(), dst.end(), 0);
      dsp::detail::stream_copy(dst.data() + off, src.data() + 1, len);
      dsp::detail::stream_fence();
      CHECK(std::equal(src.begin() + 1, src.begin() + 1 + len, dst.begin() + off));
      CHECK(dst[off + len] == 0);
    }
  const std::size_t saved = dsp::detail::stream_threshold();
  dsp::detail::stream_threshold() = 1;  // every pack and unpack streams
  {
    Algorithm use(dsp::SwitchAlgorithm::alltoallv);
    all({6, 10, 5});
  }
  dsp::detail::stream_threshold() = saved;
}

TEST_CASE("gather of a dim that is not the first goes point to point when its runs are long") {
  using X = dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, dsp::MpiCommunicator>;
  using Y = dsp::DistTensor<std::int32_t, 3, dsp::Replicated, dsp::MpiCommunicator>;
  const std::array<std::size_t, 3> g{4, 16, 4096};  // runs of at least 4 * 4096 * 4 bytes = 64 KiB
  const std::size_t saved = dsp::detail::mpi_count_limit();
  for (std::size_t limit : {saved, std::size_t(3000)}) {
    dsp::detail::mpi_count_limit() = limit;
    X x{world(), g};
    fill(x);
    const auto plan = dsp::detail::plan_gather(g, 1, world().rank(), world().size(), 4, {true, false},
                                               dsp::SwitchAlgorithm::automatic);
    CHECK(std::holds_alternative<dsp::detail::PeerPlan>(plan) == (world().size() > 1));
    Y y{world(), g};
    dsp::gather(x, y);
    CHECK(count_wrong(y) == 0);
    CHECK(count_wrong(dsp::gather(x)) == 0);
    CHECK(count_wrong(x) == 0);
  }
  dsp::detail::mpi_count_limit() = saved;
}

TEST_CASE("small exchanges whose chunks pass the eager limit go point to point in eager pieces") {
  using A = dsp::SwitchAlgorithm;
  using dsp::detail::eager_pieces_chunk;
  // The window: past kEagerMessageBytes, up to kEagerPiecesChunkBytes.
  CHECK(!eager_pieces_chunk(3968));
  CHECK(eager_pieces_chunk(3969));
  CHECK(eager_pieces_chunk(8192));
  CHECK(!eager_pieces_chunk(8193));
  const std::size_t odd[] = {9, 14, 5};  // over 4 ranks rank 0 holds 3 of 9 and 4 of 14
  CHECK(dsp::detail::largest_switch_chunk(odd, 0, 1, 4, 4) == 3 * 4 * 5 * 4);
  CHECK(dsp::detail::largest_switch_chunk(odd, 0, 1, 1, 4) == 9 * 14 * 5 * 4);

  using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  C comm{world()};
  const int n = comm.size();
  const std::size_t un = std::size_t(n), me = std::size_t(comm.rank());
  // Sharded<0> -> Sharded<1> of float [a n, b n, 8]: runs of b 8 4 bytes (64: a packing collective
  // under the automatic rule), chunks of a b 8 4 bytes. `pieces`: messages per peer in eager pieces,
  // 0 when the chunk goes as one collective.
  struct Case {
    std::size_t a, b, pieces;
  };
  for (const Case c : {Case{64, 2, 2}, Case{128, 2, 4}, Case{32, 2, 0}, Case{256, 2, 0}}) {
    const std::array<std::size_t, 3> g{c.a * un, c.b * un, 8};
    CAPTURE(c.a);
    CAPTURE(c.b);
    dsp::DistTensor<float, 3, dsp::Sharded<0>, C> x{comm, g};
    fill(x);
    dsp::DistTensor<float, 3, dsp::Sharded<1>, C> y{comm, g};
    const auto cost = dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<1>>(g, 4, un, me);
    for (const A setting : {A::automatic, A::alltoallv}) {
      CAPTURE(int(setting));
      Algorithm use(setting);
      comm.reset();
      dsp::dynamic_switch<1>(x, y);
      const auto counts = comm.counts();
      CHECK(count_wrong(y) == 0);
      CHECK(count_wrong(x) == 0);
      CHECK(counts.bytes_sent == cost.bytes);
      CHECK(counts.control <= 1);
      if (n < 2) continue;
      const bool pieces = c.pieces > 0 && setting == A::automatic;
      CHECK(counts.exchange == (pieces ? 1u : 0u));
      CHECK(counts.all_to_all == (pieces ? 0u : 1u));
      if (pieces) CHECK(counts.messages == c.pieces * (un - 1));
    }
  }
  // Uneven chunks (float [48 n + 5, 2 n + 1, 8]: the largest 4.7-5 KiB, others smaller, some under
  // the limit), and 2- and 1-byte elements ([n, m, n] Sharded<0> -> Sharded<2>: 1-byte runs, a chunk
  // of m elements): a 4,106-byte chunk cut into two odd 2,053-byte pieces, and a 4,099-byte one (prime:
  // no even cut) sent whole.
  auto eager_switch = [&](auto x, auto y, std::size_t per_peer) {
    using X = decltype(x);
    fill(x);
    const auto g = x.global_extents();
    const auto cost = dsp::transition_cost<typename X::layout_type, typename decltype(y)::layout_type>(
        g, sizeof(typename X::value_type), un, me);
    comm.reset();
    dsp::redistribute<typename decltype(y)::layout_type>(x, y);
    const auto counts = comm.counts();
    CHECK(count_wrong(y) == 0);
    CHECK(count_wrong(x) == 0);
    CHECK(counts.bytes_sent == cost.bytes);
    if (n < 2) return;
    CHECK(counts.exchange == 1u);
    CHECK(counts.all_to_all == 0u);
    if (per_peer) CHECK(counts.messages == per_peer * (un - 1));
  };
  {
    const std::array<std::size_t, 3> g{48 * un + 5, 2 * un + 1, 8};
    eager_switch(dsp::DistTensor<float, 3, dsp::Sharded<0>, C>{comm, g},
                 dsp::DistTensor<float, 3, dsp::Sharded<1>, C>{comm, g}, 0);
    const std::array<std::size_t, 3> h{un, 2053, un}, b{un, 4099, un};
    eager_switch(dsp::DistTensor<std::int16_t, 3, dsp::Sharded<0>, C>{comm, h},
                 dsp::DistTensor<std::int16_t, 3, dsp::Sharded<2>, C>{comm, h}, 2);
    eager_switch(dsp::DistTensor<std::int8_t, 3, dsp::Sharded<0>, C>{comm, b},
                 dsp::DistTensor<std::int8_t, 3, dsp::Sharded<2>, C>{comm, b}, 1);
  }
  // Into Zigzag<0> (the cut engine): [a n, 4 n, 4] float from Sharded<1>, 64-byte runs (packed),
  // chunks of a 64 bytes on average.
  for (const Case c : {Case{64, 0, 1}, Case{128, 0, 1}, Case{256, 0, 0}}) {
    const std::array<std::size_t, 3> g{c.a * un, 4 * un, 4};
    CAPTURE(c.a);
    dsp::DistTensor<float, 3, dsp::Sharded<1>, C> x{comm, g};
    fill(x);
    dsp::DistTensor<float, 3, dsp::Zigzag<0>, C> y{comm, g};
    comm.reset();
    dsp::redistribute<dsp::Zigzag<0>>(x, y);
    const auto counts = comm.counts();
    std::size_t wrong = 0;  // a Zigzag block: local indices from `first` on continue at global `second`
    const dsp::Split split = y.block_split();
    const float* p = y.local().data();
    for_each_local(y, [&](const auto& idx, auto gi, std::size_t k) {
      if (split.dim != dsp::Split::none && idx[split.dim] >= split.first)
        gi[split.dim] = split.second + (idx[split.dim] - split.first);
      if (!(p[k] == value_at<float>(linear(gi, g)))) ++wrong;
    });
    CHECK(wrong == 0);
    CHECK(count_wrong(x) == 0);
    CHECK(counts.control <= 1);
    if (n < 2) continue;
    CHECK(counts.exchange == (c.pieces ? 1u : 0u));
    CHECK(counts.all_to_all == (c.pieces ? 0u : 1u));
    // and back
    dsp::DistTensor<float, 3, dsp::Sharded<1>, C> z{comm, g};
    comm.reset();
    dsp::redistribute<dsp::Sharded<1>>(y, z);
    CHECK(count_wrong(z) == 0);
    CHECK(comm.counts().exchange == (c.pieces ? 1u : 0u));
  }
}
