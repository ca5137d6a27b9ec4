// SPDX-License-Identifier: BSD-3-Clause
// dsp's benchmark suite (Google Benchmark, custom MPI main).
//
// For each shape, in one run: dsp's dynamic_switch into an existing output,
// raw MPI_Alltoall of the same bytes, MPI_Alltoallw with subarray datatypes,
// FFTW-MPI's transpose (where the switch is a 2-D transpose), memcpy of the
// local block; gather (into and allocating) against raw MPI_Allgather; and the
// latency of a switch of a few KiB with the agreement check on, off, and on
// first calls only (AgreementMode::first_call), and split-phase (start and
// wait at once: the in-flight guard's cost); a
// batch of Q, K and V against three switches and three raw MPI_Alltoall of
// the same bytes (4 KiB to 64 MiB per tensor and rank), under each planning
// mode and under AgreementMode::first_call; each low-precision wire against float (1 to 256 MiB per rank); and
// the planning groups: dsp under each planning mode against each algorithm
// forced, on shapes no threshold was tuned on.
//
// Every iteration is timed on every rank between a barrier and an
// MPI_Allreduce(MAX): the reported time is the slowest rank's, identical on
// all ranks, so Google Benchmark picks the same iteration count everywhere.
// Only rank 0 prints. Then every group runs again with its methods
// interleaved, one iteration each per round, and rank 0 prints the median over
// rounds of each method's time divided by the reference's (MPI_Alltoall, or
// MPI_Allgather for gather) in the same round. --benchmark_filter also limits
// the ratio table to the groups it selects.
#include "common.hpp"

#include <dsp/batch.hpp>

#include <benchmark/benchmark.h>
#include <fftw3-mpi.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using Comm = dsp::MpiCommunicator;
using dsp_bench::median;
using dsp_bench::time_max;

MPI_Comm world() { return MPI_COMM_WORLD; }
Comm& comm() {
  static Comm c{MPI_COMM_WORLD};
  return c;
}

struct Result {
  double median_s = 0;
  double bytes = 0;
};
std::map<std::string, Result>& results() {
  static std::map<std::string, Result> r;
  return r;
}
std::vector<std::string>& order() {
  static std::vector<std::string> o;
  return o;
}
/// Reference method of a group when it is not MPI_Alltoall / MPI_Allgather.
std::map<std::string, std::string>& references() {
  static std::map<std::string, std::string> r;
  return r;
}
using Make = std::function<std::function<void()>()>;
std::map<std::string, Make>& makers() {
  static std::map<std::string, Make> m;
  return m;
}

std::string shape_text(const std::vector<std::size_t>& g) {
  std::string t = "[";
  for (std::size_t d = 0; d < g.size(); ++d) {
    if (d) t += ',';
    t += std::to_string(g[d]);
  }
  return t + "]";
}

/// Registers one benchmark; `bytes` is what one rank moves (its local block).
/// `make` runs once per benchmark run and returns the timed step.
void add(const std::string& group, const std::string& method, double bytes,
         std::function<std::function<void()>()> make) {
  const std::string name = group + "/" + method;
  if (std::find(order().begin(), order().end(), group) == order().end()) order().push_back(group);
  makers()[name] = make;
  benchmark::RegisterBenchmark(
      name.c_str(),
      [=](benchmark::State& st) {
    auto step = make();
    for (int k = 0; k < 3; ++k) step();  // warm: workspaces, plans, recycled outputs, first touch
    std::vector<double> t;
    for (auto _ : st) {
      const double s = time_max(world(), step);
      st.SetIterationTime(s);
      t.push_back(s);
    }
    const double m = median(t);
    st.counters["med_us"] = m * 1e6;
    st.counters["GB/s"] = m > 0 ? bytes / m * 1e-9 : 0;
    results()[name] = {m, bytes};
      })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

template <std::size_t R>
std::array<std::size_t, R> to_array(const std::vector<std::size_t>& v) {
  std::array<std::size_t, R> a{};
  for (std::size_t d = 0; d < R; ++d) a[d] = v[d];
  return a;
}

/// The switch's methods. `planning`: only the planning comparison (dsp
/// under each planning mode, each algorithm forced, and the reference), in
/// the group `prefix` (default "planning").
template <std::size_t R, std::size_t I, std::size_t J>
void add_switch(const std::vector<std::size_t>& g, bool latency = false, bool planning = false,
                const char* prefix = "planning") {
  using X = dsp::DistTensor<float, R, dsp::Sharded<I>, Comm>;
  using Y = dsp::DistTensor<float, R, dsp::Sharded<J>, Comm>;
  const int n = comm().size();
  const auto ext = to_array<R>(g);
  std::size_t total = 1;
  for (auto e : g) total *= e;
  const std::string group = std::string(latency    ? "latency"
                                        : planning ? prefix
                                                   : "switch") +
                            "/" + shape_text(g) + "/" + std::to_string(I) + "->" + std::to_string(J) + "/np" +
                            std::to_string(n);
  // The local block of rank 0 (the largest), on every rank: the raw collective's
  // counts must be equal everywhere, also for shapes that do not divide evenly.
  const std::size_t local = total / g[I] * ((g[I] + std::size_t(n) - 1) / std::size_t(n));
  const double bytes = double(local) * sizeof(float);

  // The planning groups' methods share one pair of tensors: at a few MiB the
  // same plan on two pairs of buffers differs by up to 40% here (placement
  // in memory), more than the algorithms compared. A weak pointer, so the
  // tensors die with the last step, before Kokkos::finalize.
  auto shared = std::make_shared<std::weak_ptr<std::pair<X, Y>>>();
  auto tensors = [ext, shared, planning] {
    if (auto p = shared->lock(); p && planning) return p;
    auto p = std::make_shared<std::pair<X, Y>>(X(comm(), ext), Y(comm(), ext));
    *shared = p;
    return p;
  };
  if (latency) {
    add(group, "dsp_check_off", bytes, [=] {
      auto xy = tensors();
      return [xy] {
        dsp::set_agreement_checks(false);
        dsp::dynamic_switch<J>(xy->first, xy->second);
        dsp::set_agreement_checks(true);
      };
    });
  }
  add(group, "dsp", bytes, [=] {
    auto xy = tensors();
    return [xy] { dsp::dynamic_switch<J>(xy->first, xy->second); };
  });
  if (latency) {
    add(group, "dsp_first_call", bytes, [=] {  // AgreementMode::first_call, warm
      auto xy = tensors();
      auto run = [xy] {
        dsp::set_agreement_mode(dsp::AgreementMode::first_call);
        dsp::dynamic_switch<J>(xy->first, xy->second);
        dsp::set_agreement_mode(dsp::AgreementMode::every_call);
      };
      run();
      return run;
    });
    // Split-phase, started and waited at once: what the in-flight guard
    // (DSP_CHECK_IN_FLIGHT) costs shows here, against the same suite built with it 0.
    add(group, "dsp_split_phase", bytes, [=] {
      auto xy = tensors();
      return [xy] {
        auto h = dsp::start_switch<J>(xy->first, xy->second);
        h.wait();
        (void)xy->second.local();
      };
    });
  }
  // Planning::measure: the first call (here) measures; the timed ones run its choice.
  add(group, "dsp_measured", bytes, [=] {
    auto xy = tensors();
    dsp::set_planning(dsp::Planning::measure);
    dsp::dynamic_switch<J>(xy->first, xy->second);
    dsp::set_planning(dsp::Planning::heuristic);
    return [xy] {
      dsp::set_planning(dsp::Planning::measure);
      dsp::dynamic_switch<J>(xy->first, xy->second);
      dsp::set_planning(dsp::Planning::heuristic);
    };
  });
  // Each algorithm forced, to check the automatic choice against them.
  for (auto [alg, name] : {std::pair{dsp::SwitchAlgorithm::alltoall, "dsp_force_alltoall"},
                           std::pair{dsp::SwitchAlgorithm::alltoallv, "dsp_force_alltoallv"},
                           std::pair{dsp::SwitchAlgorithm::pairwise, "dsp_force_pairwise"},
                           std::pair{dsp::SwitchAlgorithm::datatypes, "dsp_force_datatypes"}}) {
    if (latency && alg == dsp::SwitchAlgorithm::pairwise) continue;
    // Pairwise with messages under 4 KiB costs 5 to 25x here, and its thousands
    // of messages slow whatever runs after it: left out of the planning groups.
    if (planning && alg == dsp::SwitchAlgorithm::pairwise &&
        dsp::detail::min_pairwise_piece(g, I, J, n) * sizeof(float) < 4096)
      continue;
    add(group, name, bytes, [=, a = alg] {
      auto xy = tensors();
      return [xy, a] {
        dsp::set_switch_algorithm(a);
        dsp::dynamic_switch<J>(xy->first, xy->second);
        dsp::set_switch_algorithm(dsp::SwitchAlgorithm::automatic);
      };
    });
  }
  if (!latency && !planning) {
    add(group, "dsp_alloc", bytes, [=] {
      auto xy = tensors();
      return [xy] { xy->second = dsp::dynamic_switch<J>(xy->first); };
    });
  }
  add(group, "MPI_Alltoall", bytes, [=] {
    auto in = std::make_shared<std::vector<float>>(local, 1.f), out = std::make_shared<std::vector<float>>(local);
    const int cnt = static_cast<int>(local / n);
    return [in, out, cnt] { MPI_Alltoall(in->data(), cnt, MPI_FLOAT, out->data(), cnt, MPI_FLOAT, world()); };
  });
  if (latency || planning) return;
  add(group, "MPI_Alltoallw", bytes, [=] {
    auto xy = tensors();
    auto w = std::make_shared<dsp_bench::AlltoallwSwitch>(world(), g, int(I), int(J));
    return [xy, w] { (*w)(xy->first.local().data(), xy->second.local().data()); };
  });
  if constexpr (R == 3 && I == 0 && J == 1) {
    add(group, "FFTW_MPI_transpose", bytes, [=] {
      const ptrdiff_t howmany = static_cast<ptrdiff_t>(g[2]);
      auto in = std::shared_ptr<float>(fftwf_alloc_real(local), fftwf_free);
      auto out = std::shared_ptr<float>(fftwf_alloc_real(local), fftwf_free);
      std::fill(in.get(), in.get() + local, 1.f);
      fftwf_plan plan = fftwf_mpi_plan_many_transpose(static_cast<ptrdiff_t>(g[0]), static_cast<ptrdiff_t>(g[1]),
                                                      howmany, FFTW_MPI_DEFAULT_BLOCK, FFTW_MPI_DEFAULT_BLOCK, in.get(),
                                                      out.get(), world(), FFTW_ESTIMATE);
      auto p = std::shared_ptr<fftwf_plan_s>(plan, fftwf_destroy_plan);
      return [p, in, out] { fftwf_execute(p.get()); };
    });
  }
  add(group, "memcpy", bytes, [=] {
    auto in = std::make_shared<std::vector<float>>(local, 1.f), out = std::make_shared<std::vector<float>>(local);
    return [in, out] { std::memcpy(out->data(), in->data(), in->size() * sizeof(float)); };
  });
}

template <std::size_t R, std::size_t D>
void add_gather(const std::vector<std::size_t>& g) {
  using X = dsp::DistTensor<float, R, dsp::Sharded<D>, Comm>;
  using Y = dsp::DistTensor<float, R, dsp::Replicated, Comm>;
  const int n = comm().size();
  const auto ext = to_array<R>(g);
  const std::string group = "gather/" + shape_text(g) + "/" + std::to_string(D) + "/np" + std::to_string(n);
  const std::size_t local = X(comm(), ext).local_size();
  const double bytes = double(local) * n * sizeof(float);  // what each rank ends up holding
  add(group, "dsp", bytes, [=] {
    auto x = std::make_shared<X>(comm(), ext);
    auto y = std::make_shared<Y>(comm(), ext);
    return [x, y] { dsp::gather(*x, *y); };
  });
  add(group, "dsp_alloc", bytes, [=] {
    auto x = std::make_shared<X>(comm(), ext);
    auto y = std::make_shared<Y>(comm(), ext);
    return [x, y] { *y = dsp::gather(*x); };
  });
  add(group, "MPI_Allgather", bytes, [=] {
    auto in = std::make_shared<std::vector<float>>(local, 1.f);
    auto out = std::make_shared<std::vector<float>>(local * n);
    const int cnt = static_cast<int>(local);
    return [in, out, cnt] { MPI_Allgather(in->data(), cnt, MPI_FLOAT, out->data(), cnt, MPI_FLOAT, world()); };
  });
  // The same raw MPI_Allgather, but between the Kokkos-allocated blocks dsp uses:
  // separates what dsp adds from what the memory itself costs.
  add(group, "MPI_Allgather_dsp_buffers", bytes, [=] {
    auto x = std::make_shared<X>(comm(), ext);
    auto y = std::make_shared<Y>(comm(), ext);
    const int cnt = static_cast<int>(local);
    return
        [x, y, cnt] { MPI_Allgather(x->local().data(), cnt, MPI_FLOAT, y->local().data(), cnt, MPI_FLOAT, world()); };
  });
}

/// A switch on axis A of a mesh (every other axis Replicated) against the same
/// switch on a plain communicator of that axis's ranks (the reference), into
/// existing outputs: what the mesh layer adds.
template <std::size_t K, std::size_t A>
void add_mesh_switch(const std::vector<std::size_t>& g, const std::array<int, K>& shape) {
  static_assert(K == 2);
  using M = dsp::Mesh<K, Comm>;
  auto mesh = std::make_shared<M>(comm(), shape);
  using From = std::conditional_t<A == 0, dsp::Axes<dsp::Sharded<0>, dsp::Replicated>,
                                  dsp::Axes<dsp::Replicated, dsp::Sharded<0>>>;
  using To = std::conditional_t<A == 0, dsp::Axes<dsp::Sharded<1>, dsp::Replicated>,
                                dsp::Axes<dsp::Replicated, dsp::Sharded<1>>>;
  const auto ext = to_array<3>(g);
  std::string sh;
  for (std::size_t a = 0; a < K; ++a) sh += (a ? "x" : "") + std::to_string(shape[a]);
  const std::string group =
      "mesh_switch/" + shape_text(g) + "/" + sh + "-axis" + std::to_string(A) + "/np" + std::to_string(comm().size());
  using X = dsp::DistTensor<float, 3, From, M>;
  using Y = dsp::DistTensor<float, 3, To, M>;
  using PX = dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm>;
  using PY = dsp::DistTensor<float, 3, dsp::Sharded<1>, Comm>;
  const std::size_t local = X(*mesh, ext).local_size();
  const double bytes = double(local) * sizeof(float);
  references()[group] = "dsp_plain_axis";
  add(group, "dsp_mesh", bytes, [=] {
    auto xy = std::make_shared<std::pair<X, Y>>(X(*mesh, ext), Y(*mesh, ext));
    return [xy] { dsp::redistribute<To>(xy->first, xy->second); };
  });
  add(group, "dsp_plain_axis", bytes, [=] {
    const Comm& ax = mesh->axis(A);
    auto xy = std::make_shared<std::pair<PX, PY>>(PX(ax, ext), PY(ax, ext));
    return [xy] { dsp::dynamic_switch<1>(xy->first, xy->second); };
  });
}

/// A pencil transpose on a 2-D mesh by dsp::redistribute (one all-to-all on
/// one axis) against the naive way: gather the whole tensor on every rank,
/// then cut the target blocks (the reference). The cost model's bytes per
/// rank for both are printed once.
void add_mesh_redistribute(const std::vector<std::size_t>& g, const std::array<int, 2>& shape) {
  using M = dsp::Mesh<2, Comm>;
  auto mesh = std::make_shared<M>(comm(), shape);
  using From = dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>;
  using To = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<2>>;
  using Whole = dsp::Axes<dsp::Replicated, dsp::Replicated>;
  const auto ext = to_array<3>(g);
  const std::string group = "mesh_redistribute/" + shape_text(g) + "/" + std::to_string(shape[0]) + "x" +
                            std::to_string(shape[1]) + "/np" + std::to_string(comm().size());
  using X = dsp::DistTensor<float, 3, From, M>;
  using Y = dsp::DistTensor<float, 3, To, M>;
  using W = dsp::DistTensor<float, 3, Whole, M>;
  const double bytes = double(X(*mesh, ext).local_size()) * sizeof(float);
  references()[group] = "naive_gather_then_split";
  add(group, "dsp_redistribute", bytes, [=] {
    auto xy = std::make_shared<std::pair<X, Y>>(X(*mesh, ext), Y(*mesh, ext));
    return [xy] { dsp::redistribute<To>(xy->first, xy->second); };
  });
  add(group, "naive_gather_then_split", bytes, [=] {
    auto t = std::make_shared<std::tuple<X, W, Y>>(X(*mesh, ext), W(*mesh, ext), Y(*mesh, ext));
    return [t] {
      dsp::redistribute<Whole>(std::get<0>(*t), std::get<1>(*t));
      dsp::redistribute<To>(std::get<1>(*t), std::get<2>(*t));  // local: two splits
    };
  });
  if (comm().rank() == 0) {
    std::size_t worst_dsp = 0, worst_naive = 0;
    worst_dsp = dsp::redistribute_plan<From, To, 3>::cost(ext, sizeof(float), shape, {0, 0}).max_bytes;
    worst_naive = dsp::redistribute_plan<From, Whole, 3>::cost(ext, sizeof(float), shape, {0, 0}).max_bytes;
    std::printf("# %s: cost model, max bytes sent per rank: redistribute %zu, gather-then-split %zu\n", group.c_str(),
                worst_dsp, worst_naive);
  }
}

// Only rank 0 prints; the others run the same benchmarks silently.
class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

/// Attention-shaped float tensors [S, 16, 64] of about `per_rank` bytes per
/// rank, switched from the sequence (0) to the heads (1), as in Ulysses.
std::array<std::size_t, 3> attention_shape(std::size_t per_rank) {
  const std::size_t n = std::size_t(comm().size());
  return {std::max(n, per_rank * n / (16 * 64 * sizeof(float))), 16, 64};
}

std::string size_text(std::size_t b) {
  return b >= (1u << 20) ? std::to_string(b >> 20) + "MiB" : std::to_string(b >> 10) + "KiB";
}

/// Q, K and V switched as one batch against three separate switches.
void add_batch(std::size_t per_rank) {
  using X = dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm>;
  using Y = dsp::DistTensor<float, 3, dsp::Sharded<1>, Comm>;
  const auto ext = attention_shape(per_rank);
  const std::string group = "batch3/" + size_text(per_rank) + "/np" + std::to_string(comm().size());
  const double bytes = 3.0 * double(X(comm(), ext).local_size()) * sizeof(float);
  references()[group] = "three_switches";
  struct T {
    X q, k, v;
    Y q2, k2, v2;
  };
  auto tensors = [ext] {
    return std::make_shared<T>(
        T{X(comm(), ext), X(comm(), ext), X(comm(), ext), Y(comm(), ext), Y(comm(), ext), Y(comm(), ext)});
  };
  add(group, "dsp_batch", bytes, [=] {
    auto t = tensors();
    return [t] { dsp::dynamic_switch<1>(dsp::batch(t->q, t->k, t->v), dsp::batch(t->q2, t->k2, t->v2)); };
  });
  add(group, "dsp_batch_measured", bytes, [=] {
    auto t = tensors();
    auto run = [t] {
      dsp::set_planning(dsp::Planning::measure);
      dsp::dynamic_switch<1>(dsp::batch(t->q, t->k, t->v), dsp::batch(t->q2, t->k2, t->v2));
      dsp::set_planning(dsp::Planning::heuristic);
    };
    run();  // measures
    return run;
  });
  add(group, "dsp_batch_first_call", bytes, [=] {  // AgreementMode::first_call: the warm call agrees nothing
    auto t = tensors();
    auto run = [t] {
      dsp::set_agreement_mode(dsp::AgreementMode::first_call);
      dsp::dynamic_switch<1>(dsp::batch(t->q, t->k, t->v), dsp::batch(t->q2, t->k2, t->v2));
      dsp::set_agreement_mode(dsp::AgreementMode::every_call);
    };
    run();  // the first call: checked in full
    return run;
  });
  add(group, "dsp_batch_first_call_sections", bytes, [=] {  // the same, chunks as eager point-to-point messages
    auto t = tensors();
    auto run = [t] {
      dsp::set_agreement_mode(dsp::AgreementMode::first_call);
      dsp::set_switch_algorithm(dsp::SwitchAlgorithm::pairwise);
      dsp::dynamic_switch<1>(dsp::batch(t->q, t->k, t->v), dsp::batch(t->q2, t->k2, t->v2));
      dsp::set_switch_algorithm(dsp::SwitchAlgorithm::automatic);
      dsp::set_agreement_mode(dsp::AgreementMode::every_call);
    };
    run();
    return run;
  });
  add(group, "three_MPI_Alltoall", bytes, [=] {  // the raw floor: the same bytes, no layout work
    const std::size_t local = X(comm(), ext).local_size();
    auto in = std::make_shared<std::vector<float>>(3 * local, 1.f),
         out = std::make_shared<std::vector<float>>(3 * local);
    const int cnt = static_cast<int>(local / std::size_t(comm().size()));
    return [in, out, cnt, local] {
      for (std::size_t k = 0; k < 3; ++k)
        MPI_Alltoall(in->data() + k * local, cnt, MPI_FLOAT, out->data() + k * local, cnt, MPI_FLOAT, world());
    };
  });
  add(group, "three_switches", bytes, [=] {
    auto t = tensors();
    return [t] {
      dsp::dynamic_switch<1>(t->q, t->q2);
      dsp::dynamic_switch<1>(t->k, t->k2);
      dsp::dynamic_switch<1>(t->v, t->v2);
    };
  });
}

/// The Ulysses switch of an attention tensor [B, S, H, d] from the sequence
/// to the heads, its sequence laid out as Zigzag (causal balance) and as
/// run-time Blocks (the Sharded rule's sizes: the same bytes), against the
/// Sharded switch of the same tensor; and back.
void add_cut(const std::vector<std::size_t>& g) {
  using E = std::array<std::size_t, 4>;
  using S1 = dsp::DistTensor<float, 4, dsp::Sharded<1>, Comm>;
  using S2 = dsp::DistTensor<float, 4, dsp::Sharded<2>, Comm>;
  using Z1 = dsp::DistTensor<float, 4, dsp::Zigzag<1>, Comm>;
  using B1 = dsp::DistTensor<float, 4, dsp::Blocks<1>, Comm>;
  const int n = comm().size();
  const E ext = to_array<4>(g);
  std::vector<std::size_t> sizes;
  for (int r = 0; r < n; ++r) sizes.push_back(dsp::Partition{ext[1], std::size_t(n)}.count(std::size_t(r)));
  for (const bool back : {false, true}) {
    const std::string group =
        std::string("cut/") + shape_text(g) + (back ? "/2->1" : "/1->2") + "/np" + std::to_string(n);
    const double bytes = double(S2(comm(), ext).local_size()) * sizeof(float);
    references()[group] = "sharded";
    add(group, "sharded", bytes, [=] {
      auto a = std::make_shared<std::pair<S1, S2>>(S1(comm(), ext), S2(comm(), ext));
      if (back) return std::function<void()>([a] { dsp::redistribute<dsp::Sharded<1>>(a->second, a->first); });
      return std::function<void()>([a] { dsp::redistribute<dsp::Sharded<2>>(a->first, a->second); });
    });
    add(group, "zigzag", bytes, [=] {
      auto a = std::make_shared<std::pair<Z1, S2>>(Z1(comm(), ext), S2(comm(), ext));
      if (back) return std::function<void()>([a] { dsp::redistribute<dsp::Zigzag<1>>(a->second, a->first); });
      return std::function<void()>([a] { dsp::redistribute<dsp::Sharded<2>>(a->first, a->second); });
    });
    add(group, "blocks", bytes, [=] {
      auto a = std::make_shared<std::pair<B1, S2>>(B1(comm(), ext, sizes), S2(comm(), ext));
      if (back) return std::function<void()>([a] { dsp::redistribute<dsp::Blocks<1>>(a->second, a->first); });
      return std::function<void()>([a] { dsp::redistribute<dsp::Sharded<2>>(a->first, a->second); });
    });
  }
}

/// USP's Ulysses switch on a mesh {r, u}: [B, S, H, d] from the sequence
/// (cut over axis 0, then each block over axis 1) to the heads on axis 1,
/// the ring axis's cut Sharded, Zigzag or Blocks (the Sharded rule's sizes:
/// the same bytes). Each is one switch on axis 1 (Blocks: kept_plan, its
/// sizes equal); the ring axis's cut only changes the blocks' extents.
void add_mesh_cut(const std::vector<std::size_t>& g, const std::array<int, 2>& shape) {
  using E = std::array<std::size_t, 4>;
  using M = dsp::Mesh<2, Comm>;
  const E ext = to_array<4>(g);
  std::vector<std::size_t> sizes;
  for (int r = 0; r < shape[0]; ++r)
    sizes.push_back(dsp::Partition{ext[1], std::size_t(shape[0])}.count(std::size_t(r)));
  const std::string group = std::string("meshcut/") + shape_text(g) + "/{" + std::to_string(shape[0]) + "," +
                            std::to_string(shape[1]) + "}/np" + std::to_string(comm().size());
  using SH = dsp::DistTensor<float, 4, dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>, M>;
  const double bytes = double(SH(M(comm(), shape), ext).local_size()) * sizeof(float);
  references()[group] = "sharded";
  auto pair = [=]<class P>() {  // the ring axis's placement P
    using X = dsp::DistTensor<float, 4, dsp::Axes<P, dsp::Sharded<1>>, M>;
    using Y = dsp::DistTensor<float, 4, dsp::Axes<P, dsp::Sharded<2>>, M>;
    auto mesh = std::make_shared<M>(comm(), shape);
    std::shared_ptr<std::pair<X, Y>> a;
    if constexpr (dsp::is_blocks_v<P>)
      a = std::make_shared<std::pair<X, Y>>(X(*mesh, ext, sizes), Y(*mesh, ext, sizes));
    else a = std::make_shared<std::pair<X, Y>>(X(*mesh, ext), Y(*mesh, ext));
    return std::function<void()>([a, mesh] { dsp::redistribute<dsp::Axes<P, dsp::Sharded<2>>>(a->first, a->second); });
  };
  add(group, "sharded", bytes, [=] { return pair.template operator()<dsp::Sharded<1>>(); });
  add(group, "zigzag", bytes, [=] { return pair.template operator()<dsp::Zigzag<1>>(); });
  add(group, "blocks", bytes, [=] { return pair.template operator()<dsp::Blocks<1>>(); });
}

/// As add_cut, on the bf16 wire: Zigzag<1> against Sharded<1> (the same
/// elements, half the bytes on the wire), both directions.
void add_cut_wire(const std::vector<std::size_t>& g) {
  using E = std::array<std::size_t, 4>;
  using S1 = dsp::DistTensor<float, 4, dsp::Sharded<1>, Comm>;
  using S2 = dsp::DistTensor<float, 4, dsp::Sharded<2>, Comm>;
  using Z1 = dsp::DistTensor<float, 4, dsp::Zigzag<1>, Comm>;
  const int n = comm().size();
  const E ext = to_array<4>(g);
  constexpr dsp::Wire w = dsp::Wire::bf16;
  for (const bool back : {false, true}) {
    const std::string group =
        std::string("cutwire/") + shape_text(g) + (back ? "/2->1" : "/1->2") + "/bf16/np" + std::to_string(n);
    const double bytes = double(S2(comm(), ext).local_size()) * sizeof(float);
    references()[group] = "sharded";
    add(group, "sharded", bytes, [=] {
      auto a = std::make_shared<std::pair<S1, S2>>(S1(comm(), ext), S2(comm(), ext));
      if (back) return std::function<void()>([a] { dsp::redistribute<dsp::Sharded<1>>(a->second, a->first, w); });
      return std::function<void()>([a] { dsp::redistribute<dsp::Sharded<2>>(a->first, a->second, w); });
    });
    add(group, "zigzag", bytes, [=] {
      auto a = std::make_shared<std::pair<Z1, S2>>(Z1(comm(), ext), S2(comm(), ext));
      if (back) return std::function<void()>([a] { dsp::redistribute<dsp::Zigzag<1>>(a->second, a->first, w); });
      return std::function<void()>([a] { dsp::redistribute<dsp::Sharded<2>>(a->first, a->second, w); });
    });
  }
}

/// A GQA layer's Ulysses switch: Q [B, S, H, d] and K, V [B, S, H_kv, d] from
/// the sequence (dim 1) to the heads (dim 2), as one batch of different
/// extents (one agreement, one exchange) against three separate switches.
void add_gqa(std::size_t b, std::size_t s, std::size_t h, std::size_t hkv, std::size_t d) {
  using E = std::array<std::size_t, 4>;
  using S1 = dsp::DistTensor<float, 4, dsp::Sharded<1>, Comm>;
  using S2 = dsp::DistTensor<float, 4, dsp::Sharded<2>, Comm>;
  const int n = comm().size();
  const E q{b, s, h, d}, kv{b, s, hkv, d};
  const std::string group = "gqa/" + shape_text({b, s, h, d}) + "/kv" + std::to_string(hkv) + "/np" + std::to_string(n);
  const double bytes = double(S2(comm(), q).local_size() + 2 * S2(comm(), kv).local_size()) * sizeof(float);
  struct Qkv {
    S1 q, k, v;
    S2 qh, kh, vh;
  };
  auto tensors = [=] {
    return std::make_shared<Qkv>(
        Qkv{S1(comm(), q), S1(comm(), kv), S1(comm(), kv), S2(comm(), q), S2(comm(), kv), S2(comm(), kv)});
  };
  references()[group] = "three";
  add(group, "three", bytes, [=] {
    auto a = tensors();
    return std::function<void()>([a] {
      dsp::dynamic_switch<2>(a->q, a->qh);
      dsp::dynamic_switch<2>(a->k, a->kh);
      dsp::dynamic_switch<2>(a->v, a->vh);
    });
  });
  add(group, "batch", bytes, [=] {
    auto a = tensors();
    return std::function<void()>(
        [a] { dsp::dynamic_switch<2>(dsp::batch(a->q, a->k, a->v), dsp::batch(a->qh, a->kh, a->vh)); });
  });
}

/// USP's Ulysses switch of a GQA layer on a mesh {r, u}: Q [B, S, H, d] and
/// K, V [B, S, H_kv, d] from Axes<Sharded<1>, Sharded<1>> to Axes<Sharded<1>,
/// Sharded<2>> (one step on axis 1), as one batch of different extents
/// against Q alone and K, V as a batch (two calls, what a mesh took before),
/// beside the raw MPI_Alltoall of as many bytes on axis 1's communicator.
void add_gqa_mesh(std::size_t b, std::size_t s, std::size_t h, std::size_t hkv, std::size_t d,
                  const std::array<int, 2>& shape) {
  using E = std::array<std::size_t, 4>;
  using M = dsp::Mesh<2, Comm>;
  using X = dsp::DistTensor<float, 4, dsp::Axes<dsp::Sharded<1>, dsp::Sharded<1>>, M>;
  using Y = dsp::DistTensor<float, 4, dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>, M>;
  const E q{b, s, h, d}, kv{b, s, hkv, d};
  const std::string group = "gqamesh/" + shape_text({b, s, h, d}) + "/kv" + std::to_string(hkv) + "/{" +
                            std::to_string(shape[0]) + "," + std::to_string(shape[1]) + "}/np" +
                            std::to_string(comm().size());
  const M probe(comm(), shape);
  const std::size_t local = Y(probe, q).local_size() + 2 * Y(probe, kv).local_size();
  const double bytes = double(local) * sizeof(float);
  struct Qkv {
    std::shared_ptr<M> mesh;
    X q, k, v;
    Y qh, kh, vh;
  };
  auto tensors = [=] {
    auto m = std::make_shared<M>(comm(), shape);
    return std::make_shared<Qkv>(Qkv{m, X(*m, q), X(*m, kv), X(*m, kv), Y(*m, q), Y(*m, kv), Y(*m, kv)});
  };
  references()[group] = "q+kv";
  add(group, "q+kv", bytes, [=] {
    auto a = tensors();
    return std::function<void()>([a] {
      dsp::redistribute<dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>>(a->q, a->qh);
      dsp::redistribute<dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>>(dsp::batch(a->k, a->v), dsp::batch(a->kh, a->vh));
    });
  });
  add(group, "batch", bytes, [=] {
    auto a = tensors();
    return std::function<void()>([a] {
      dsp::redistribute<dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>>(dsp::batch(a->q, a->k, a->v),
                                                                     dsp::batch(a->qh, a->kh, a->vh));
    });
  });
  add(group, "MPI_Alltoall", bytes, [=] {
    auto m = std::make_shared<M>(comm(), shape);
    const int u = shape[1];
    const int cnt = int(local / std::size_t(u));
    auto in = std::make_shared<std::vector<float>>(std::size_t(cnt) * std::size_t(u), 1.0f);
    auto out = std::make_shared<std::vector<float>>(in->size());
    return std::function<void()>([m, in, out, cnt] {
      MPI_Alltoall(in->data(), cnt, MPI_FLOAT, out->data(), cnt, MPI_FLOAT, m->axis(1).native());
    });
  });
}

/// One switch on each low-precision wire against the float switch.
void add_wire(std::size_t per_rank) {
  using X = dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm>;
  using Y = dsp::DistTensor<float, 3, dsp::Sharded<1>, Comm>;
  const auto ext = attention_shape(per_rank);
  const std::string group = "wire/" + size_text(per_rank) + "/np" + std::to_string(comm().size());
  const double bytes = double(X(comm(), ext).local_size()) * sizeof(float);
  references()[group] = "f32";
  auto tensors = [ext] {
    auto xy = std::make_shared<std::pair<X, Y>>(X(comm(), ext), Y(comm(), ext));
    Kokkos::deep_copy(xy->first.local(), 1.25f);
    return xy;
  };
  for (auto w : {dsp::Wire::exact, dsp::Wire::bf16, dsp::Wire::fp16, dsp::Wire::fp8_e4m3})
    add(group, w == dsp::Wire::exact ? "f32" : dsp::wire_name(w), bytes, [=] {
      auto xy = tensors();
      return [xy, w] { dsp::dynamic_switch<1>(xy->first, xy->second, w); };
    });
}

// The ratios: every method of a group and its reference run in turns, one
// iteration each, for the same rounds on every rank; the reported ratio is the
// median over rounds of (method / reference) in the same round, so slow drifts
// of a shared machine's load cancel.
void print_ratios(int rank) {
  if (rank == 0)
    std::printf(
        "\nratios: median over interleaved rounds of (method time / reference time in the same round)\n"
        "%-36s %-22s %12s %9s %8s %7s\n",
        "case", "method", "median_us", "GB/s", "ratio", "rounds");
  for (const std::string& group : order()) {
    const bool gather = group.rfind("gather", 0) == 0;
    const std::string ref = group + "/" +
                            (references().count(group) ? references()[group]
                             : gather                  ? "MPI_Allgather"
                                                       : "MPI_Alltoall");
    if (!results().count(ref)) continue;  // not selected by --benchmark_filter
    std::vector<std::string> names;
    std::vector<std::function<void()>> steps;
    double per_round = 0;
    for (const auto& [name, make] : makers())
      if (name.rfind(group + "/", 0) == 0 && results().count(name)) {
        names.push_back(name);
        steps.push_back(make());
        per_round += results().count(name) ? results()[name].median_s : 1e-3;
      }
    const std::size_t r = std::find(names.begin(), names.end(), ref) - names.begin();
    if (r == names.size() || !results().count(ref)) continue;  // not selected by --benchmark_filter
    for (auto& s : steps)
      for (int k = 0; k < 3; ++k) s();
    // per_round is the same on every rank (times are max-reduced): same rounds everywhere.
    const int rounds = static_cast<int>(std::clamp(4.0 / std::max(per_round, 1e-9), 40.0, 20000.0));
    std::vector<std::vector<double>> t(names.size());
    for (int k = 0; k < rounds; ++k)  // each round starts with another method: no fixed neighbour
      for (std::size_t q = 0; q < names.size(); ++q) {
        const std::size_t m = (q + k) % names.size();
        t[m].push_back(time_max(world(), steps[m]));
      }
    steps.clear();
    if (rank != 0) continue;
    for (std::size_t m = 0; m < names.size(); ++m) {
      std::vector<double> ratio;
      for (int k = 0; k < rounds; ++k) ratio.push_back(t[m][k] / t[r][k]);
      const double med = median(t[m]), bytes = results()[names[m]].bytes;
      std::printf("%-36s %-22s %12.1f %9.2f %8.3f %7d\n", group.c_str(), names[m].substr(group.size() + 1).c_str(),
                  med * 1e6, bytes / med * 1e-9, median(ratio), rounds);
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  fftwf_mpi_init();
  Kokkos::initialize(argc, argv);
  {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    benchmark::Initialize(&argc, argv);
    add_switch<3, 0, 1>({64, 4096, 128});
    add_switch<3, 1, 0>({64, 4096, 128});
    add_switch<3, 0, 1>({256, 1024, 64});
    add_switch<3, 1, 0>({256, 1024, 64});
    add_switch<4, 1, 2>({4, 64, 1024, 128});
    add_switch<3, 0, 1>({16, 16, 8}, true);  // 8 KiB in all: 4 KiB per rank at 2 ranks
    // Planning: shapes no threshold was tuned on (docs/benchmarks.md, "Measured plans").
    add_switch<3, 1, 0>({12, 1000, 50}, false, true);
    add_switch<4, 2, 1>({6, 30, 70, 20}, false, true);
    add_switch<3, 0, 2>({33, 17, 128}, false, true);
    add_switch<4, 1, 2>({2, 512, 16, 64}, false, true);
    add_switch<3, 2, 0>({96, 96, 96}, false, true);
    add_switch<3, 0, 1>({40, 24, 6}, false, true);
    const int n = comm().size();
    // Small switches around the transport's eager limit (docs/benchmarks.md, "Small exchanges: datatypes
    // and eager pieces"): float [a n, 2 n, 16] (128-byte runs), chunks of 2 to 64 KiB at any rank count,
    // and [a n, 2 n, 8] (64-byte runs), chunks of 4 and 8 KiB.
    for (const std::size_t a : {16, 32, 64, 128, 256, 512})
      add_switch<3, 0, 1>({a * std::size_t(n), 2 * std::size_t(n), 16}, false, true, "small");
    for (const std::size_t a : {64, 128})
      add_switch<3, 0, 1>({a * std::size_t(n), 2 * std::size_t(n), 8}, false, true, "small");
    add_gather<3, 0>({64, 4096, 128});
    add_gather<3, 1>({64, 4096, 128});
    add_mesh_switch<2, 0>({64, 4096, 128}, {n, 1});
    add_mesh_switch<2, 1>({64, 4096, 128}, {1, n});
    add_mesh_switch<2, 0>({16, 16, 8}, {n, 1});  // small: the fixed cost the mesh layer adds
    if (n % 2 == 0) add_mesh_redistribute({64, 512, 512}, {2, n / 2});
    for (std::size_t b : {std::size_t(4) << 10, std::size_t(64) << 10, std::size_t(1) << 20, std::size_t(4) << 20,
                          std::size_t(16) << 20, std::size_t(64) << 20})
      add_batch(b);
    for (std::size_t b : {std::size_t(1) << 20, std::size_t(16) << 20, std::size_t(256) << 20}) add_wire(b);
    add_cut({1, 64, 4, 16});      // 16 KiB: chunks of 4 KiB at 2 ranks, 1 KiB at 4
    add_cut({1, 128, 4, 16});     // 32 KiB: 8 KiB at 2 ranks, 2 KiB at 4
    add_cut({1, 256, 4, 16});     // 64 KiB: 16 KiB at 2 ranks, 4 KiB at 4
    add_cut({1, 256, 8, 64});     // 512 KiB
    add_cut({1, 2048, 16, 64});   // 8 MiB
    add_cut({1, 8192, 32, 128});  // 128 MiB
    add_cut({4, 1024, 16, 64});   // 16 MiB, a batch dim: 4 run patterns per peer
    // USP's Ulysses switch over a Zigzag or Blocks ring axis: all ranks Ulysses, and a ring of 2.
    for (const std::array<int, 2> s : {std::array<int, 2>{1, n}, std::array<int, 2>{2, n / 2}})
      if (s[1] > 1 && s[0] * s[1] == n) {
        add_mesh_cut({1, 1024, 16, 64}, s);   // 4 MiB
        add_mesh_cut({1, 8192, 32, 128}, s);  // 128 MiB
      }
    add_cut_wire({1, 256, 8, 64});  // the same on the bf16 wire
    add_cut_wire({1, 2048, 16, 64});
    add_cut_wire({1, 8192, 32, 128});
    // GQA (H = 4 H_kv): Q and K, V of different extents in one batch against three switches.
    add_gqa(1, 64, 8, 2, 16);      // Q 32 KiB, K and V 8 KiB each
    add_gqa(1, 1024, 16, 4, 64);   // Q 4 MiB, K and V 1 MiB each
    add_gqa(1, 8192, 32, 8, 128);  // Q 128 MiB, K and V 32 MiB each
    // The same on a mesh (USP with GQA): all ranks Ulysses, and a ring of 2.
    for (const std::array<int, 2> s : {std::array<int, 2>{1, n}, std::array<int, 2>{2, n / 2}})
      if (s[1] > 1 && s[0] * s[1] == n) {
        add_gqa_mesh(1, 64, 8, 2, 16, s);
        add_gqa_mesh(1, 1024, 16, 4, 64, s);
        add_gqa_mesh(1, 8192, 32, 8, 128, s);
      }
    if (rank == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      Silent silent;
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
    print_ratios(rank);
    // What Planning::measure chose (and each candidate's time when it measured).
    if (rank == 0) std::printf("\n# dsp::export_wisdom()\n%s", dsp::export_wisdom().c_str());
    std::fflush(stdout);
    benchmark::Shutdown();
  }
  Kokkos::finalize();
  fftwf_mpi_cleanup();
  MPI_Finalize();
  return 0;
}
