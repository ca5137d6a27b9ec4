// SPDX-License-Identifier: BSD-3-Clause
// CUDA builds only: a view in device memory cannot be distributed over a
// communicator that moves host memory (MpiCommunicator without staging).
#include <dsp/mpi.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  {
    dsp::MpiCommunicator c{MPI_COMM_WORLD};
    Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::CudaSpace> v("v", 4, 3);
    auto x = dsp::distribute<dsp::Sharded<0>>(c, v);
    (void)x;
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
