// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

int main() {
  dsp::SelfCommunicator c;
  dsp::DistTensor<float, 3, dsp::Blocks<1>, dsp::SelfCommunicator> b{c, {2, 3, 4}};  // no sizes
  (void)b;
  return 0;
}
