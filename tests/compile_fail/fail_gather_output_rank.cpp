// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;

int main() {
  Comm c;
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Comm> x{c, {2, 3, 4}};
  dsp::DistTensor<float, 2, dsp::Replicated, Comm> y{c, {2, 3}};
  dsp::gather(x, y);  // y must have rank 3
  return 0;
}
