// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using M = dsp::Mesh<2, dsp::SelfCommunicator>;

int main() {
  dsp::SelfCommunicator c;
  M mesh{c, {1, 1}};
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Zigzag<1>, dsp::Sharded<1>>, M> q{mesh, {2, 3, 4}};
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Zigzag<1>, dsp::Sharded<2>>, M> qh{mesh, {2, 3, 4}};
  auto h = dsp::start_redistribute<dsp::Axes<dsp::Zigzag<1>, dsp::Sharded<2>>>(q, qh);  // not split-phase yet
  (void)h;
  return 0;
}
