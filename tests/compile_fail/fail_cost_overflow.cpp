// SPDX-License-Identifier: BSD-3-Clause
#include <dsp/dsp.hpp>

#include <array>

// float [2^22]^3 over 2 ranks: each rank sends 2^66 - 2^65 bytes, past size_t.
// The model must not wrap to a small number that a byte budget would accept.
constexpr std::array<std::size_t, 3> e{std::size_t(1) << 22, std::size_t(1) << 22, std::size_t(1) << 22};
static_assert(dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<1>>(e, sizeof(float), 2, 0).max_bytes <=
              (std::size_t(1) << 40));

int main() { return 0; }
