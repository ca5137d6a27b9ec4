// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using M = dsp::Mesh<2, dsp::SelfCommunicator>;

int main() {
  dsp::SelfCommunicator c;
  M mesh{c, {1, 1}};
  // Axis 0 cuts dim 1 first, so a Blocks<1> on axis 1 would cut blocks of different extents with one set of sizes.
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Sharded<1>, dsp::Blocks<1>>, M> b{mesh, {2, 3, 4}, {3}};
  (void)b;
  return 0;
}
