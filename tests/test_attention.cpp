// SPDX-License-Identifier: BSD-3-Clause
// The layouts of long-sequence attention (docs/attention.md). GQA's
// replicate-to-fill: on the mesh dsp::gqa_mesh_shape(N, H_kv) = {N / g, g},
// K and V [B, S, H_kv, d] go from the sequence sharded over every rank to
// their heads (a head group per column, on its N / g ranks), Q [B, S, H, d]
// to its heads along axis 1 only, so that every rank holds the key/value
// heads of its query heads: exact against the serial reference for uneven
// sequences, at the fewest bytes that can do it (each rank receives only
// what it lacks of its heads' whole sequence), at the cost model's count.
// The mesh the other way round ({g, N / g}, Axes<Sharded<heads>, Replicated>)
// is exact too, at more bytes: pinned here as docs/attention.md states it.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

using namespace dsp_test;
using dsp::Axes;
using dsp::Replicated;
using dsp::Sharded;

namespace {

using T = std::int32_t;
using Counted = dsp::CountingCommunicator<dsp::MpiCommunicator>;
using M = dsp::Mesh<2, Counted>;
using Seq = Axes<Sharded<1>, Sharded<1>>;      // [B, S, H, d]: the sequence over every rank
using KvHeads = Axes<Replicated, Sharded<2>>;  // K, V: a head group per column, whole on its ranks
using QHeads = Axes<Sharded<1>, Sharded<2>>;   // Q: the column's query heads, the sequence down it

std::size_t bytes_sent(const M& m) { return m.axis(0).counts().bytes_sent + m.axis(1).counts().bytes_sent; }
void reset(const M& m) {
  for (std::size_t a = 0; a < 2; ++a) {
    Counted ax = m.axis(a);  // a copy shares the axis's counts
    ax.reset();
  }
}

}  // namespace

TEST_CASE("gqa_mesh_shape: {gcd(h_kv, n), n / gcd}") {
  using S2 = std::array<int, 2>;
  CHECK(dsp::gqa_mesh_shape(8, 2) == S2{4, 2});  // n a multiple of h_kv: one head per column, on 4 ranks
  CHECK(dsp::gqa_mesh_shape(6, 3) == S2{2, 3});
  CHECK(dsp::gqa_mesh_shape(4, 8) == S2{1, 4});  // h_kv a multiple of n: no replication (plain Ulysses)
  CHECK(dsp::gqa_mesh_shape(6, 4) == S2{3, 2});  // neither: 2 heads per column, on 3 ranks
  CHECK(dsp::gqa_mesh_shape(5, 1) == S2{5, 1});  // MQA: the one head everywhere
  CHECK(error_of([] { (void)dsp::gqa_mesh_shape(0, 2); }).find("at least 1") != std::string::npos);
  CHECK(error_of([] { (void)dsp::gqa_mesh_shape(4, 0); }).find("at least 1") != std::string::npos);
}

TEST_CASE("GQA replicate-to-fill: K and V to their heads, Q beside them, exact and at the fewest bytes") {
  const int n = world().size();
  Counted cw{world()};
  for (const std::size_t h_kv : {1, 2, 3, 4, 8})
    for (const std::size_t s : {13, 7, 2}) {
      const auto shape = dsp::gqa_mesh_shape(n, int(h_kv));
      CAPTURE(n);
      CAPTURE(h_kv);
      CAPTURE(s);
      M m{cw, shape};
      const std::size_t b = 2, d = 3, h = 2 * h_kv, per_group = h_kv / std::size_t(shape[1]);
      dsp::DistTensor<T, 4, Seq, M> k{m, {b, s, h_kv, d}}, v{m, {b, s, h_kv, d}}, q{m, {b, s, h, d}};
      fill(k), fill(v), fill(q);
      reset(m);
      auto kh = dsp::redistribute<KvHeads>(k);
      const std::size_t sent = bytes_sent(m);
      CHECK(count_wrong(kh) == 0);
      CHECK(kh.local_extents()[1] == s);  // the whole sequence
      CHECK(kh.local_extents()[2] == per_group);
      // The fewest bytes: this rank lacks its heads' sequence but for its own block.
      const std::size_t lacks = b * d * per_group * (s - k.local_extents()[1]) * sizeof(T);
      INFO("plan ", dsp::redistribute_plan<Seq, KvHeads, 4>::text());
      CHECK(sum_all(sent) == sum_all(lacks));
      const auto model =
          dsp::redistribute_plan<Seq, KvHeads, 4>::cost(k.global_extents(), sizeof(T), m.shape(), m.coords());
      CHECK(sent == model.bytes);
      // K and V in one batch: one exchange, the same blocks.
      auto [k2, v2] = dsp::redistribute<KvHeads>(dsp::batch(k, v));
      CHECK(count_wrong(k2) == 0);
      CHECK(count_wrong(v2) == 0);
      // Q: this rank's query heads are served by its key/value heads (head qh uses kv head qh / (h / h_kv)).
      auto qh = dsp::redistribute<QHeads>(q);
      CHECK(count_wrong(qh) == 0);
      const std::size_t group = h / h_kv, q0 = qh.local_offsets()[2], k0 = kh.local_offsets()[2];
      for (std::size_t x = q0; x < q0 + qh.local_extents()[2]; ++x) {
        CHECK(x / group >= k0);
        CHECK(x / group < k0 + per_group);
      }
      // And back: the reverse switches restore the sequence layout.
      CHECK(count_wrong(dsp::redistribute<Seq>(kh)) == 0);
      CHECK(count_wrong(dsp::redistribute<Seq>(qh)) == 0);

      // The mesh the other way round: exact, at the cost model's count, which is more than the fewest
      // (its plan first moves axis 1's shard off the sequence: an extra all-to-all).
      M t{cw, {shape[1], shape[0]}};
      dsp::DistTensor<T, 4, Seq, M> kt{t, {b, s, h_kv, d}};
      fill(kt);
      reset(t);
      using Transposed = Axes<Sharded<2>, Replicated>;
      auto kth = dsp::redistribute<Transposed>(kt);
      const std::size_t sent_t = bytes_sent(t);
      CHECK(count_wrong(kth) == 0);
      CHECK(sent_t ==
            dsp::redistribute_plan<Seq, Transposed, 4>::cost(kt.global_extents(), sizeof(T), t.shape(), t.coords())
                .bytes);
      const std::size_t lacks_t = b * d * per_group * (s - kt.local_extents()[1]) * sizeof(T);
      CHECK(sum_all(sent_t) >= sum_all(lacks_t));
    }
}
