// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  T3<dsp::Replicated> r{c, {2, 3, 4}};
  auto y = dsp::dynamic_switch<1>(r);  // a Replicated tensor enters a sharding with split
  (void)y;
  return 0;
}
