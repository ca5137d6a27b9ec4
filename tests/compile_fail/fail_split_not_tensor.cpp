// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  auto s = dsp::split<0>(1.5);
  (void)s;
  return 0;
}
