// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  T3<dsp::Sharded<0>> x{c, {2, 3, 4}};
  T3<dsp::Sharded<1>> y{c, {2, 3, 4}};
  dsp::switch_each<1>(x, y, [](const auto&, int) {});  // the callback takes (block, offsets, peer)
  return 0;
}
