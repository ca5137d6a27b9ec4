// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using M = dsp::Mesh<2, dsp::SelfCommunicator>;

int main() {
  dsp::SelfCommunicator c;
  M mesh{c, {1, 1}};
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Zigzag<1>, dsp::Zigzag<2>>, M> z{mesh, {2, 3, 4}};  // at most one Zigzag
  (void)z;
  return 0;
}
