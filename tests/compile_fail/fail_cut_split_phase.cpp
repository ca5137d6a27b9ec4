// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

int main() {
  dsp::SelfCommunicator c;
  dsp::DistTensor<float, 3, dsp::Blocks<1>, dsp::SelfCommunicator> q{c, {2, 3, 4}, {3}};
  dsp::DistTensor<float, 3, dsp::Sharded<2>, dsp::SelfCommunicator> qh{c, {2, 3, 4}};
  auto h = dsp::start_redistribute<dsp::Sharded<2>>(q, qh);  // not split-phase yet
  (void)h;
  return 0;
}
