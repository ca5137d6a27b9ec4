// SPDX-License-Identifier: BSD-3-Clause
// A 2-D (spatial-temporal) transformer layer, as in the DSP paper's appendix
// A.1, on the host with Kokkos, and four sequence-parallel versions of it:
//
//   input x[B, T, S, C]
//   spatial block:  x += MHSA_S(LN(x));  x += MLP(LN(x))   attention over S
//   temporal block: x += MHSA_T(LN(x));  x += MLP(LN(x))   attention over T
//
//   dsp_layer       T sharded for the spatial block, dsp switch to S for the
//                   temporal block, switch back (2 all-to-alls)
//   ulysses_layer   T sharded; in the temporal block q, k, v go to head
//                   sharding in one batched all-to-all (dsp::batch) and
//                   the output comes back (the bytes of 4 all-to-alls in 2)
//   megatron_layer  T sharded with tensor-parallel attention and MLP weights:
//                   all-gather before and reduce-scatter after attention and
//                   after the MLP, in both blocks (8 collectives, all dsp:
//                   gather, and redistribute of a Partial<Sum> tensor to
//                   Sharded<1>)
//   ring_layer      T sharded; in the temporal block k and v travel around
//                   the ring (N - 1 steps), with online softmax
//   dpsp_layer      data parallel x sequence parallel on a 2-D mesh: one
//                   tensor Axes<Sharded<0>, Sharded<1>> (B over the DP axis 0,
//                   T over the SP axis 1); dsp_layer's two switches, on the SP
//                   axis only (2 all-to-alls on mesh.axis(1), none on axis 0);
//                   dpsp_layer_tuned adds dsp_layer_tuned's wire and overlap
//   dpsp_ulysses_layer  Ulysses on the same mesh: q, k, v to head sharding on
//                   the SP axis as one dsp::batch (one collective), optionally
//                   on a wire
//
// Every version starts and ends with x Sharded<1> (T split in blocks, as dsp
// partitions; dpsp_layer: Axes<Sharded<0>, Sharded<1>>). The communication lands in the block that attends over the
// sharded dim (the temporal one); sharding S instead would move it to the
// spatial block, with the same volume. Weights come from a fixed seed, so
// every rank builds the same ones.
//
// Traffic counts bytes each rank sends to OTHER ranks: collectives made by
// dsp go through a dsp::CountingCommunicator. Only the ring exchange
// (MPI_Sendrecv between neighbours, which is not a dsp primitive) is made and
// counted by hand here, with the same rule.
#pragma once

#include <dsp/batch.hpp>
#include <dsp/model/transformer.hpp>
#include <dsp/mpi.hpp>

#include <Kokkos_Core.hpp>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace st {

using Counting = dsp::CountingCommunicator<dsp::MpiCommunicator>;
template <class L>
using Act = dsp::DistTensor<float, 4, L, Counting>;  // [B, T, S, C]
using Exec = Kokkos::DefaultHostExecutionSpace;

/// Shapes of one layer. C must be divisible by H.
struct Config {
  std::size_t B = 1, T = 8, S = 8, C = 16, H = 4, F = 64;  // F: MLP hidden width
  std::size_t head_dim() const { return C / H; }
  std::size_t tokens() const { return B * T * S; }
  /// M of the paper's Table 3: bytes of one activation tensor [B, T, S, C] in float32.
  std::size_t activation_bytes() const { return tokens() * C * sizeof(float); }
};

/// Weights of one block (row-major; a token row times a [in, out] matrix).
struct BlockWeights {
  std::vector<float> ln1_g, ln1_b, wq, wk, wv, wo, bo, ln2_g, ln2_b, w1, b1, w2, b2;
};

/// Uniform in [-a, a] from a fixed 64-bit LCG: the same on every rank.
inline void fill_uniform(std::vector<float>& w, std::size_t n, float a, std::uint64_t& state) {
  w.resize(n);
  for (auto& x : w) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = double(state >> 11) / double(1ull << 53);
    x = float((2 * u - 1) * a);
  }
}

inline BlockWeights make_block(const Config& c, std::uint64_t seed) {
  BlockWeights w;
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  const float ac = 1.0f / std::sqrt(float(c.C)), af = 1.0f / std::sqrt(float(c.F));
  fill_uniform(w.ln1_g, c.C, 0.1f, s);
  for (auto& g : w.ln1_g) g += 1;
  fill_uniform(w.ln1_b, c.C, 0.1f, s);
  fill_uniform(w.wq, c.C * c.C, ac, s);
  fill_uniform(w.wk, c.C * c.C, ac, s);
  fill_uniform(w.wv, c.C * c.C, ac, s);
  fill_uniform(w.wo, c.C * c.C, ac, s);
  fill_uniform(w.bo, c.C, 0.1f, s);
  fill_uniform(w.ln2_g, c.C, 0.1f, s);
  for (auto& g : w.ln2_g) g += 1;
  fill_uniform(w.ln2_b, c.C, 0.1f, s);
  fill_uniform(w.w1, c.C * c.F, ac, s);
  fill_uniform(w.b1, c.F, 0.1f, s);
  fill_uniform(w.w2, c.F * c.C, af, s);
  fill_uniform(w.b2, c.C, 0.1f, s);
  return w;
}

/// The layer's weights: a spatial and a temporal block.
struct Weights {
  BlockWeights spatial, temporal;
};
inline Weights make_weights(const Config& c, std::uint64_t seed = 2025) {
  if (c.H == 0 || c.C % c.H != 0 || c.F == 0)
    throw dsp::InvalidArgument("st::make_weights: C must be a positive multiple of the head count H, and F > 0");
  return {make_block(c, seed), make_block(c, seed + 1)};
}

/// Messages and bytes one rank sent to other ranks.
struct Traffic {
  std::size_t ops = 0;    // collectives (and ring steps)
  std::size_t bytes = 0;  // bytes sent to other ranks
};

/// Adds the wall time from its construction to its destruction to `total`.
struct AddTime {
  double& total;
  double t0 = MPI_Wtime();
  ~AddTime() { total += MPI_Wtime() - t0; }
};

/// What a strategy needs: the counting communicator (for dsp) and the raw MPI
/// communicator with a counter (for the ring exchange, which dsp does not provide).
struct Context {
  Counting comm;
  MPI_Comm raw;
  Traffic manual;
  double comm_seconds = 0;  // wall time spent in communication (and its packing)
  explicit Context(MPI_Comm c) : comm(dsp::MpiCommunicator{c}), raw(c) {}
  int rank() const { return comm.rank(); }
  int size() const { return comm.size(); }
  void reset() {
    comm.reset();
    manual = {};
    comm_seconds = 0;
  }
  /// Runs f() and adds its wall time to comm_seconds.
  template <class F>
  decltype(auto) timed(F&& f) {
    const AddTime add{comm_seconds};
    return f();
  }
  Traffic traffic() const {
    return {comm.counts().collectives() + manual.ops, comm.counts().bytes_sent + manual.bytes};
  }
};

// ---------------------------------------------------------------- kernels ----

/// Token-wise layer norm: y[t] = LN(x[t]) over C.
inline void layer_norm(const float* x, float* y, std::size_t n, std::size_t C, const std::vector<float>& g,
                       const std::vector<float>& b) {
  const float* gp = g.data();
  const float* bp = b.data();
  Kokkos::parallel_for("st::layer_norm", Kokkos::RangePolicy<Exec>(0, n), [=](std::size_t t) {
    const float* r = x + t * C;
    float mean = 0, var = 0;
    for (std::size_t c = 0; c < C; ++c) mean += r[c];
    mean /= float(C);
    for (std::size_t c = 0; c < C; ++c) var += (r[c] - mean) * (r[c] - mean);
    const float inv = 1.0f / std::sqrt(var / float(C) + 1e-5f);
    for (std::size_t c = 0; c < C; ++c) y[t * C + c] = (r[c] - mean) * inv * gp[c] + bp[c];
  });
}

/// y[t, 0:n1-n0] = x[t, 0:K] * w[0:K, n0:n1] (w has `ldw` columns) (+ bias[n0:n1]).
inline void linear(const float* x, std::size_t n, std::size_t K, const float* w, std::size_t ldw, std::size_t n0,
                   std::size_t n1, const float* bias, float* y) {
  const std::size_t m = n1 - n0;
  Kokkos::parallel_for("st::linear", Kokkos::RangePolicy<Exec>(0, n), [=](std::size_t t) {
    float* out = y + t * m;
    for (std::size_t j = 0; j < m; ++j) out[j] = bias ? bias[n0 + j] : 0.0f;
    for (std::size_t k = 0; k < K; ++k) {
      const float a = x[t * K + k];
      const float* wr = w + k * ldw + n0;
      for (std::size_t j = 0; j < m; ++j) out[j] += a * wr[j];
    }
  });
}

inline void gelu(float* x, std::size_t n) {
  Kokkos::parallel_for("st::gelu", Kokkos::RangePolicy<Exec>(0, n), [=](std::size_t i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
  });
}

/// Shape of a local activation block [B, T', S', width] and the axis attention runs over.
struct Grid {
  std::size_t B, T, S;
  std::size_t axis;  // 1: over T (temporal), 2: over S (spatial)
  std::size_t len() const { return axis == 1 ? T : S; }
  std::size_t stride() const { return axis == 1 ? S : 1; }  // token step along the axis
  std::size_t sequences() const { return B * (axis == 1 ? S : T); }
  std::size_t first(std::size_t seq) const {  // token index of position 0 of sequence seq
    if (axis == 1) return (seq / S) * T * S + seq % S;
    return seq * S;  // (b, t) -> b * T * S + t * S
  }
};

/// Online-softmax state of `heads` heads of every token in a block.
struct SoftmaxState {
  std::vector<float> m, l, acc;  // [token, head], [token, head], [token, head * d]
  SoftmaxState(std::size_t tokens, std::size_t heads, std::size_t d)
      : m(tokens * heads, -std::numeric_limits<float>::infinity()), l(tokens * heads, 0.0f),
        acc(tokens * heads * d, 0.0f) {}
};

/// Attention of queries in grid gq against the keys / values in grid gk (the
/// same sequences; a key block may be a slice of the axis), for `heads` heads
/// of size d stored at column offset 0 of rows of width `ld`. Accumulates into
/// `st` with online softmax; finish() divides.
inline void attend(const float* q, const float* k, const float* v, std::size_t ld, std::size_t heads, std::size_t d,
                   const Grid& gq, const Grid& gk, SoftmaxState& st) {
  const float scale = 1.0f / std::sqrt(float(d));
  const std::size_t lq = gq.len(), lk = gk.len();
  float* M = st.m.data();
  float* Lp = st.l.data();
  float* A = st.acc.data();
  Kokkos::parallel_for("st::attend", Kokkos::RangePolicy<Exec>(0, gq.sequences() * heads), [=](std::size_t w) {
    const std::size_t seq = w / heads, h = w % heads;
    const std::size_t q0 = gq.first(seq), k0 = gk.first(seq);
    std::vector<float> sc(lk);
    for (std::size_t i = 0; i < lq; ++i) {
      const std::size_t tq = q0 + i * gq.stride();
      const float* qr = q + tq * ld + h * d;
      float mb = -std::numeric_limits<float>::infinity();
      for (std::size_t j = 0; j < lk; ++j) {
        const float* kr = k + (k0 + j * gk.stride()) * ld + h * d;
        float s = 0;
        for (std::size_t e = 0; e < d; ++e) s += qr[e] * kr[e];
        sc[j] = s * scale;
        mb = std::max(mb, sc[j]);
      }
      if (lk == 0) continue;
      const std::size_t sidx = tq * heads + h;
      const float mnew = std::max(M[sidx], mb);
      const float corr = std::exp(M[sidx] - mnew);  // 0 on the first block (M = -inf)
      float* a = A + sidx * d;
      for (std::size_t e = 0; e < d; ++e) a[e] *= corr;
      float lsum = Lp[sidx] * corr;
      for (std::size_t j = 0; j < lk; ++j) {
        const float p = std::exp(sc[j] - mnew);
        lsum += p;
        const float* vr = v + (k0 + j * gk.stride()) * ld + h * d;
        for (std::size_t e = 0; e < d; ++e) a[e] += p * vr[e];
      }
      Lp[sidx] = lsum;
      M[sidx] = mnew;
    }
  });
}

/// o[t, h * d + e] = acc / l (rows of width ld = heads * d).
inline void finish(const SoftmaxState& st, std::size_t tokens, std::size_t heads, std::size_t d, float* o) {
  const float* Lp = st.l.data();
  const float* A = st.acc.data();
  Kokkos::parallel_for("st::finish", Kokkos::RangePolicy<Exec>(0, tokens * heads), [=](std::size_t w) {
    const float inv = Lp[w] > 0 ? 1.0f / Lp[w] : 0.0f;
    for (std::size_t e = 0; e < d; ++e) o[w * d + e] = A[w * d + e] * inv;
  });
}

inline void add(float* x, const float* y, std::size_t n) {
  Kokkos::parallel_for("st::add", Kokkos::RangePolicy<Exec>(0, n), [=](std::size_t i) { x[i] += y[i]; });
}

/// x[t, j] += b[j] for n tokens of width C; fences.
inline void add_bias(float* x, std::size_t n, std::size_t C, const std::vector<float>& b) {
  Kokkos::parallel_for("st::bias", Kokkos::RangePolicy<Exec>(0, n), [=, bp = b.data()](std::size_t t) {
    for (std::size_t j = 0; j < C; ++j) x[t * C + j] += bp[j];
  });
  Exec().fence();
}

/// out = MLP(h) for n tokens without the output bias, over hidden columns
/// [f0, f1) only (all of them unless tensor parallel: then a partial sum).
inline void mlp_partial(const float* h, std::size_t n, const Config& c, const BlockWeights& w, std::size_t f0,
                        std::size_t f1, float* out) {
  std::vector<float> u(n * (f1 - f0));
  linear(h, n, c.C, w.w1.data(), c.F, f0, f1, w.b1.data(), u.data());
  gelu(u.data(), u.size());
  linear(u.data(), n, f1 - f0, w.w2.data() + f0 * c.C, c.C, 0, c.C, nullptr, out);
}

/// q, k, v = h Wq, h Wk, h Wv for heads [h0, h1): rows of width (h1 - h0) * d.
inline void qkv(const float* h, std::size_t n, const Config& c, const BlockWeights& w, std::size_t h0, std::size_t h1,
                float* q, float* k, float* v) {
  const std::size_t d = c.head_dim();
  linear(h, n, c.C, w.wq.data(), c.C, h0 * d, h1 * d, nullptr, q);
  linear(h, n, c.C, w.wk.data(), c.C, h0 * d, h1 * d, nullptr, k);
  linear(h, n, c.C, w.wv.data(), c.C, h0 * d, h1 * d, nullptr, v);
}

/// The rest of a block once the attention output o (n tokens, heads merged) is
/// known: output projection, residual, layer norm, MLP, residual. h and y are
/// n * C scratch buffers.
inline void finish_block(float* x, const float* o, std::size_t n, const Config& c, const BlockWeights& w, float* h,
                         float* y) {
  const std::size_t C = c.C;
  linear(o, n, C, w.wo.data(), C, 0, C, w.bo.data(), y);
  add(x, y, n * C);
  layer_norm(x, h, n, C, w.ln2_g, w.ln2_b);
  mlp_partial(h, n, c, w, 0, c.F, y);
  add(x, y, n * C);
  add_bias(x, n, C, w.b2);
}

/// A whole block on a local block x of grid g whose attention axis is whole:
/// no communication.
inline void local_block(float* x, const Grid& g, const Config& c, const BlockWeights& w) {
  const std::size_t n = g.B * g.T * g.S, C = c.C, d = c.head_dim();
  std::vector<float> h(n * C), q(n * C), k(n * C), v(n * C), o(n * C), y(n * C);
  layer_norm(x, h.data(), n, C, w.ln1_g, w.ln1_b);
  qkv(h.data(), n, c, w, 0, c.H, q.data(), k.data(), v.data());
  SoftmaxState st(n, c.H, d);
  attend(q.data(), k.data(), v.data(), C, c.H, d, g, g, st);
  finish(st, n, c.H, d, o.data());
  finish_block(x, o.data(), n, c, w, h.data(), y.data());
}

// ------------------------------------------------------------ the layers ----

/// The single-rank reference, in place on a whole [B, T, S, C] tensor.
inline void reference_layer(float* x, const Config& c, const Weights& w) {
  local_block(x, Grid{c.B, c.T, c.S, 2}, c, w.spatial);
  local_block(x, Grid{c.B, c.T, c.S, 1}, c, w.temporal);
}

inline std::size_t local_T(const Config& c, int rank, int size) {
  return dsp::Partition{c.T, std::size_t(size)}.count(std::size_t(rank));
}

/// How dsp_layer_tuned communicates (issue-12 features; the defaults are dsp_layer).
struct Tuning {
  dsp::Wire wire = dsp::Wire::exact;  ///< wire type of the switches (bf16 halves their bytes)
  bool overlap = false;               ///< layer norm and q, k, v of the temporal block on each block as it lands
                                      ///< (a split-phase switch, on the same wire)
};

/// The first half of a block on the rows [r0, r1) of x (n_rows tokens each
/// C wide, contiguous): h = LN1(x), and q, k, v of all heads.
inline void block_front(const float* x, std::size_t r0, std::size_t r1, const Config& c, const BlockWeights& w,
                        float* h, float* q, float* k, float* v) {
  const std::size_t C = c.C, n = r1 - r0;
  layer_norm(x + r0 * C, h + r0 * C, n, C, w.ln1_g, w.ln1_b);
  qkv(h + r0 * C, n, c, w, 0, c.H, q + r0 * C, k + r0 * C, v + r0 * C);
}

/// DSP: spatial block on Sharded<1>, switch to Sharded<2>, temporal block,
/// switch back. Returns the new Sharded<1> activation. With `t.overlap`, the
/// switch to Sharded<2> reports each peer's block of T as it lands
/// (dsp::switch_each), and the temporal block's layer norm and q, k, v
/// projections run on that block's tokens while the other blocks travel;
/// attention over T starts once all have landed.
inline Act<dsp::Sharded<1>> dsp_layer_tuned(Context& ctx, const Act<dsp::Sharded<1>>& x, const Config& c,
                                            const Weights& w, Tuning t) {
  const int p = ctx.rank(), n = ctx.size();
  auto y = dsp::dynamic_switch<1>(x);  // a copy (no communication): x stays unchanged
  local_block(y.local().data(), Grid{c.B, local_T(c, p, n), c.S, 2}, c, w.spatial);
  const std::size_t Sl = dsp::Partition{c.S, std::size_t(n)}.count(std::size_t(p));
  const Grid g{c.B, c.T, Sl, 1};
  if (!t.overlap) {
    auto z = ctx.timed([&] { return dsp::dynamic_switch<2>(y, t.wire); });  // all-to-all: T whole, S split
    local_block(z.local().data(), g, c, w.temporal);
    ctx.timed([&] { dsp::dynamic_switch<1>(z, y, t.wire); });  // all-to-all back
    return y;
  }
  Act<dsp::Sharded<2>> z{ctx.comm, {c.B, c.T, c.S, c.C}};
  const std::size_t rows = c.B * c.T * Sl, C = c.C, d = c.head_dim();
  std::vector<float> h(rows * C), q(rows * C), k(rows * C), v(rows * C), o(rows * C), r(rows * C);
  float* zp = z.local().data();
  // Each landed block holds T rows [t0, t0 + Tq) of every b: Sl tokens per (b, t), contiguous.
  auto on_block = [&](const auto& block, const auto& offsets, int) {
    for (std::size_t b = 0; b < block.extent(0); ++b)
      for (std::size_t tt = offsets[1]; tt < offsets[1] + block.extent(1); ++tt)
        block_front(zp, (b * c.T + tt) * Sl, (b * c.T + tt + 1) * Sl, c, w.temporal, h.data(), q.data(), k.data(),
                    v.data());
  };
  ctx.timed([&] { dsp::redistribute_each<dsp::Sharded<2>>(y, z, on_block, t.wire); });
  SoftmaxState st(rows, c.H, d);
  attend(q.data(), k.data(), v.data(), C, c.H, d, g, g, st);
  finish(st, rows, c.H, d, o.data());
  finish_block(zp, o.data(), rows, c, w.temporal, h.data(), r.data());
  ctx.timed([&] { dsp::dynamic_switch<1>(z, y, t.wire); });  // all-to-all back
  return y;
}

inline Act<dsp::Sharded<1>> dsp_layer(Context& ctx, const Act<dsp::Sharded<1>>& x, const Config& c, const Weights& w) {
  return dsp_layer_tuned(ctx, x, c, w, Tuning{});
}

/// Thrown by the head-parallel methods when N exceeds the number of heads.
inline void require_heads(const Config& c, int n, const char* who) {
  if (std::size_t(n) > c.H)
    throw dsp::InvalidArgument(std::string(who) + ": " + std::to_string(n) + " ranks but only " + std::to_string(c.H) +
                               " heads; this method shards heads, so N <= heads");
}

/// DeepSpeed-Ulysses: temporal attention on head-sharded q, k, v gathered over
/// T with all-to-alls (dsp switches of [B, T, S, H, d] from Sharded<1> to
/// Sharded<3>), and the output back.
inline Act<dsp::Sharded<1>> ulysses_layer(Context& ctx, const Act<dsp::Sharded<1>>& x, const Config& c,
                                          const Weights& w) {
  require_heads(c, ctx.size(), "ulysses_layer");
  using Heads1 = dsp::DistTensor<float, 5, dsp::Sharded<1>, Counting>;
  const int p = ctx.rank(), n = ctx.size();
  const std::size_t Tl = local_T(c, p, n), nt = c.B * Tl * c.S, C = c.C, d = c.head_dim();
  auto y = dsp::dynamic_switch<1>(x);
  float* xp = y.local().data();
  local_block(xp, Grid{c.B, Tl, c.S, 2}, c, w.spatial);
  // temporal block
  const std::array<std::size_t, 5> g5{c.B, c.T, c.S, c.H, d};
  Heads1 q{ctx.comm, g5}, k{ctx.comm, g5}, v{ctx.comm, g5};
  std::vector<float> h(nt * C);
  layer_norm(xp, h.data(), nt, C, w.temporal.ln1_g, w.temporal.ln1_b);
  qkv(h.data(), nt, c, w.temporal, 0, c.H, q.local().data(), k.local().data(), v.local().data());
  Exec().fence();
  // q, k and v to head sharding in one collective (a dsp::batch).
  auto [qh, kh, vh] = ctx.timed([&] { return dsp::dynamic_switch<3>(dsp::batch(q, k, v)); });
  const std::size_t Hl = qh.local_extents()[3];
  dsp::DistTensor<float, 5, dsp::Sharded<3>, Counting> oh{ctx.comm, g5};
  {
    const std::size_t ntok = c.B * c.T * c.S;
    SoftmaxState st(ntok, Hl, d);
    const Grid g{c.B, c.T, c.S, 1};
    attend(qh.local().data(), kh.local().data(), vh.local().data(), Hl * d, Hl, d, g, g, st);
    finish(st, ntok, Hl, d, oh.local().data());
    Exec().fence();
  }
  auto o1 = ctx.timed([&] { return dsp::dynamic_switch<1>(oh); });  // back to T sharded, all heads
  std::vector<float> r(nt * C);
  linear(o1.local().data(), nt, C, w.temporal.wo.data(), C, 0, C, w.temporal.bo.data(), r.data());
  add(xp, r.data(), nt * C);
  layer_norm(xp, h.data(), nt, C, w.temporal.ln2_g, w.temporal.ln2_b);
  mlp_partial(h.data(), nt, c, w.temporal, 0, c.F, r.data());
  add(xp, r.data(), nt * C);
  add_bias(xp, nt, C, w.temporal.b2);
  return y;
}

/// Megatron-SP: sequence-sharded (T) layer norms and residuals; per block,
/// all-gather over T before attention, attention with this rank's heads,
/// reduce-scatter over T; all-gather before the MLP with this rank's hidden
/// columns, reduce-scatter after. Every collective is dsp's: the all-gathers
/// are dsp::gather (Sharded<1> -> Replicated); the partial sums (this rank's
/// heads or hidden columns) are written into a Partial<Sum> tensor, and
/// dsp::redistribute<Sharded<1>> reduce-scatters them over T (one
/// reduce-scatter, exact for uneven blocks of T).
inline Act<dsp::Sharded<1>> megatron_layer(Context& ctx, const Act<dsp::Sharded<1>>& x, const Config& c,
                                           const Weights& w) {
  require_heads(c, ctx.size(), "megatron_layer");
  const int p = ctx.rank(), n = ctx.size();
  const dsp::Partition ph{c.H, std::size_t(n)}, pf{c.F, std::size_t(n)};
  const std::size_t h0 = ph.offset(p), h1 = h0 + ph.count(p), f0 = pf.offset(p), f1 = f0 + pf.count(p);
  const std::size_t Tl = local_T(c, p, n), nt = c.B * Tl * c.S, C = c.C, d = c.head_dim(), Hl = h1 - h0;
  const std::size_t N = c.tokens();
  auto y = dsp::dynamic_switch<1>(x);
  float* xp = y.local().data();
  Act<dsp::Sharded<1>> hs{ctx.comm, {c.B, c.T, c.S, c.C}};
  Act<dsp::Replicated> hf{ctx.comm, {c.B, c.T, c.S, c.C}};
  Act<dsp::Partial<>> part{ctx.comm, {c.B, c.T, c.S, c.C}};  // this rank's term of a sum over ranks
  Act<dsp::Sharded<1>> r{ctx.comm, {c.B, c.T, c.S, c.C}};    // the sum, this rank's block of T
  std::vector<float> q(N * Hl * d), k(q.size()), v(q.size()), o(q.size());
  for (int blk = 0; blk < 2; ++blk) {
    const BlockWeights& bw = blk == 0 ? w.spatial : w.temporal;
    layer_norm(xp, hs.local().data(), nt, C, bw.ln1_g, bw.ln1_b);
    Exec().fence();
    ctx.timed([&] { dsp::gather(hs, hf); });  // all-gather over T
    qkv(hf.local().data(), N, c, bw, h0, h1, q.data(), k.data(), v.data());
    SoftmaxState st(N, Hl, d);
    const Grid g{c.B, c.T, c.S, std::size_t(blk == 0 ? 2 : 1)};
    attend(q.data(), k.data(), v.data(), Hl * d, Hl, d, g, g, st);
    finish(st, N, Hl, d, o.data());
    linear(o.data(), N, Hl * d, bw.wo.data() + h0 * d * C, C, 0, C, nullptr, part.local().data());
    Exec().fence();
    ctx.timed([&] { dsp::redistribute<dsp::Sharded<1>>(part, r); });  // reduce-scatter over T
    add(xp, r.local().data(), nt * C);
    add_bias(xp, nt, C, bw.bo);
    layer_norm(xp, hs.local().data(), nt, C, bw.ln2_g, bw.ln2_b);
    Exec().fence();
    ctx.timed([&] { dsp::gather(hs, hf); });
    mlp_partial(hf.local().data(), N, c, bw, f0, f1, part.local().data());
    Exec().fence();
    ctx.timed([&] { dsp::redistribute<dsp::Sharded<1>>(part, r); });
    add(xp, r.local().data(), nt * C);
    add_bias(xp, nt, C, bw.b2);
  }
  return y;
}

/// Ring-Attention: temporal attention with the k and v blocks passed around
/// the ring, N - 1 steps, merged with online softmax.
inline Act<dsp::Sharded<1>> ring_layer(Context& ctx, const Act<dsp::Sharded<1>>& x, const Config& c, const Weights& w) {
  const int p = ctx.rank(), n = ctx.size();
  const dsp::Partition pt{c.T, std::size_t(n)};
  const std::size_t Tl = pt.count(p), nt = c.B * Tl * c.S, C = c.C, d = c.head_dim();
  auto y = dsp::dynamic_switch<1>(x);
  float* xp = y.local().data();
  local_block(xp, Grid{c.B, Tl, c.S, 2}, c, w.spatial);
  const BlockWeights& bw = w.temporal;
  const std::size_t maxblk = c.B * pt.count(0) * c.S * C;  // rank 0's block is the largest
  std::vector<float> h(nt * C), q(nt * C), kv(2 * maxblk), next(2 * maxblk), o(nt * C), r(nt * C);
  layer_norm(xp, h.data(), nt, C, bw.ln1_g, bw.ln1_b);
  {
    std::vector<float> k(nt * C), v(nt * C);
    qkv(h.data(), nt, c, bw, 0, c.H, q.data(), k.data(), v.data());
    Exec().fence();
    std::copy(k.begin(), k.end(), kv.begin());
    std::copy(v.begin(), v.end(), kv.begin() + std::ptrdiff_t(nt * C));
  }
  SoftmaxState st(nt, c.H, d);
  const Grid gq{c.B, Tl, c.S, 1};
  for (int s = 0; s < n; ++s) {
    const int src = (p - s + n) % n;  // whose k, v this rank holds now
    const std::size_t Ts = pt.count(src), blk = c.B * Ts * c.S * C;
    attend(q.data(), kv.data(), kv.data() + blk, C, c.H, d, gq, Grid{c.B, Ts, c.S, 1}, st);
    Exec().fence();
    if (s + 1 < n) {
      const int from = (p - s - 1 + 2 * n) % n;
      const std::size_t nblk = c.B * pt.count(from) * c.S * C;
      // The received block is laid out as k then v, each nblk long.
      // Not a dsp primitive (a neighbour exchange, not a redistribution): plain
      // MPI on the raw communicator, counted by hand.
      ctx.timed([&] {
        DSP_CHECK_MPI(MPI_Sendrecv(kv.data(), int(2 * blk), MPI_FLOAT, (p + 1) % n, 7, next.data(), int(2 * nblk),
                                   MPI_FLOAT, (p - 1 + n) % n, 7, ctx.raw, MPI_STATUS_IGNORE));
      });
      ctx.manual.ops += 1;
      ctx.manual.bytes += 2 * blk * sizeof(float);
      std::swap(kv, next);
    }
  }
  finish(st, nt, c.H, d, o.data());
  finish_block(xp, o.data(), nt, c, bw, h.data(), r.data());
  return y;
}

// ----------------------------------------- data x sequence parallel mesh ----

/// A 2-D mesh of the ranks: axis 0 data parallel (DP: B split), axis 1
/// sequence parallel (SP: T split for the spatial block, S for the temporal
/// one). Row-major: the SP ranks of one DP group are consecutive.
using Mesh2 = dsp::Mesh<2, Counting>;
template <class L>
using MeshAct = dsp::DistTensor<float, 4, L, Mesh2>;        // [B, T, S, C] on the mesh
using DpSpT = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>;  // B over DP, T over SP
using DpSpS = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<2>>;  // B over DP, S over SP

/// What the mesh layer needs: the mesh (whose axis communicators count their
/// own collectives and bytes) and the time spent communicating.
struct MeshContext {
  Mesh2 mesh;
  double comm_seconds = 0;
  /// Collective over `world`: splits it into the axis communicators.
  MeshContext(const Counting& world, const std::array<int, 2>& shape) : mesh(world, shape) {}
  /// What axis a's communicator counted (a = 0: DP, 1: SP).
  const dsp::CommCounts& counts(std::size_t a) const { return mesh.axis(a).counts(); }
  /// What the world communicator counted: only the agreement checks' control
  /// messages, as every data collective runs on an axis.
  const dsp::CommCounts& world_counts() const { return mesh.world().counts(); }
  void reset() {
    for (std::size_t a = 0; a < 2; ++a) {
      Counting c = mesh.axis(a);  // a copy shares the counts
      c.reset();
    }
    Counting w = mesh.world();
    w.reset();
    comm_seconds = 0;
  }
  template <class F>
  decltype(auto) timed(F&& f) {
    const AddTime add{comm_seconds};
    return f();
  }
};

/// DSP with data parallelism, as one tensor on a DP x SP mesh: the spatial
/// block on the local block [B/DP, T/SP, S, C]; one switch on the SP axis
/// (Axes<Sharded<0>, Sharded<1>> -> Axes<Sharded<0>, Sharded<2>>: one
/// all-to-all among the SP ranks of each DP group, nothing on the DP axis);
/// the temporal block on [B/DP, T, S/SP, C]; the switch back. Weights are
/// replicated (the same seed on every rank). Returns the new activation.
inline MeshAct<DpSpT> dpsp_layer(MeshContext& ctx, const MeshAct<DpSpT>& x, const Config& c, const Weights& w) {
  auto y = dsp::redistribute<DpSpT>(x);  // a copy (no communication): x stays unchanged
  const auto ey = y.local_extents();     // {B/DP, T/SP, S, C}
  local_block(y.local().data(), Grid{ey[0], ey[1], ey[2], 2}, c, w.spatial);
  auto z = ctx.timed([&] { return dsp::redistribute_axis<1, dsp::Sharded<2>>(y); });  // all-to-all on axis 1
  const auto ez = z.local_extents();                                                  // {B/DP, T, S/SP, C}
  local_block(z.local().data(), Grid{ez[0], ez[1], ez[2], 1}, c, w.temporal);
  ctx.timed([&] { dsp::redistribute<DpSpT>(z, y); });  // back: the one-step plan, axis 1 again
  return y;
}

/// dpsp_layer with dsp_layer_tuned's options, on the mesh: `t.wire` for both
/// switches; `t.overlap`: the switch to DpSpS reports each SP peer's block
/// of T as it lands (dsp::redistribute_each), and the temporal block's layer
/// norm and q, k, v run on that block's tokens while the others travel.
inline MeshAct<DpSpT> dpsp_layer_tuned(MeshContext& ctx, const MeshAct<DpSpT>& x, const Config& c, const Weights& w,
                                       Tuning t) {
  auto y = dsp::redistribute<DpSpT>(x);  // a copy: x stays unchanged
  const auto ey = y.local_extents();     // {B/DP, T/SP, S, C}
  local_block(y.local().data(), Grid{ey[0], ey[1], ey[2], 2}, c, w.spatial);
  MeshAct<DpSpS> z{ctx.mesh, {c.B, c.T, c.S, c.C}};
  const auto ez = z.local_extents();  // {B/DP, T, S/SP, C}
  const Grid g{ez[0], ez[1], ez[2], 1};
  if (!t.overlap) {
    ctx.timed([&] { dsp::redistribute<DpSpS>(y, z, t.wire); });
    local_block(z.local().data(), g, c, w.temporal);
  } else {
    const std::size_t Bl = ez[0], Sl = ez[2], rows = Bl * c.T * Sl, C = c.C, d = c.head_dim();
    std::vector<float> h(rows * C), q(rows * C), k(rows * C), v(rows * C), o(rows * C), r(rows * C);
    float* zp = z.local().data();
    ctx.timed([&] {
      dsp::redistribute_each<DpSpS>(
          y, z,
          [&](const auto& block, const auto& offsets, int) {
        // The block holds T rows [offsets[1], + extent(1)) of every local b: Sl tokens per (b, t).
        for (std::size_t b = 0; b < block.extent(0); ++b)
          for (std::size_t tt = offsets[1]; tt < offsets[1] + block.extent(1); ++tt)
            block_front(zp, (b * c.T + tt) * Sl, (b * c.T + tt + 1) * Sl, c, w.temporal, h.data(), q.data(), k.data(),
                        v.data());
          },
          t.wire);
    });
    SoftmaxState st(rows, c.H, d);
    attend(q.data(), k.data(), v.data(), C, c.H, d, g, g, st);
    finish(st, rows, c.H, d, o.data());
    finish_block(zp, o.data(), rows, c, w.temporal, h.data(), r.data());
  }
  ctx.timed([&] { dsp::redistribute<DpSpT>(z, y, t.wire); });  // back
  return y;
}

/// DeepSpeed-Ulysses with data parallelism on the DP x SP mesh: the spatial
/// block on [B/DP, T/SP, S, C]; in the temporal block q, k and v
/// ([B, T, S, H, d], B over DP, T over SP) go to head sharding on the SP axis
/// in ONE collective (a dsp::batch of three tensors, optionally on a wire),
/// attention over all of T with this rank's heads, and the output back. The
/// DP axis never communicates. N is capped by the heads on the SP axis only.
inline MeshAct<DpSpT> dpsp_ulysses_layer(MeshContext& ctx, const MeshAct<DpSpT>& x, const Config& c, const Weights& w,
                                         dsp::Wire wire = dsp::Wire::exact) {
  require_heads(c, ctx.mesh.shape()[1], "dpsp_ulysses_layer");
  using QT = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>;  // [B, T, S, H, d]: B over DP, T over SP
  using QH = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<3>>;  // B over DP, heads over SP
  using Heads = dsp::DistTensor<float, 5, QT, Mesh2>;
  static_assert(dsp::redistribute_plan<QT, QH, 5>::size() == 1 && dsp::redistribute_plan<QT, QH, 5>::step(0).axis == 1,
                "q, k, v go to head sharding in one step on the SP axis");
  auto y = dsp::redistribute<DpSpT>(x);
  const auto ey = y.local_extents();  // {B/DP, T/SP, S, C}
  float* xp = y.local().data();
  local_block(xp, Grid{ey[0], ey[1], ey[2], 2}, c, w.spatial);
  const std::size_t nt = ey[0] * ey[1] * ey[2], C = c.C, d = c.head_dim();
  const std::array<std::size_t, 5> g5{c.B, c.T, c.S, c.H, d};
  Heads q{ctx.mesh, g5}, k{ctx.mesh, g5}, v{ctx.mesh, g5};
  std::vector<float> h(nt * C);
  layer_norm(xp, h.data(), nt, C, w.temporal.ln1_g, w.temporal.ln1_b);
  qkv(h.data(), nt, c, w.temporal, 0, c.H, q.local().data(), k.local().data(), v.local().data());
  Exec().fence();
  auto [qh, kh, vh] = ctx.timed([&] { return dsp::redistribute<QH>(dsp::batch(q, k, v), wire); });
  const auto eh = qh.local_extents();  // {B/DP, T, S, H/SP, d}
  const std::size_t Hl = eh[3];
  dsp::DistTensor<float, 5, QH, Mesh2> oh{ctx.mesh, g5};
  {
    const std::size_t ntok = eh[0] * c.T * c.S;
    SoftmaxState st(ntok, Hl, d);
    const Grid g{eh[0], c.T, c.S, 1};
    attend(qh.local().data(), kh.local().data(), vh.local().data(), Hl * d, Hl, d, g, g, st);
    finish(st, ntok, Hl, d, oh.local().data());
    Exec().fence();
  }
  auto o1 = ctx.timed([&] { return dsp::redistribute<QT>(oh, wire); });  // back to T over SP, all heads
  std::vector<float> r(nt * C);
  linear(o1.local().data(), nt, C, w.temporal.wo.data(), C, 0, C, w.temporal.bo.data(), r.data());
  add(xp, r.data(), nt * C);
  layer_norm(xp, h.data(), nt, C, w.temporal.ln2_g, w.temporal.ln2_b);
  mlp_partial(h.data(), nt, c, w.temporal, 0, c.F, r.data());
  add(xp, r.data(), nt * C);
  add_bias(xp, nt, C, w.temporal.b2);
  return y;
}

// ----------------------------------------------------- predicted traffic ----

/// Bytes rank p of n sends per layer, by strategy: dsp::model::layer_traffic,
/// which prices every strategy with dsp's cost model (switches for DSP and
/// Ulysses, transition_cost and redistribute_plan's cost for Megatron-SP's
/// all-gathers and reduce-scatters, ring_pass_cost for the ring). The same
/// function gives dsp-plan its bytes, so the tests that compare these with
/// the counted bytes check the advisor's traffic too.
struct Predicted {
  std::size_t dsp, ulysses, megatron, ring;
};
inline Predicted predicted_bytes(const Config& c, std::size_t n, std::size_t p) {
  namespace m = dsp::model;
  // Megatron-SP wraps 4 sub-blocks: each block's attention and MLP.
  const m::LayerShape shape{c.B, c.T, c.S, c.C, c.H, sizeof(float), 4};
  return {m::layer_traffic(m::Strategy::dsp, shape, n, p).bytes(),
          m::layer_traffic(m::Strategy::ulysses, shape, n, p).bytes(),
          m::layer_traffic(m::Strategy::megatron_sp, shape, n, p).bytes(),
          m::layer_traffic(m::Strategy::ring, shape, n, p).bytes()};
}

/// Bytes the rank at `coords` of a DP x SP mesh of `shape` sends per layer
/// with dpsp_layer, per mesh axis, and collectives, from redistribute_plan's
/// exact cost on the mesh; max_bytes: the largest total over the mesh's ranks.
struct PredictedMesh {
  std::array<std::size_t, 2> bytes{};  // [DP axis, SP axis]
  std::size_t collectives = 0, max_bytes = 0;
};
inline PredictedMesh predicted_mesh_bytes(const Config& c, const std::array<int, 2>& shape,
                                          const std::array<int, 2>& coords) {
  using To = dsp::redistribute_plan<DpSpT, DpSpS, 4>;
  using Back = dsp::redistribute_plan<DpSpS, DpSpT, 4>;
  static_assert(To::size() == 1 && To::step(0).axis == 1 && Back::size() == 1 && Back::step(0).axis == 1,
                "each switch is one step on the SP axis");
  const std::array<std::size_t, 4> g4{c.B, c.T, c.S, c.C};
  const auto to = To::cost(g4, sizeof(float), shape, coords), back = Back::cost(g4, sizeof(float), shape, coords);
  PredictedMesh r;
  for (const auto& rc : {to, back}) {
    for (std::size_t k = 0; k < rc.size; ++k) r.bytes[std::size_t(rc.steps[k].step.axis)] += rc.steps[k].bytes;
    r.collectives += rc.collectives;
  }
  // The largest total over ranks: the same pipeline priced on the mesh.
  namespace stp = dsp::steps;
  constexpr auto pipe = stp::to<DpSpS> | stp::to<DpSpT>;
  r.max_bytes = pipe.cost<DpSpT>(g4, sizeof(float), shape, coords).max_bytes;
  return r;
}

}  // namespace st
