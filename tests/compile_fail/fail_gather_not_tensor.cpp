// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

using Comm = dsp::SelfCommunicator;
template <class L>
using T3 = dsp::DistTensor<float, 3, L, Comm>;

int main() {
  Comm c;
  Kokkos::View<float*> v("v", 4);
  auto g = dsp::gather(v);
  (void)g;
  return 0;
}
