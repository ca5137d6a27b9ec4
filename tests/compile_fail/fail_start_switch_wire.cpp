// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  T3<dsp::Sharded<0>> x{c, {2, 3, 4}};
  T3<dsp::Sharded<1>> y{c, {2, 3, 4}};
  dsp::start_switch<1>(x, y, dsp::Wire::bf16);  // split-phase switches have no wire
  return 0;
}
