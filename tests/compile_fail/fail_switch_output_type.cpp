// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;

int main() {
  Comm c;
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm> x{c, {2, 3, 4}};
  dsp::DistTensor<double, 3, dsp::Sharded<1>, Comm> y{c, {2, 3, 4}};
  dsp::dynamic_switch<1>(x, y);  // y must hold float
  return 0;
}
