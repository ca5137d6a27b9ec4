// SPDX-License-Identifier: BSD-3-Clause
// Joint attention over text and video tokens (MM-DiT style; docs/attention.md,
// "Joint text and video attention"): the video tokens [B, Sv, H, d] are
// sharded along the sequence, the text tokens [B, St, H, d] are on every rank
// (Replicated). For the attention, the video's q, k and v switch to the heads
// (one all-to-all for the three, a batch), the text's are cut to the same
// heads locally (split: no communication), every rank attends its heads over
// the text and video tokens together, then the video output switches back to
// the sequence and the text output is gathered to every rank. Checked against
// the same attention on one rank; the bytes each rank sends against their
// closed form.
//
//   mpiexec -n 4 ./attention_joint [Sv] [St]      (defaults: 29 5; H = 6)
#include "../help.hpp"
#include "attend.hpp"

#include <dsp/comm/counting.hpp>
#include <dsp/mpi.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using Comm = dsp::CountingCommunicator<dsp::MpiCommunicator>;
template <class L>
using Tokens = dsp::DistTensor<float, 4, L, Comm>;  // [B, sequence, heads, d]
using G4 = std::array<std::size_t, 4>;

namespace {

// The inputs, by global index; `which` tells q, k, v apart and `text` the text tokens.
float input(int which, bool text, const G4& g) {
  const double x = double(g[0] * 5 + g[1] * 3 + g[2] * 7 + g[3]) + (text ? 101.0 : 0.0);
  return float(std::sin(0.05 * x * double(which + 1) + double(which)));
}

}  // namespace

constexpr const char* kUsage =
    "usage: mpiexec -n N attention_joint [Sv] [St]\n"
    "  Joint attention over sharded video tokens and replicated text tokens (docs/attention.md).\n"
    "  Sv: video tokens (default 29), St: text tokens (default 5); H = 6.";

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (example::asked_for_help(argc, argv, kUsage)) {
    MPI_Finalize();
    return 0;
  }
  Kokkos::initialize(argc, argv);
  int failed = 0;
  {
    Comm comm{dsp::MpiCommunicator{MPI_COMM_WORLD}};
    const int n = comm.size();
    std::size_t Sv = 0, St = 0;
    const bool speak = comm.rank() == 0;
    if (!attention::count_arg(argc, argv, 1, 0, 29, Sv, "Sv", speak) ||
        !attention::count_arg(argc, argv, 2, 0, 5, St, "St", speak)) {
      Kokkos::finalize();
      MPI_Finalize();
      return 2;
    }
    const std::size_t B = 2, H = 6, d = 8;
    const G4 gv{B, Sv, H, d}, gt{B, St, H, d};

    Tokens<dsp::Sharded<1>> qv0{comm, gv}, kv0{comm, gv}, vv0{comm, gv};
    Tokens<dsp::Replicated> qt0{comm, gt}, kt0{comm, gt}, vt0{comm, gt};
    dsp::fill(qv0, [](const G4& g) { return input(0, false, g); });
    dsp::fill(kv0, [](const G4& g) { return input(1, false, g); });
    dsp::fill(vv0, [](const G4& g) { return input(2, false, g); });
    dsp::fill(qt0, [](const G4& g) { return input(0, true, g); });
    dsp::fill(kt0, [](const G4& g) { return input(1, true, g); });
    dsp::fill(vt0, [](const G4& g) { return input(2, true, g); });
    comm.reset();

    // To the heads: the video's three in one all-to-all, the text's by a local cut.
    auto [qv, kv, vv] = dsp::dynamic_switch<2>(dsp::batch(qv0, kv0, vv0));
    auto qt = dsp::split<2>(qt0), kt = dsp::split<2>(kt0), vt = dsp::split<2>(vt0);

    // This rank's heads over the text tokens, then the video tokens.
    Tokens<dsp::Sharded<2>> ov{comm, gv}, ot{comm, gt};
    const auto Qv = qv.local(), Kv = kv.local(), Vv = vv.local(), Qt = qt.local(), Kt = kt.local(), Vt = vt.local();
    const auto Ov = ov.local(), Ot = ot.local();
    auto pick = [St](const auto& text, const auto& video) {
      return [&, St](std::size_t b, std::size_t j, std::size_t h, std::size_t e) {
        return j < St ? text(b, j, h, e) : video(b, j - St, h, e);
      };
    };
    attention::attend(B, St + Sv, qv.local_extents()[2], d, St + Sv, pick(Qt, Qv), pick(Kt, Kv), pick(Vt, Vv),
                      [&](std::size_t b, std::size_t i, std::size_t h, std::size_t e) -> float& {
                        return i < St ? Ot(b, i, h, e) : Ov(b, i - St, h, e);
                      });

    // Back: the video output to the sequence, the text output to every rank.
    auto out_v = dsp::dynamic_switch<1>(ov);
    auto out_t = dsp::gather(ot);
    const std::size_t sent = comm.counts().bytes_sent;

    // The same attention on one rank.
    using Full = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
    const std::size_t S = St + Sv;
    Full q("q", B, S, H, d), k("k", B, S, H, d), v("v", B, S, H, d), o("o", B, S, H, d);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t e = 0; e < d; ++e) {
            const bool text = s < St;
            const G4 g{b, text ? s : s - St, h, e};
            q(b, s, h, e) = input(0, text, g), k(b, s, h, e) = input(1, text, g), v(b, s, h, e) = input(2, text, g);
          }
    attention::attend(B, S, H, d, S, q, k, v, o);
    double err = 0;
    dsp::for_each(out_v, [&](const G4& g, const float& x) {
      err = std::max(err, double(std::abs(x - o(g[0], g[1] + St, g[2], g[3]))));
    });
    dsp::for_each(out_t, [&](const G4& g, const float& x) {
      err = std::max(err, double(std::abs(x - o(g[0], g[1], g[2], g[3]))));
    });
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    // What this rank sends: the video's q, k, v but its own heads' part, its heads' output but its own
    // sequence block's, and its heads' text output to every other rank.
    const std::size_t s_r = qv0.local_extents()[1], h_r = qv.local_extents()[2];
    const std::size_t closed =
        sizeof(float) * B * d * (3 * s_r * (H - h_r) + (Sv - s_r) * h_r + std::size_t(n - 1) * St * h_r);
    const int wrong = sent != closed;
    int any_wrong = 0;
    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (comm.rank() == 0)
      std::printf(
          "joint attention on %d ranks: %zu text + %zu video tokens, %zu heads; rank 0 sent %zu bytes "
          "(closed form %zu); max |error| vs one rank %.2e\n",
          n, St, Sv, H, sent, closed, err);
    failed = err > 1e-5 || any_wrong;
    if (failed && comm.rank() == 0) std::printf("FAILED\n");
  }
  Kokkos::finalize();
  MPI_Finalize();
  return failed;
}
