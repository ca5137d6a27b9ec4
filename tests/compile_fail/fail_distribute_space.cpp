// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

// A memory space that host code cannot reach (as CudaSpace is for a host
// communicator), declared here so the test runs on a host-only Kokkos.
struct FarSpace {
  using memory_space = FarSpace;
  using execution_space = Kokkos::DefaultHostExecutionSpace;
  using device_type = Kokkos::Device<execution_space, memory_space>;
  using size_type = std::size_t;
  static constexpr const char* name() { return "FarSpace"; }
};

int main() {
  dsp::SelfCommunicator c;
  Kokkos::View<float**, Kokkos::LayoutRight, FarSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> far;
  auto x = dsp::distribute<dsp::Sharded<0>>(c, far);
  (void)x;
  return 0;
}
