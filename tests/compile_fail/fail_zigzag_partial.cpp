// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

int main() {
  dsp::SelfCommunicator c;
  dsp::DistTensor<float, 3, dsp::Zigzag<1>, dsp::SelfCommunicator> z{c, {2, 3, 4}};
  auto p = dsp::redistribute<dsp::Partial<dsp::Sum>>(z);  // no one exchange: reduce-side only
  (void)p;
  return 0;
}
