// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

namespace st = dsp::steps;
using Comm = dsp::SelfCommunicator;

int main() {
  constexpr auto p = st::split<1> | st::split<2>;  // split needs Replicated
  (void)p;
  return 0;
}
