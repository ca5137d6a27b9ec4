// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

namespace st = dsp::steps;

int main() {
  // A Blocks layout's cost depends on its run-time sizes, which a pipeline does not hold.
  using BH = dsp::Axes<dsp::Blocks<1>, dsp::Sharded<2>>;
  const auto c = st::to<dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>>.cost<BH>(
      std::array<std::size_t, 3>{2, 8, 4}, 8, std::array<int, 2>{1, 1}, std::array<int, 2>{0, 0});
  (void)c;
  return 0;
}
