// SPDX-License-Identifier: BSD-3-Clause
// Layout rules, checked at compile time (static_assert) and reported to doctest.
#include <dsp/dsp.hpp>

#include <doctest/doctest.h>

using dsp::Replicated;
using dsp::Sharded;

static_assert(dsp::Layout<Replicated> && dsp::Layout<Sharded<0>> && dsp::Layout<Sharded<5>>);
static_assert(!dsp::Layout<int> && !dsp::Layout<float>);
static_assert(dsp::is_sharded_v<Sharded<2>> && !dsp::is_sharded_v<Replicated>);
static_assert(Sharded<3>::dim == 3);
static_assert(dsp::layout_fits_v<Sharded<2>, 3> && !dsp::layout_fits_v<Sharded<3>, 3>);
static_assert(dsp::layout_fits_v<Replicated, 1>);

using P = dsp::Primitive;
using C = dsp::Collective;
static_assert(dsp::primitive_for<Sharded<1>, Sharded<1>>() == P::identity);
static_assert(dsp::primitive_for<Sharded<0>, Sharded<1>>() == P::dynamic_switch);
static_assert(dsp::primitive_for<Replicated, Sharded<1>>() == P::split);
static_assert(dsp::primitive_for<Sharded<2>, Replicated>() == P::gather);
static_assert(dsp::primitive_for<Replicated, Replicated>() == P::identity);
static_assert(dsp::collective_for<Sharded<0>, Sharded<1>>() == C::all_to_all);
static_assert(dsp::collective_for<Sharded<0>, Replicated>() == C::all_gather);
static_assert(dsp::collective_for<Replicated, Sharded<0>>() == C::none);
static_assert(dsp::collective_for<Sharded<0>, Sharded<0>>() == C::none);

static_assert(dsp::Communicator<dsp::SelfCommunicator>);
static_assert(!dsp::Communicator<int>);

TEST_CASE("layout codes exchanged between ranks are distinct") {
  CHECK(dsp::detail::layout_code<Replicated>() == -1);
  CHECK(dsp::detail::layout_code<Sharded<0>>() == 0);
  CHECK(dsp::detail::layout_code<Sharded<4>>() == 4);
}

TEST_CASE("type identities exchanged between ranks tell types apart") {
  dsp::detail::Signature a, b, c;
  dsp::detail::set_type<float>(a);
  dsp::detail::set_type<std::int32_t>(b);
  dsp::detail::set_type<float>(c);
  CHECK(a.type_hash != b.type_hash);
  CHECK(a.type_hash == c.type_hash);
  CHECK(std::string(a.type) == "float");
}

TEST_CASE("the agreement digest changes with every field the ranks compare, and only with those") {
  using dsp::detail::Signature;
  Signature base;
  base.op = 3;
  dsp::detail::set_type<float>(base);
  base.tensor_rank = 3;
  base.extents[0] = 2, base.extents[1] = 3, base.extents[2] = 5;
  base.src_layout[0] = 0, base.dst_layout[0] = 1;
  base.path = 2;
  base.site_hash = 77;
  const auto d0 = dsp::detail::digest_of(base);
  auto differs = [&](Signature s) {
    const auto d = dsp::detail::digest_of(s);
    CHECK_FALSE(dsp::detail::same_call(base, s));
    return d.op != d0.op || d.hash[0] != d0.hash[0] || d.hash[1] != d0.hash[1];
  };
  Signature s = base;
  s.op = 4;
  CHECK(differs(s));
  s = base, dsp::detail::set_type<std::int32_t>(s);
  CHECK(differs(s));
  s = base, s.tensor_rank = 2;
  CHECK(differs(s));
  s = base, std::swap(s.extents[0], s.extents[1]);  // the same extents in another order
  CHECK(differs(s));
  s = base, s.src_layout[0] = 1, s.dst_layout[0] = 0;
  CHECK(differs(s));
  s = base, s.root = 0;
  CHECK(differs(s));
  s = base, s.arg = 1;
  CHECK(differs(s));
  s = base, s.wire = 1;
  CHECK(differs(s));
  s = base, s.path = 3;
  CHECK(differs(s));
  s = base, s.site_hash = 78;
  CHECK(differs(s));
  s = base, s.mesh_axes = 2, s.mesh_shape[0] = 2, s.mesh_shape[1] = 1;
  CHECK(differs(s));
  // Text kept for messages only, and the status (exchanged beside the hash).
  s = base, s.site_line = 9, s.site[0] = 'x', s.status = 1;
  CHECK(dsp::detail::same_call(base, s));
  const auto d = dsp::detail::digest_of(s);
  CHECK(d.hash[0] == d0.hash[0]);
  CHECK(d.hash[1] == d0.hash[1]);
}
