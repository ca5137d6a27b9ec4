// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
using M = dsp::Mesh<2, Comm>;

int main() {
  M m{Comm{}, {1, 1}};
  // axis 1 shards dim 1 already: axis 0 cannot join it in front in one step
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>, M> x{m, {2, 3, 4}};
  auto y = dsp::redistribute_axis<0, dsp::Sharded<1>>(x);
  (void)y;
  return 0;
}
