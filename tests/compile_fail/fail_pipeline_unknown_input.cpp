// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

namespace st = dsp::steps;
using Comm = dsp::SelfCommunicator;

int main() {
  constexpr auto back = (st::switch_to<1> | st::gather).adjoint();  // input layout unknown
  (void)back;
  return 0;
}
