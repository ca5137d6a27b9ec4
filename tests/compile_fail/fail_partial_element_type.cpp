// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;

struct Pair {
  float a, b;
};

int main() {
  Comm c;
  dsp::DistTensor<Pair, 2, dsp::Partial<dsp::Sum>, Comm> x{c, {2, 3}};
  auto y = dsp::redistribute<dsp::Replicated>(x);  // a pending sum of a struct: nothing to reduce with
  (void)y;
  return 0;
}
