// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

namespace st = dsp::steps;
using Comm = dsp::SelfCommunicator;

int main() {
  Comm c;
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm> x{c, {2, 3, 4}};
  auto y = (st::split<1> | st::gather)(x);  // split needs a Replicated input
  (void)y;
  return 0;
}
