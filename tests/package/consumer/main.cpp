// SPDX-License-Identifier: BSD-3-Clause
// Shards a [B, T, S, C] tensor on T, switches to S and back, gathers, checks.
#include <dsp/mpi.hpp>

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
    std::printf("consumer rank %d: %d wrong\n", comm.rank(), wrong);
  }
  Kokkos::finalize();
  MPI_Finalize();
  return wrong != 0;
}
