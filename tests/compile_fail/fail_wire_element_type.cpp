// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

#include <cstdint>

using Comm = dsp::SelfCommunicator;

int main() {
  Comm c;
  dsp::DistTensor<std::int32_t, 2, dsp::Sharded<0>, Comm> x{c, {2, 3}};
  auto y = dsp::dynamic_switch<1>(x, dsp::Wire::bf16);  // integers travel exact only
  (void)y;
  return 0;
}
