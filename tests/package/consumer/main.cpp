// SPDX-License-Identifier: BSD-3-Clause
// Shards a [B, T, S, C] tensor on T, switches to S and back, gathers, checks.
// Says which engine it was built with: "dsp::compiled" under DSP_COMPILED
// (dsp::compiled, or pkg-config's dsp-compiled), else "header-only".
// With DSP_CONSUMER_HDF5 (dsp::hdf5, pkg-config's dsp-hdf5) it also saves the
// T-sharded tensor to the file argv[1] and loads it back sharded on S.
#include <dsp/mpi.hpp>
#ifdef DSP_CONSUMER_HDF5
#include <dsp/hdf5.hpp>
#endif

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  int wrong = 0;
  {
    dsp::MpiCommunicator comm{MPI_COMM_WORLD};
    dsp::DistTensor<double, 4, dsp::Replicated, dsp::MpiCommunicator> r{comm, {2, 5, 7, 3}};
    auto v = r.local();
    for (std::size_t k = 0; k < v.size(); ++k) v.data()[k] = double(k);
    auto t = dsp::split<1>(r);
    auto s = dsp::dynamic_switch<2>(t);
    auto back = dsp::gather(dsp::dynamic_switch<1>(s));
    for (std::size_t k = 0; k < v.size(); ++k) wrong += back.local().data()[k] != double(k);
#ifdef DSP_COMPILED
    const char* engine = "dsp::compiled";
#else
    const char* engine = "header-only";
#endif
    std::printf("consumer rank %d (engine: %s): %d wrong\n", comm.rank(), engine, wrong);
#ifdef DSP_CONSUMER_HDF5
    if (argc < 2) {
      std::printf("consumer: give the HDF5 file to write as the first argument\n");
      wrong += 1;
    } else {
      dsp::hdf5::save(t, argv[1], "consumer/x");
      dsp::DistTensor<double, 4, dsp::Sharded<2>, dsp::MpiCommunicator> y{comm, {2, 5, 7, 3}};
      dsp::hdf5::load(argv[1], "consumer/x", y);
      const int before = wrong;
      wrong += int(
          dsp::count_mismatches(y, [](const auto& g) { return double(((g[0] * 5 + g[1]) * 7 + g[2]) * 3 + g[3]); }));
      std::printf("consumer rank %d: hdf5 save and load, %d wrong\n", comm.rank(), wrong - before);
    }
#endif
  }
  Kokkos::finalize();
  MPI_Finalize();
  return wrong != 0;
}
