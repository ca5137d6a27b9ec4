// SPDX-License-Identifier: BSD-3-Clause
// Compile-cost probe (bench/compile.sh): the Kokkos + MPI part of
// user_tu.cpp alone: the same views, kernels and collectives written by hand.
#include <Kokkos_Core.hpp>
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    int n = 1, rank = 0;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &rank);
    const std::size_t B = 2, T = 16, S = 32, C = 8;
    using V = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
    V x("x", B, T / n, S, C), y("y", B, T, S / n, C), r("r", B, T, S, C), q("q", B, T / n, S, C);
    Kokkos::parallel_for(
        "fill", Kokkos::RangePolicy<>(0, x.size()), KOKKOS_LAMBDA(std::size_t k) { x.data()[k] = float(k); });
    Kokkos::View<float*, Kokkos::HostSpace> sbuf("s", x.size()), rbuf("r", x.size());
    Kokkos::parallel_for(
        "pack", Kokkos::RangePolicy<>(0, x.size()), KOKKOS_LAMBDA(std::size_t k) { sbuf(k) = x.data()[k]; });
    Kokkos::fence();
    MPI_Alltoall(sbuf.data(), int(x.size() / n), MPI_FLOAT, rbuf.data(), int(x.size() / n), MPI_FLOAT, comm);
    Kokkos::parallel_for(
        "unpack", Kokkos::RangePolicy<>(0, y.size()), KOKKOS_LAMBDA(std::size_t k) { y.data()[k] = rbuf(k); });
    MPI_Allgather(x.data(), int(x.size()), MPI_FLOAT, r.data(), int(x.size()), MPI_FLOAT, comm);
    MPI_Request req[2];
    MPI_Irecv(rbuf.data(), int(x.size()), MPI_FLOAT, rank, 0, comm, &req[0]);
    MPI_Isend(sbuf.data(), int(x.size()), MPI_FLOAT, rank, 0, comm, &req[1]);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace> m("m", 8, 8, 8);
    Kokkos::deep_copy(m, 1.0);
    MPI_Comm sub;
    MPI_Comm_split(comm, 0, rank, &sub);
    MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DOUBLE, m.data(), int(m.size() / n), MPI_DOUBLE, sub);
    if (rank == 0) std::printf("%zu %zu %zu\n", r.size(), q.size(), y.size());
    MPI_Comm_free(&sub);
    MPI_Comm_free(&comm);
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
