// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  T3<dsp::Replicated> r{c, {2, 3, 4}};
  auto s = dsp::split<1>(r);
  auto t = dsp::dynamic_switch<2>(s);
  T3<dsp::Sharded<0>> u{c, {2, 3, 4}};
  dsp::dynamic_switch<0>(t, u);
  auto g = dsp::gather(u);
  (void)g;
  return 0;
}
