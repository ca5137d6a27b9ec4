// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  T3<dsp::Replicated> r{c, {2, 3, 4}};
  auto s = dsp::split<5>(r);
  (void)s;
  return 0;
}
