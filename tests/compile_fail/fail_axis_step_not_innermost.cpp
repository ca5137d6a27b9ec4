// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
using M = dsp::Mesh<2, Comm>;

int main() {
  M m{Comm{}, {1, 1}};
  // dim 0 is split over axis 0, then axis 1: only axis 1 can move it in one step
  dsp::DistTensor<float, 3, dsp::Axes<dsp::Sharded<0>, dsp::Sharded<0>>, M> x{m, {2, 3, 4}};
  auto y = dsp::redistribute_axis<0, dsp::Sharded<2>>(x);
  (void)y;
  return 0;
}
