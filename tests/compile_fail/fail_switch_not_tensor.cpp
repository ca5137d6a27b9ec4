// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  int not_a_tensor = 3;
  auto y = dsp::dynamic_switch<0>(not_a_tensor);
  (void)y;
  return 0;
}
