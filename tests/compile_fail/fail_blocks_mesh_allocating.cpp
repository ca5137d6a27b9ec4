// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using M = dsp::Mesh<2, dsp::SelfCommunicator>;

int main() {
  dsp::SelfCommunicator c;
  M mesh{c, {1, 1}};
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Sharded<1>, dsp::Replicated>, M> x{mesh, {2, 3, 4}};
  // The output's Blocks sizes are not x's: the allocating form cannot know them.
  auto y = dsp::redistribute<dsp::Axes<dsp::Blocks<1>, dsp::Replicated>>(x);
  (void)y;
  return 0;
}
