// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using M = dsp::Mesh<2, dsp::SelfCommunicator>;

int main() {
  dsp::SelfCommunicator c;
  M mesh{c, {1, 1}};
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Zigzag<1>, dsp::Sharded<1>>, M> z{mesh, {2, 3, 4}};
  auto r = dsp::redistribute_axis<0, dsp::Replicated>(z);  // axis 1 still cuts dim 1
  (void)r;
  return 0;
}
