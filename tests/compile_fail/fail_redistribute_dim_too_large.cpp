// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
using M = dsp::Mesh<2, Comm>;

int main() {
  M m{Comm{}, {1, 1}};
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>, M> x{m, {2, 3, 4}};
  auto y = dsp::redistribute<dsp::Axes<dsp::Sharded<3>, dsp::Sharded<1>>>(x);  // dims are 0, 1, 2
  (void)y;
  return 0;
}
