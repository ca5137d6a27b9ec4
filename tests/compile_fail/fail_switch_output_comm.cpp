// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/comm/counting.hpp>
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;

int main() {
  Comm c;
  dsp::CountingCommunicator<Comm> counted{c};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm> x{c, {2, 3, 4}};
  dsp::DistTensor<float, 3, dsp::Sharded<1>, dsp::CountingCommunicator<Comm>> y{counted, {2, 3, 4}};
  dsp::dynamic_switch<1>(x, y);  // y must live on x's communicator type
  return 0;
}
