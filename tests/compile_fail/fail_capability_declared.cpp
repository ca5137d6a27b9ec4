// SPDX-License-Identifier: BSD-3-Clause
// A wrapper that declares a capability it does not have (it forgot to forward
// exchange_runs): dsp refuses to use it, naming the capability.
#include <dsp/dsp.hpp>

struct Wrapped : dsp::SelfCommunicator {
  // Self's capabilities but splitting (its split returns a SelfCommunicator, not a Wrapped), plus one it lacks.
  static constexpr unsigned capabilities =
      (dsp::capabilities_declared<dsp::SelfCommunicator>() & ~unsigned(dsp::kSplittable)) | dsp::kPeerExchange;
};

int main() {
  Wrapped c;
  dsp::DistTensor<float, 2, dsp::Sharded<0>, Wrapped> x{c, {2, 3}};
  auto y = dsp::dynamic_switch<1>(x);
  return int(y.local_size());
}
