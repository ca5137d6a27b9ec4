// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

namespace st = dsp::steps;
using Comm = dsp::SelfCommunicator;

int main() {
  Comm c;
  dsp::DistTensor<float, 3, dsp::Replicated, Comm> x{c, {2, 3, 4}};
  auto y = (st::split<0> | st::switch_to<3>)(x);  // dim 3 of a rank-3 tensor
  (void)y;
  return 0;
}
