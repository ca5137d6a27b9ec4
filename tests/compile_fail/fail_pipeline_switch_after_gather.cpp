// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

namespace st = dsp::steps;
using Comm = dsp::SelfCommunicator;

int main() {
  constexpr auto p = st::split<0> | st::gather | st::switch_to<1>;  // switch needs Sharded
  (void)p;
  return 0;
}
