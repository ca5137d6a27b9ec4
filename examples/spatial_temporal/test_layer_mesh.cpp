// SPDX-License-Identifier: BSD-3-Clause
// The data parallel x sequence parallel layer (st::dpsp_layer) on every 2-D
// mesh of the ranks (DP x SP = N), against the single-rank layer, with uneven
// and empty blocks (B smaller than DP, T and S smaller than SP); its counted
// collectives and bytes per mesh axis against redistribute_plan's cost: all of
// it on the SP axis, nothing on the DP axis.
#include "layer.hpp"

#include <doctest/doctest.h>

#include <functional>

#include <cmath>

namespace {

st::Counting& world() {
  static st::Counting c{dsp::MpiCommunicator{MPI_COMM_WORLD}};
  return c;
}

/// Every DP x SP shape with DP * SP = n.
std::vector<std::array<int, 2>> shapes(int n) {
  std::vector<std::array<int, 2>> out;
  for (int dp = 1; dp <= n; ++dp)
    if (n % dp == 0) out.push_back({dp, n / dp});
  return out;
}

std::vector<float> input(const st::Config& c) {
  std::vector<float> x(c.tokens() * c.C);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = float(std::sin(0.37 * double(k)) + 0.25 * double(k % 5));
  return x;
}

std::vector<float> reference(const st::Config& c, const st::Weights& w) {
  auto x = input(c);
  st::reference_layer(x.data(), c, w);
  return x;
}

std::size_t max_all(std::size_t v) {
  unsigned long long in = v, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return std::size_t(out);
}

struct MeshResult {
  float block_err = 0;  // this rank's block against the reference's box
  float whole_err = 0;  // the gathered output against the reference
  std::array<dsp::CommCounts, 2> axis;
  dsp::CommCounts world;
  std::array<std::size_t, 4> extents{}, offsets{};
};

using MeshLayer = std::function<st::MeshAct<st::DpSpT>(st::MeshContext&, const st::MeshAct<st::DpSpT>&,
                                                       const st::Config&, const st::Weights&)>;

/// Runs a mesh layer (dpsp_layer by default) on the input split over the
/// mesh; the counts are the layer's only.
MeshResult run(st::MeshContext& cx, const st::Config& c, const st::Weights& w, const std::vector<float>& ref,
               const MeshLayer& layer = st::dpsp_layer) {
  using Whole = st::MeshAct<dsp::Axes<dsp::Replicated, dsp::Replicated>>;
  Whole xr{cx.mesh, {c.B, c.T, c.S, c.C}};
  const auto in = input(c);
  std::copy(in.begin(), in.end(), xr.local().data());
  auto x = dsp::redistribute<st::DpSpT>(xr);  // two local splits
  cx.reset();
  auto y = layer(cx, x, c, w);
  MeshResult r;
  r.axis = {cx.counts(0), cx.counts(1)};
  r.world = cx.world_counts();
  r.extents = y.local_extents();
  r.offsets = y.local_offsets();
  dsp::for_each(y, [&](const auto& g, float v) {  // this rank's block against the reference, by global index
    const std::size_t l = ((g[0] * c.T + g[1]) * c.S + g[2]) * c.C + g[3];
    r.block_err = std::max(r.block_err, std::fabs(v - ref[l]));
  });
  auto out = dsp::redistribute<dsp::Axes<dsp::Replicated, dsp::Replicated>>(y);  // gathers on axes 1 and 0
  for (std::size_t g = 0; g < ref.size(); ++g)
    r.whole_err = std::max(r.whole_err, std::fabs(out.local().data()[g] - ref[g]));
  return r;
}

}  // namespace

TEST_CASE("DP x SP: the layer on every 2-D mesh equals the single-rank layer; bytes per axis as the cost model") {
  const int n = world().size();
  // Uneven B, T and S; B smaller than DP (empty blocks on the DP axis) in the
  // third and fourth; T and S smaller than SP (empty blocks on the SP axis) in
  // the fourth at SP >= 3.
  for (const st::Config c : {st::Config{3, 5, 4, 8, 4, 16}, st::Config{4, 7, 3, 12, 4, 8},
                             st::Config{1, 4, 6, 8, 2, 16}, st::Config{2, 2, 2, 8, 4, 8}}) {
    const auto w = st::make_weights(c);
    const auto ref = reference(c, w);
    for (const auto& shape : shapes(n)) {
      INFO("B T S C H F = ", c.B, " ", c.T, " ", c.S, " ", c.C, " ", c.H, " ", c.F, "; mesh DP x SP = ", shape[0],
           " x ", shape[1]);
      st::MeshContext cx{world(), shape};
      const auto co = cx.mesh.coords();
      const MeshResult r = run(cx, c, w, ref);
      CHECK(r.block_err < 1e-4f);
      CHECK(r.whole_err < 1e-4f);
      // This rank's block is its box of B (over DP) and T (over SP).
      const dsp::Partition pb{c.B, std::size_t(shape[0])}, pt{c.T, std::size_t(shape[1])};
      CHECK(r.extents ==
            std::array<std::size_t, 4>{pb.count(std::size_t(co[0])), pt.count(std::size_t(co[1])), c.S, c.C});
      CHECK(r.offsets ==
            std::array<std::size_t, 4>{pb.offset(std::size_t(co[0])), pt.offset(std::size_t(co[1])), 0, 0});
      // Counted = model, per axis; nothing on the DP axis, nothing on the world communicator.
      const st::PredictedMesh pred = st::predicted_mesh_bytes(c, shape, co);
      CHECK(r.axis[0].bytes_sent == pred.bytes[0]);
      CHECK(r.axis[1].bytes_sent == pred.bytes[1]);
      CHECK(r.axis[0].bytes_sent == 0);
      CHECK(r.axis[0].collectives() == 0);
      CHECK(r.axis[1].collectives() == pred.collectives);
      CHECK(r.world.collectives() == 0);
      CHECK(r.world.bytes_sent == 0);
      CHECK(max_all(r.axis[0].bytes_sent + r.axis[1].bytes_sent) == pred.max_bytes);
      // Two switches, exactly one all-to-all each, where this DP group holds
      // data and SP > 1 (a group of empty blocks communicates nothing).
      const bool moves = shape[1] > 1 && pb.count(std::size_t(co[0])) > 0;
      CHECK(pred.collectives == (moves ? 2u : 0u));
      CHECK(r.axis[1].all_to_all + r.axis[1].exchange == pred.collectives);
      // Each rank sends what 1-D DSP on its DP group's B/DP samples would.
      st::Config local = c;
      local.B = pb.count(std::size_t(co[0]));
      CHECK(r.axis[1].bytes_sent == st::predicted_bytes(local, std::size_t(shape[1]), std::size_t(co[1])).dsp);
    }
  }
}

TEST_CASE("DP x SP: one DP group is the 1-D DSP layer, one SP group sends nothing") {
  const int n = world().size(), p = world().rank();
  const st::Config c{2, 6, 5, 8, 4, 16};
  const auto w = st::make_weights(c);
  const auto ref = reference(c, w);
  {
    st::MeshContext cx{world(), {1, n}};
    const MeshResult r = run(cx, c, w, ref);
    CHECK(r.whole_err < 1e-4f);
    CHECK(r.axis[1].bytes_sent == st::predicted_bytes(c, std::size_t(n), std::size_t(p)).dsp);
  }
  {
    st::MeshContext cx{world(), {n, 1}};
    const MeshResult r = run(cx, c, w, ref);
    CHECK(r.whole_err < 1e-4f);
    CHECK(r.axis[0].bytes_sent + r.axis[1].bytes_sent == 0);
    CHECK(r.axis[0].collectives() + r.axis[1].collectives() == 0);
  }
}

TEST_CASE("DP x SP tuned: compute on arrival equals the layer; bf16 switches move the model's wire bytes") {
  const int n = world().size();
  for (const st::Config c : {st::Config{3, 5, 4, 8, 4, 16}, st::Config{2, 2, 2, 8, 4, 8}}) {
    const auto w = st::make_weights(c);
    const auto ref = reference(c, w);
    const std::array<std::size_t, 4> g4{c.B, c.T, c.S, c.C};
    for (const auto& shape : shapes(n)) {
      INFO("B T S C = ", c.B, " ", c.T, " ", c.S, " ", c.C, "; mesh DP x SP = ", shape[0], " x ", shape[1]);
      st::MeshContext cx{world(), shape};
      const auto co = cx.mesh.coords();
      auto tuned = [](st::Tuning t) {
        return MeshLayer([t](st::MeshContext& m, const st::MeshAct<st::DpSpT>& x, const st::Config& cc,
                             const st::Weights& ww) { return st::dpsp_layer_tuned(m, x, cc, ww, t); });
      };
      const MeshResult exact = run(cx, c, w, ref, tuned({dsp::Wire::exact, true}));
      CHECK(exact.whole_err < 1e-4f);
      CHECK(exact.axis[1].bytes_sent == st::predicted_mesh_bytes(c, shape, co).bytes[1]);
      using To = dsp::redistribute_plan<st::DpSpT, st::DpSpS, 4>;
      using Back = dsp::redistribute_plan<st::DpSpS, st::DpSpT, 4>;
      const std::size_t bf16 =
          To::cost(g4, 4, shape, co, dsp::Wire::bf16).bytes + Back::cost(g4, 4, shape, co, dsp::Wire::bf16).bytes;
      for (bool overlap : {false, true}) {
        const MeshResult b = run(cx, c, w, ref, tuned({dsp::Wire::bf16, overlap}));
        CHECK(b.axis[0].bytes_sent == 0);
        CHECK(b.axis[1].bytes_sent == bf16);
        CHECK(b.whole_err < 0.1f);
      }
    }
  }
}

TEST_CASE("DP x SP Ulysses: q, k, v as one batch on the SP axis; equal to the layer; bytes as the model") {
  const int n = world().size();
  for (const st::Config c : {st::Config{3, 5, 4, 8, 4, 16}, st::Config{2, 4, 3, 8, 2, 8}}) {
    const auto w = st::make_weights(c);
    const auto ref = reference(c, w);
    const std::array<std::size_t, 5> g5{c.B, c.T, c.S, c.H, c.head_dim()};
    using QT = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>;
    using QH = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<3>>;
    for (const auto& shape : shapes(n)) {
      INFO("B T S C H = ", c.B, " ", c.T, " ", c.S, " ", c.C, " ", c.H, "; mesh DP x SP = ", shape[0], " x ", shape[1]);
      st::MeshContext cx{world(), shape};
      if (std::size_t(shape[1]) > c.H) {
        CHECK_THROWS_AS(run(cx, c, w, ref,
                            [](auto& m, const auto& x, const auto& cc,
                               const auto& ww) { return st::dpsp_ulysses_layer(m, x, cc, ww); }),
                        dsp::InvalidArgument);
        continue;
      }
      const auto co = cx.mesh.coords();
      for (auto wire : {dsp::Wire::exact, dsp::Wire::bf16}) {
        const MeshResult r = run(cx, c, w, ref, [wire](auto& m, const auto& x, const auto& cc, const auto& ww) {
          return st::dpsp_ulysses_layer(m, x, cc, ww, wire);
        });
        const std::size_t model = 3 * dsp::redistribute_plan<QT, QH, 5>::cost(g5, 4, shape, co, wire).bytes +
                                  dsp::redistribute_plan<QH, QT, 5>::cost(g5, 4, shape, co, wire).bytes;
        CHECK(r.axis[0].bytes_sent == 0);
        CHECK(r.axis[1].bytes_sent == model);
        CHECK(r.whole_err < (wire == dsp::Wire::exact ? 1e-4f : 0.1f));
      }
    }
  }
}
