// SPDX-License-Identifier: BSD-3-Clause
// Batched switches: several tensors in one collective. The data of every
// tensor against the reference for random uneven and empty shapes, mixed
// element types (so sections start at offsets that are no multiple of an
// element), every switch algorithm setting (the packed path, and the
// per-tensor path of tensors that move without copies), one agreement and one data collective with exactly
// the cost model's bytes, and errors on every rank with the inputs unchanged.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/batch.hpp>
#include <dsp/comm/counting.hpp>
#include <dsp/cost.hpp>
#include <dsp/engine/steps.hpp>  // internals under test: capabilities_of
#include <dsp/plan/packed.hpp>

#include <random>
#include <string>
#include <tuple>

using namespace dsp_test;

namespace {
template <class T, class L, class C = dsp::MpiCommunicator>
using T3 = dsp::DistTensor<T, 3, L, C>;

struct AlgorithmScope {
  explicit AlgorithmScope(dsp::SwitchAlgorithm a) { dsp::set_switch_algorithm(a); }
  ~AlgorithmScope() { dsp::set_switch_algorithm(dsp::SwitchAlgorithm::automatic); }
};

constexpr dsp::SwitchAlgorithm kAll[] = {dsp::SwitchAlgorithm::automatic, dsp::SwitchAlgorithm::alltoall,
                                         dsp::SwitchAlgorithm::alltoallv, dsp::SwitchAlgorithm::pairwise,
                                         dsp::SwitchAlgorithm::datatypes};
}  // namespace

TEST_CASE("a batch of three float tensors: the data, for random shapes and every algorithm setting") {
  std::mt19937 rng(71);
  for (auto a : kAll) {
    AlgorithmScope scope(a);
    for (int c = 0; c < 10; ++c) {
      const auto g = random_extents<3>(rng);
      T3<float, dsp::Sharded<0>> q{world(), g}, k{world(), g}, v{world(), g};
      fill(q), fill(k), fill(v);
      auto [q2, k2, v2] = dsp::dynamic_switch<2>(dsp::batch(q, k, v));
      static_assert(std::is_same_v<decltype(q2), T3<float, dsp::Sharded<2>>>);
      CHECK(count_wrong(q2) == 0);
      CHECK(count_wrong(k2) == 0);
      CHECK(count_wrong(v2) == 0);
      CHECK(count_wrong(q) == 0);
      // Back into existing tensors, to another dim.
      T3<float, dsp::Sharded<1>> q3{world(), g}, k3{world(), g}, v3{world(), g};
      dsp::dynamic_switch<1>(dsp::batch(q2, k2, v2), dsp::batch(q3, k3, v3));
      CHECK(count_wrong(q3) + count_wrong(k3) + count_wrong(v3) == 0);
    }
  }
}

TEST_CASE("a batch of mixed element types: sections at offsets no element size divides") {
  std::mt19937 rng(72);
  for (auto a : kAll) {
    AlgorithmScope scope(a);
    for (int c = 0; c < 10; ++c) {
      const auto g = random_extents<3>(rng);
      T3<double, dsp::Sharded<1>> x{world(), g};
      T3<std::int16_t, dsp::Sharded<1>> y{world(), g};
      T3<std::int8_t, dsp::Sharded<1>> z{world(), g};
      T3<float, dsp::Sharded<1>> w{world(), g};
      fill(x), fill(y), fill(z), fill(w);
      T3<double, dsp::Sharded<0>> x2{world(), g};
      T3<std::int16_t, dsp::Sharded<0>> y2{world(), g};
      T3<std::int8_t, dsp::Sharded<0>> z2{world(), g};
      T3<float, dsp::Sharded<0>> w2{world(), g};
      // int8 then int16 then double then float: each section after the first may be misaligned.
      dsp::dynamic_switch<0>(dsp::batch(z, y, x, w), dsp::batch(z2, y2, x2, w2));
      CHECK(count_wrong(x2) == 0);
      CHECK(count_wrong(y2) == 0);
      CHECK(count_wrong(z2) == 0);
      CHECK(count_wrong(w2) == 0);
    }
  }
}

TEST_CASE("a batch of one, and the identity switch of a batch") {
  const std::array<std::size_t, 3> g{5, 7, 3};
  T3<float, dsp::Sharded<1>> x{world(), g};
  fill(x);
  auto [y] = dsp::dynamic_switch<0>(dsp::batch(x));
  CHECK(count_wrong(y) == 0);
  auto [a, b] = dsp::dynamic_switch<1>(dsp::batch(x, x));  // the same input twice is allowed: inputs are read only
  CHECK(count_wrong(a) + count_wrong(b) == 0);
}

TEST_CASE("empty batches under every algorithm setting: no data, no collective beyond the agreement") {
  // Per-tensor plans (forced pairwise or datatypes) and packed plans both
  // meet tensors with a zero extent; nothing may index a section table the
  // plan never built.
  const std::array<std::array<std::size_t, 3>, 3> shapes{{{0, 4096, 64}, {64, 0, 512}, {64, 512, 0}}};
  for (auto a : kAll) {
    AlgorithmScope scope(a);
    for (const auto& g : shapes) {
      CAPTURE(int(a));
      T3<float, dsp::Sharded<0>> q{world(), g};
      T3<double, dsp::Sharded<0>> k{world(), g};
      auto [q2, k2] = dsp::dynamic_switch<2>(dsp::batch(q, k));
      CHECK(q2.global_extents() == g);
      CHECK(k2.local_extents() == T3<double, dsp::Sharded<2>>{world(), g}.local_extents());
      auto [q3, k3] = dsp::dynamic_switch<1>(dsp::batch(q2, k2));
      CHECK(count_wrong(q3) + count_wrong(k3) == 0);
      CHECK(q3.global_size() == 0);
    }
  }
}

TEST_CASE("a batch is one agreement and one data collective, with the cost model's bytes") {
  using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  C comm{world()};
  const int n = comm.size();
  std::mt19937 rng(73);
  for (auto a : {dsp::SwitchAlgorithm::automatic, dsp::SwitchAlgorithm::alltoallv}) {
    AlgorithmScope scope(a);
    for (int c = 0; c < 8; ++c) {
      const auto g = random_extents<3>(rng);
      T3<float, dsp::Sharded<0>, C> q{comm, g}, k{comm, g};
      T3<double, dsp::Sharded<0>, C> v{comm, g};
      fill(q), fill(k), fill(v);
      T3<float, dsp::Sharded<2>, C> q2{comm, g}, k2{comm, g};
      T3<double, dsp::Sharded<2>, C> v2{comm, g};
      comm.reset();
      dsp::dynamic_switch<2>(dsp::batch(q, k, v), dsp::batch(q2, k2, v2));
      const auto counts = comm.counts();
      const auto model = dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<2>>(g, 4 + 4 + 8, std::size_t(n),
                                                                                std::size_t(comm.rank()));
      CHECK(counts.bytes_sent == model.bytes);
      CHECK(counts.collectives() == model.collectives);
      CHECK(counts.control <= 1);
      CHECK(count_wrong(q2) + count_wrong(k2) + count_wrong(v2) == 0);
    }
  }
}

TEST_CASE("large tensors: one agreement, each tensor its own exchange, all in flight") {
  using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  C comm{world()};
  const std::array<std::size_t, 3> g{8, 256, 160};  // 320 KiB per float tensor: pairwise when n <= 2
  T3<float, dsp::Sharded<0>, C> q{comm, g}, k{comm, g}, v{comm, g};
  fill(q), fill(k), fill(v);
  AlgorithmScope scope(dsp::SwitchAlgorithm::pairwise);
  comm.reset();
  auto [q2, k2, v2] = dsp::dynamic_switch<1>(dsp::batch(q, k, v));
  CHECK(count_wrong(q2) + count_wrong(k2) + count_wrong(v2) == 0);
  const auto c = comm.counts();
  CHECK(c.control <= 1);
  CHECK(c.bytes_sent == dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<1>>(g, 12, std::size_t(comm.size()),
                                                                               std::size_t(comm.rank()))
                            .bytes);
  if (comm.size() > 1) CHECK(c.exchange == 3);
}

TEST_CASE("mid-size tensors: one agreement, each tensor its own datatypes or pairwise exchange") {
  using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  C comm{world()};
  const int n = comm.size();
  const std::size_t un = std::size_t(n);
  // The smallest run of a 0 -> 1 switch is H/n * D elements: 16384, so a
  // double tensor's pieces are 128 KiB (pairwise) and a float's 64 KiB in
  // chunks of 128 KiB (MPI datatypes) under the automatic setting.
  const std::array<std::size_t, 3> g{2 * un, 2 * un, 8192};
  const dsp::detail::Capabilities caps = dsp::detail::capabilities_of<C>();
  const auto auto_f = dsp::detail::choose_switch(g, 0, 1, n, 4, caps, dsp::SwitchAlgorithm::automatic);
  const auto auto_d = dsp::detail::choose_switch(g, 0, 1, n, 8, caps, dsp::SwitchAlgorithm::automatic);
  if (n > 1) {
    REQUIRE(auto_f == dsp::SwitchAlgorithm::datatypes);
    REQUIRE(auto_d == dsp::SwitchAlgorithm::pairwise);
  }
  T3<float, dsp::Sharded<0>, C> q{comm, g}, k{comm, g};
  T3<double, dsp::Sharded<0>, C> v{comm, g};
  fill(q), fill(k), fill(v);
  const auto model = dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<1>>(g, 4 + 4 + 8, un, std::size_t(comm.rank()));
  // automatic: the two float tensors by datatypes, the double one pairwise; then datatypes for all.
  for (const auto setting : {dsp::SwitchAlgorithm::automatic, dsp::SwitchAlgorithm::datatypes}) {
    CAPTURE(int(setting));
    AlgorithmScope scope(setting);
    comm.reset();
    auto [q2, k2, v2] = dsp::dynamic_switch<1>(dsp::batch(q, k, v));
    CHECK(count_wrong(q2) + count_wrong(k2) + count_wrong(v2) == 0);
    const auto c = comm.counts();
    CHECK(c.control <= 1);
    CHECK(c.bytes_sent == model.bytes);
    if (n > 1) CHECK(c.exchange == 3);
    if (n > 1) CHECK(c.all_to_all == 0);
  }
  SUBCASE("a wire packs even so: one exchange of the packed chunks") {
    T3<float, dsp::Sharded<0>, C> w{comm, g};
    fill(w);
    comm.reset();
    auto [q2, w2] = dsp::dynamic_switch<1>(dsp::batch(q, w), dsp::Wire::bf16);
    const auto c = comm.counts();
    CHECK(c.control <= 1);
    // Two float tensors, each its wire sections (padding included).
    CHECK(c.bytes_sent == 2 * dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<1>>(g, 4, un, std::size_t(comm.rank()),
                                                                                     dsp::Wire::bf16)
                                  .bytes);
    if (n > 1) CHECK(c.collectives() == 1);
  }
}

TEST_CASE("small tensors of one element type: packed chunks point-to-point, unless a collective is set") {
  using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  C comm{world()};
  const int n = comm.size();
  std::mt19937 rng(79);
  for (int c = 0; c < 8; ++c) {
    const auto g = random_extents<3>(rng);  // uneven and empty blocks among them
    T3<float, dsp::Sharded<0>, C> q{comm, g}, k{comm, g}, v{comm, g};
    fill(q), fill(k), fill(v);
    const auto model =
        dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<2>>(g, 12, std::size_t(n), std::size_t(comm.rank()));
    for (const auto setting :
         {dsp::SwitchAlgorithm::automatic, dsp::SwitchAlgorithm::alltoallv, dsp::SwitchAlgorithm::alltoall}) {
      CAPTURE(int(setting));  // alltoall: one equal-count all-to-all where both dims divide (else all-to-all-v)
      // Automatic: only where each tensor's own switch would copy (else each moves on its own).
      const dsp::detail::PackedItem items[3] = {{nullptr, nullptr, 4}, {nullptr, nullptr, 4}, {nullptr, nullptr, 4}};
      const bool packed = !dsp::detail::packed_separately(dsp::detail::PackedArgs{items, g, 0, 2, dsp::Wire::exact}, n,
                                                          dsp::detail::capabilities_of<C>(), setting);
      AlgorithmScope scope(setting);
      comm.reset();
      auto [q2, k2, v2] = dsp::dynamic_switch<2>(dsp::batch(q, k, v));
      CHECK(count_wrong(q2) + count_wrong(k2) + count_wrong(v2) == 0);
      const auto counts = comm.counts();
      CHECK(counts.control <= 1);
      CHECK(counts.bytes_sent == model.bytes);
      if (n > 1 && packed && dsp::detail::product(g) > 0) {
        const bool p2p = setting == dsp::SwitchAlgorithm::automatic;
        CHECK(counts.collectives() == 1);
        CHECK(counts.exchange == (p2p ? 1u : 0u));
        CHECK(counts.all_to_all == (p2p ? 0u : 1u));
      }
    }
  }
}

TEST_CASE("a packed chunk goes as the fewest equal messages under the eager limit, never more than sections") {
  using dsp::detail::kEagerMessageBytes;
  using dsp::detail::packed_message_bytes;
  CHECK(packed_message_bytes(6144, 3) == 3072);    // three 2 KiB sections: two eager messages, not three
  CHECK(packed_message_bytes(3000, 3) == 3000);    // the whole chunk is eager
  CHECK(packed_message_bytes(98304, 3) == 32768);  // large sections: one message each
  CHECK(packed_message_bytes(8500, 5) == 2125);    // three messages would not divide it evenly: four
  std::mt19937 rng(83);
  for (int c = 0; c < 2000; ++c) {
    const std::size_t sections = 2 + rng() % 7, section = 1 + rng() % 9000, chunk = sections * section;
    const std::size_t m = packed_message_bytes(chunk, sections);
    CAPTURE(chunk);
    CAPTURE(sections);
    CHECK(chunk % m == 0);
    CHECK(chunk / m <= sections);
    CHECK((m <= kEagerMessageBytes || m == section));
    for (std::size_t k = 1; k < chunk / m; ++k)  // no fewer messages would be even and eager
      CHECK((chunk > k * kEagerMessageBytes || chunk % k != 0));
  }
}

TEST_CASE("batches whose chunks are cut into fewer messages than sections: every tensor's data in place") {
  // Four float tensors with chunks of a few KiB per peer, cut into fewer
  // messages than sections. Each tensor holds its own values, so a section
  // delivered into the wrong tensor is seen.
  const int n = world().size();
  const std::size_t un = std::size_t(n);
  bool spans = false;
  for (const std::array<std::size_t, 3> g :
       {std::array<std::size_t, 3>{un, 5 * un, 65}, {un + 1, 5 * un + 2, 65}, {2 * un, 7 * un, 97}}) {
    CAPTURE(g[0]);
    CAPTURE(g[1]);
    CAPTURE(g[2]);
    std::array<T3<float, dsp::Sharded<0>>, 4> in{
        T3<float, dsp::Sharded<0>>{world(), g}, {world(), g}, {world(), g}, {world(), g}};
    auto value = [&](std::size_t t, const std::array<std::size_t, 3>& at) {
      return float(linear(at, g) % 100000) + 100000.0f * float(t + 1);
    };
    for (std::size_t t = 0; t < 4; ++t) {
      float* p = in[t].local().data();
      for_each_local(in[t], [&](auto&, auto& at, std::size_t k) { p[k] = value(t, at); });
    }
    auto [a, b, c, d] = dsp::dynamic_switch<1>(dsp::batch(in[0], in[1], in[2], in[3]));
    const T3<float, dsp::Sharded<1>>* out[4] = {&a, &b, &c, &d};
    std::size_t wrong = 0;
    for (std::size_t t = 0; t < 4; ++t) {
      const float* p = out[t]->local().data();
      for_each_local(*out[t], [&](auto&, auto& at, std::size_t k) { wrong += p[k] != value(t, at); });
    }
    CHECK(wrong == 0);
    // Where the batch packs (small even shapes; the others move each tensor on
    // its own plan), note whether a chunk was cut into messages that are
    // neither sections nor the whole chunk.
    const dsp::detail::PackedItem items[4] = {
        {nullptr, nullptr, 4}, {nullptr, nullptr, 4}, {nullptr, nullptr, 4}, {nullptr, nullptr, 4}};
    const auto plan =
        dsp::detail::plan_packed(dsp::detail::PackedArgs{items, g, 0, 1, dsp::Wire::exact}, world().rank(), n,
                                 dsp::detail::capabilities_of<dsp::MpiCommunicator>(), dsp::SwitchAlgorithm::automatic);
    for (const auto& m : plan.section_sends) spans = spans || (m.piece != m.elems / 4 && m.piece != m.elems);
  }
  if (n > 1) CHECK(spans);  // [n, 5n, 65]: chunks of 4 x 1,300 bytes go as two messages of 2,600
}

TEST_CASE("batch errors reach every rank; the inputs are unchanged") {
  const int me = world().rank(), n = world().size();
  const std::array<std::size_t, 3> g{6, 5, 4}, other{6, 5, 5};
  T3<float, dsp::Sharded<0>> q{world(), g}, k{world(), g};
  fill(q), fill(k);
  // Extents that differ within a batch move blocking, exact or on a wire (tests/test_cuts.cpp, and on a
  // mesh tests/test_mesh_mixed.cpp); split-phase they are refused.
  SUBCASE("extents of one tensor differ from the others, split-phase") {
    T3<float, dsp::Sharded<0>> bad{world(), other};
    T3<float, dsp::Sharded<1>> yq{world(), g}, yb{world(), other};
    fill(bad);
    const std::string e = error_of([&] {
      auto h = dsp::start_redistribute<dsp::Sharded<1>>(dsp::batch(q, bad), dsp::batch(yq, yb), dsp::Wire::bf16);
      h.wait();
    });
    CHECK(e.find("different extents moves blocking (redistribute, dynamic_switch; exact or on a wire), not "
                 "split-phase") != std::string::npos);
    CHECK(count_wrong(bad) == 0);
  }
  SUBCASE("only the last rank's batch mixes extents: every rank is told the batch's extents disagree") {
    T3<float, dsp::Sharded<0>> w{world(), me == n - 1 ? other : g};
    fill(w);
    const std::string e = error_of([&] { (void)dsp::dynamic_switch<1>(dsp::batch(q, k, w)); });
    if (n > 1) CHECK(e.find("the extents (or Blocks sizes) of the batch's tensors disagree") != std::string::npos);
    if (n == 1) CHECK(e.empty());  // one rank: a batch of other extents, which moves
    CHECK(e.find("output tensor is invalid") == std::string::npos);
    CHECK(count_wrong(q) + count_wrong(k) + count_wrong(w) == 0);
  }
  SUBCASE("one rank's batch has other extents than the other ranks'") {
    T3<float, dsp::Sharded<0>> r{world(), me == n - 1 ? other : g}, s{world(), me == n - 1 ? other : g};
    fill(r), fill(s);
    const std::string e = error_of([&] { (void)dsp::dynamic_switch<1>(dsp::batch(r, s)); });
    if (n > 1) CHECK(e.find("global extents disagree") != std::string::npos);
    CHECK(count_wrong(r) + count_wrong(s) == 0);
  }
  SUBCASE("two outputs of the batch are one tensor") {
    T3<float, dsp::Sharded<1>> q2{world(), g};
    const std::string e = error_of([&] { dsp::dynamic_switch<1>(dsp::batch(q, k), dsp::batch(q2, q2)); });
    if (q2.local_size() > 0) CHECK(e.find("shares memory with output") != std::string::npos);
    CHECK(count_wrong(q) + count_wrong(k) == 0);
  }
  SUBCASE("a rank asks for a different wire type") {
    T3<float, dsp::Sharded<1>> q2{world(), g}, k2{world(), g};
    const dsp::Wire w = me == 0 ? dsp::Wire::bf16 : dsp::Wire::exact;
    const std::string e = error_of([&] { dsp::dynamic_switch<1>(dsp::batch(q, k), dsp::batch(q2, k2), w); });
    if (n > 1) CHECK(e.find("wire types disagree") != std::string::npos);
    CHECK(count_wrong(q) + count_wrong(k) == 0);
  }
  SUBCASE("a low-precision wire for a batch with a non-float tensor") {
    T3<std::int32_t, dsp::Sharded<0>> i{world(), g};
    fill(i);
    const std::string e = error_of([&] { (void)dsp::dynamic_switch<1>(dsp::batch(q, i), dsp::Wire::fp16); });
    CHECK(e.find("the fp16 wire carries float, double, dsp::bfloat16 and dsp::float16 tensors; tensor 1 of the "
                 "batch holds another element type, which travels exact only") != std::string::npos);
    CHECK(count_wrong(i) == 0);
  }
  SUBCASE("a local allocation failure on one rank") {
    if (me == n - 1) dsp::detail::injected_faults() = 1;
    T3<float, dsp::Sharded<1>> q2{world(), g}, k2{world(), g};
    const std::string e = error_of([&] { dsp::dynamic_switch<1>(dsp::batch(q, k), dsp::batch(q2, k2)); });
    dsp::detail::injected_faults() = 0;
    CHECK(!e.empty());
    CHECK(count_wrong(q) + count_wrong(k) == 0);
  }
  // The communicator is still usable after every error above.
  auto [a, b] = dsp::dynamic_switch<2>(dsp::batch(q, k));
  CHECK(count_wrong(a) + count_wrong(b) == 0);
}
