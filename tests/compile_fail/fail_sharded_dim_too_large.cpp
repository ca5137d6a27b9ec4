// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  dsp::DistTensor<float, 2, dsp::Sharded<2>, Comm> x{c, {2, 3}};
  (void)x;
  return 0;
}
