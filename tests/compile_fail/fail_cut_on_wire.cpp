// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

int main() {
  dsp::SelfCommunicator c;
  dsp::DistTensor<float, 3, dsp::Zigzag<1>, dsp::SelfCommunicator> q{c, {2, 3, 4}}, k{c, {2, 3, 4}};
  auto qk = dsp::redistribute<dsp::Sharded<2>>(dsp::batch(q, k), dsp::Wire::bf16);  // not on a wire yet
  (void)qk;
  return 0;
}
