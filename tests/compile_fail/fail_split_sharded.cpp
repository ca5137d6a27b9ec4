// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  T3<dsp::Sharded<0>> x{c, {2, 3, 4}};
  auto s = dsp::split<1>(x);  // split takes a Replicated tensor
  (void)s;
  return 0;
}
