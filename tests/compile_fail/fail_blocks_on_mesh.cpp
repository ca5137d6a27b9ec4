// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using M = dsp::Mesh<2, dsp::SelfCommunicator>;

int main() {
  dsp::SelfCommunicator c;
  M mesh{c, {1, 1}};
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Blocks<1>, dsp::Replicated>, M> b{mesh, {2, 3, 4}};  // not on a mesh yet
  (void)b;
  return 0;
}
