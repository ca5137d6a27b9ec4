// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;

int main() {
  Comm c;
  Kokkos::View<const float***, Kokkos::LayoutRight, Comm::memory_space> v;  // const: dsp cannot write it
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm> x{c, {0, 0, 0}, v};
  (void)x;
  return 0;
}
