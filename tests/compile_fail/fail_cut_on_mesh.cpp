// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using M = dsp::Mesh<2, dsp::SelfCommunicator>;

int main() {
  dsp::SelfCommunicator c;
  M mesh{c, {1, 1}};
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Blocks<1>, dsp::Sharded<1>>, M> b{mesh, {2, 3, 4}, {3}};
  const auto k = b.cut();  // a plain communicator's Cut; a mesh block has offsets, extents and a split
  (void)k;
  return 0;
}
