// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;

int main() {
  dsp::Mesh<2, Comm>* m = nullptr;  // the type is what is under test
  using X = dsp::DistTensor<float, 3, dsp::Axes<dsp::Sharded<0>>, dsp::Mesh<2, Comm>>;  // one placement, two axes
  X* x = nullptr;
  (void)m;
  (void)x->local();
  return 0;
}
