// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;

int main() {
  Comm c;
  // Row-major strides (only the last extent exceeds 1), but LayoutLeft: Kokkos cannot view it as LayoutRight.
  Kokkos::View<float***, Kokkos::LayoutLeft, Comm::memory_space> v("v", 1, 1, 4);
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm> x{c, {1, 1, 4}, v};
  (void)x;
  return 0;
}
