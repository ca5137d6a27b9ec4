// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

int main() {
  dsp::SelfCommunicator c;
  dsp::DistTensor<float, 3, dsp::Zigzag<1>, dsp::SelfCommunicator> z{c, {2, 3, 4}};
  auto y = dsp::dynamic_switch<2>(z);  // a Zigzag tensor moves with redistribute
  (void)y;
  return 0;
}
