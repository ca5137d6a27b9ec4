# SPDX-License-Identifier: BSD-3-Clause
#
# Spack recipe for dsp. UNTESTED: it was written without Spack at hand and is
# only known to be valid Python; expect to adjust it on first use. Use it from
# this repository (`spack repo add <dsp checkout>/spack`), e.g. with
# `spack develop --path <dsp checkout> dsp@main` until dsp has a public URL.

from spack.package import *

try:  # Spack 1.x: the build systems live in the builtin package repository
    from spack_repo.builtin.build_systems.cmake import CMakePackage
except ImportError:  # older Spack exports them from spack.package
    pass


class Dsp(CMakePackage):
    """Header-only C++20 library that reshards multi-dimensional tensors across
    the ranks of a communicator (Dynamic Sequence Parallelism), on Kokkos, with
    MPI and optional NCCL backends."""

    # Placeholder: dsp has no public repository yet.
    homepage = "https://example.invalid/dsp"
    git = "https://example.invalid/dsp.git"

    license("BSD-3-Clause")

    version("main", branch="main")

    variant("mpi", default=True, description="MPI backend (dsp::mpi, dsp::MpiCommunicator)")
    variant("cuda", default=False, description="Use a CUDA-enabled Kokkos (device memory, kernels)")
    variant("nccl", default=False, description="NCCL backend (dsp::nccl); needs +cuda")

    conflicts("+nccl", when="~cuda", msg="the NCCL backend works on CUDA device memory: use +cuda")

    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")

    # dsp is C++20 (concepts, requires); Kokkos from 3.4 on works under it.
    depends_on("kokkos@3.4:")
    conflicts("%gcc@:9", msg="dsp needs C++20: GCC 10 or newer")
    conflicts("%clang@:11", msg="dsp needs C++20: Clang 12 or newer")

    depends_on("mpi", when="+mpi")

    depends_on("kokkos+cuda", when="+cuda")
    depends_on("cuda@12:", when="+cuda")  # nvcc accepts -std=c++20 from CUDA 12 on
    depends_on("nccl@2.18:", when="+nccl")

    depends_on("doctest", type="test")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("DSP_ENABLE_MPI", "mpi"),
            self.define_from_variant("DSP_ENABLE_NCCL", "nccl"),
            self.define("DSP_INSTALL", True),
            self.define("DSP_BUILD_EXAMPLES", False),
            self.define("DSP_BUILD_BENCHMARKS", False),
            self.define("BUILD_TESTING", self.run_tests),
            # Compile with the compiler Kokkos was built for (nvcc_wrapper for
            # a CUDA Kokkos built with +wrapper).
            self.define("CMAKE_CXX_COMPILER", spec["kokkos"].kokkos_cxx),
        ]
        if spec.satisfies("+mpi"):
            args.append(self.define("MPI_CXX_COMPILER", spec["mpi"].mpicxx))
        if spec.satisfies("+nccl"):
            args.append(self.define("NCCL_ROOT", spec["nccl"].prefix))
        return args
