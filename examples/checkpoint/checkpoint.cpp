// SPDX-License-Identifier: BSD-3-Clause
// checkpoint: a video transformer's activations [B, T, S, C] checkpointed on N
// ranks in the temporal phase's layout (Sharded<2>: the spatial dim split,
// each rank holds whole frames' time series) and restarted on M ranks in
// the spatial phase's layout (Sharded<1>), or, when M is even, on a 2 x M/2
// data-parallel x sequence-parallel mesh. The file is one plain HDF5 dataset
// of the global tensor; `--load` checks every element against the formula
// the `--save` run wrote, so any rank count and layout can be compared.
//
//   mpirun -np 4 build/examples/checkpoint --save /tmp/activations.h5
//   mpirun -np 3 build/examples/checkpoint --load /tmp/activations.h5
//   mpirun -np 2 build/examples/checkpoint --load /tmp/activations.h5    (any count: 2 also loads on a mesh)
//
// Exit status 1 when an element differs, 2 on a usage error.
#include "../help.hpp"

#include <dsp/hdf5.hpp>
#include <dsp/mpi.hpp>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

using Comm = dsp::MpiCommunicator;
using E4 = std::array<std::size_t, 4>;
constexpr E4 kExtents{2, 8, 48, 16};  // batch, frames, spatial tokens, channels

float activation(const E4& g) {  // any deterministic value per element
  return float(g[0] * 1000000 + g[1] * 10000 + g[2] * 100 + g[3]) * 0.25f;
}

template <class Y>
int check(const Y& y, const char* layout, int rank) {
  unsigned long long wrong = dsp::count_mismatches(y, activation), all = 0;
  MPI_Allreduce(&wrong, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("loaded under %s: %llu of %zu elements differ\n", layout, all, std::size_t(2 * 8 * 48 * 16));
  return all == 0 ? 0 : 1;
}

}  // namespace

constexpr const char* kUsage =
    "usage: mpiexec -n N checkpoint --save FILE | --load FILE\n"
    "  --save: activations [B, T, S, C] in the temporal layout to one HDF5 dataset; --load: on any rank\n"
    "  count, in the spatial layout (and on a 2 x N/2 mesh when N is even), every element checked.\n"
    "  Exit status 1 when an element differs, 2 on a usage error.";

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (example::asked_for_help(argc, argv, kUsage)) {
    MPI_Finalize();
    return 0;
  }
  Kokkos::initialize(argc, argv);
  int rc = 0;
  {
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const bool save = argc == 3 && std::strcmp(argv[1], "--save") == 0;
    const bool load = argc == 3 && std::strcmp(argv[1], "--load") == 0;
    if (!save && !load) {
      if (rank == 0) std::fprintf(stderr, "usage: checkpoint --save FILE | --load FILE\n");
      rc = 2;
    } else {
      Comm world{MPI_COMM_WORLD};
      const std::string file = argv[2];
      try {
        if (save) {
          dsp::DistTensor<float, 4, dsp::Sharded<2>, Comm> x{world, kExtents};  // the temporal phase
          dsp::fill(x, activation);
          dsp::hdf5::save(x, file, "layer0/activations");
          if (rank == 0)
            std::printf("saved [2,8,48,16] float on %d ranks (Sharded<2>) to %s:/layer0/activations\n", n,
                        file.c_str());
        } else {
          dsp::DistTensor<float, 4, dsp::Sharded<1>, Comm> y{world, kExtents};  // the spatial phase
          dsp::hdf5::load(file, "layer0/activations", y);
          rc = check(y, "Sharded<1>", rank);
          if (n % 2 == 0) {  // data parallel (batch) x sequence parallel (frames)
            using M = dsp::Mesh<2, Comm>;
            M mesh{world, {2, n / 2}};
            dsp::DistTensor<float, 4, dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>, M> z{mesh, kExtents};
            dsp::hdf5::load(file, "layer0/activations", z);
            rc = check(z, "a 2 x n/2 mesh, Axes<Sharded<0>, Sharded<1>>", rank) || rc;
          }
        }
      } catch (const dsp::Error& e) {
        std::fprintf(stderr, "checkpoint (rank %d): %s\n", rank, e.what());
        rc = 1;
      }
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return rc;
}
