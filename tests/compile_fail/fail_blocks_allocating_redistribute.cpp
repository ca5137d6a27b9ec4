// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

int main() {
  dsp::SelfCommunicator c;
  dsp::DistTensor<float, 3, dsp::Sharded<2>, dsp::SelfCommunicator> s{c, {2, 3, 4}};
  auto b = dsp::redistribute<dsp::Blocks<1>>(s);  // a Blocks output's sizes are its own: pass y
  (void)b;
  return 0;
}
