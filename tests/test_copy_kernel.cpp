// SPDX-License-Identifier: BSD-3-Clause
// The device path of the copy kernel (detail::copy_runs_device: all tasks of a
// call in one launch, each thread finding its task by binary search in a
// prefix array), checked on the host against the host path, which the other
// tests check against the reference. No GPU is needed: the device path is
// generic in the execution space, and here it runs on the host's.
//  - Divisor: division without a divide instruction, against `/`.
//  - flat_index, word by word, against the byte map of the run patterns, for
//    random task lists, with words wider and narrower than the element.
//  - copy_runs_device against copy_runs' host path, byte for byte (bytes no
//    task writes must keep their value), on random task lists, element sizes
//    and buffer alignments, and on the packs and unpacks of real switch plans.
//  - The word chosen for a whole call, and the table cache (hits, uploads,
//    replacement, release).
// Seeded: DSP_PROPERTY_SEED=<n> as in test_plan_property.
#include <doctest/doctest.h>

#include <dsp/extents.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/partition.hpp>
#include <dsp/plan/switch.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

using dsp::Runs;
using dsp::detail::CopyTask;
using HostExec = Kokkos::DefaultHostExecutionSpace;

std::uint64_t seed() {
  static const std::uint64_t s = [] {
    const char* e = std::getenv("DSP_PROPERTY_SEED");
    std::uint64_t v = 20251122;
    if (e && *e) v = std::strtoull(e, nullptr, 10);
    std::printf("test_copy_kernel: seed %llu (rerun with DSP_PROPERTY_SEED=%llu)\n", (unsigned long long)v,
                (unsigned long long)v);
    return v;
  }();
  return s;
}

/// A random task list whose destinations do not overlap (so the order the
/// tasks run in does not matter), in buffers of dst_elems and src_elems.
struct Case {
  std::size_t eb = 1;
  std::vector<CopyTask> tasks;
  std::size_t dst_elems = 0, src_elems = 0;
};

Case random_case(std::mt19937_64& rng) {
  static constexpr std::size_t sizes[] = {1, 2, 3, 4, 6, 8, 12, 16};
  Case c;
  c.eb = sizes[rng() % std::size(sizes)];
  const std::size_t ntasks = rng() % 9;
  auto pick = [&](std::size_t lo, std::size_t hi) { return lo + rng() % (hi - lo + 1); };
  for (std::size_t k = 0; k < ntasks; ++k) {
    // Even sizes often, so that words wider than the element occur.
    const std::size_t piece = rng() % 2 ? 2 * pick(1, 4) : pick(1, 7);
    const std::size_t m = pick(1, 3), pieces = rng() % 5 == 0 ? 0 : pick(1, 14);
    const bool dst_long = rng() % 2;
    const std::size_t dlen = dst_long ? piece * m : piece, slen = dst_long ? piece : piece * m;
    const std::size_t elems = pieces * piece;
    auto runs = [&](std::size_t len, std::size_t& end) {
      const std::size_t gap = rng() % 2 ? 0 : 2 * pick(0, 2);
      Runs r{end + (rng() % 2 ? 0 : 2 * pick(0, 2)), len + gap, len};
      if (rng() % 4 == 0) r.stride = len * pick(2, 3);  // a stride that is unused when one run holds the task
      const std::size_t nruns = (elems + len - 1) / len;
      end = r.base + (nruns ? (nruns - 1) * r.stride + len : 0);
      return r;
    };
    CopyTask t;
    t.dst = runs(dlen, c.dst_elems);
    // Sources may overlap each other (reads only): start anywhere before the end.
    std::size_t s0 = c.src_elems > 0 && rng() % 3 == 0 ? rng() % c.src_elems : c.src_elems;
    std::size_t s_end = s0;
    t.src = runs(slen, s_end);
    c.src_elems = std::max(c.src_elems, s_end);
    t.elems = elems;
    c.tasks.push_back(t);
  }
  return c;
}

/// Byte b of a task's element stream, as a byte offset in the buffer of run
/// pattern r: the run patterns' map, element by element.
std::size_t byte_at(const Runs& r, std::size_t eb, std::size_t b) {
  return dsp::detail::element_at(r, b / eb) * eb + b % eb;
}

std::vector<unsigned char> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& x : v) x = static_cast<unsigned char>(rng());
  return v;
}

/// Runs `tasks` through the host path and the device path from the same
/// source into destinations of the same initial bytes; both at byte offsets
/// dst_off and src_off (alignment), and checks them byte for byte.
std::size_t compare_paths(std::mt19937_64& rng, std::size_t eb, std::span<const CopyTask> tasks, std::size_t dst_elems,
                          std::size_t src_elems, std::size_t dst_off, std::size_t src_off) {
  HostExec exec;
  // uint64 storage: the buffers start 8-byte aligned before the offsets.
  std::vector<std::uint64_t> src_store(src_elems * eb / 8 + 2), a_store(dst_elems * eb / 8 + 2),
      b_store(dst_elems * eb / 8 + 2), c_store(dst_elems * eb / 8 + 2), e_store(dst_elems * eb / 8 + 2);
  auto* src = reinterpret_cast<unsigned char*>(src_store.data()) + src_off;
  auto* a = reinterpret_cast<unsigned char*>(a_store.data()) + dst_off;
  auto* b = reinterpret_cast<unsigned char*>(b_store.data()) + dst_off;
  auto* c = reinterpret_cast<unsigned char*>(c_store.data()) + dst_off;
  auto* e = reinterpret_cast<unsigned char*>(e_store.data()) + dst_off;
  const auto s = random_bytes(rng, src_elems * eb), d = random_bytes(rng, dst_elems * eb);
  if (!s.empty()) std::memcpy(src, s.data(), s.size());  // memcpy of nothing from nullptr is still undefined
  if (!d.empty()) {
    std::memcpy(a, d.data(), d.size());
    std::memcpy(b, d.data(), d.size());
    std::memcpy(c, d.data(), d.size());
    std::memcpy(e, d.data(), d.size());
  }
  dsp::detail::copy_runs(exec, a, src, eb, tasks);
  dsp::detail::copy_runs_device(exec, b, src, eb, tasks);
  dsp::detail::copy_runs_tuned(exec, c, src, eb, tasks);
  dsp::detail::copy_runs_segments(exec, e, src, eb, tasks);
  exec.fence();
  // the tile kernel's other grids and shorter tiles (the default: a virtual team per tile); the
  // host's concurrency being 1, 1 and 3 teams walking the tiles grid-stride from a binary-searched start
  for (const auto& knobs : {"waves=1", "waves=2,unroll=3", "waves=0,unroll=1", "waves=1000,unroll=2"}) {
    auto& tuning = dsp::detail::device_tuning();
    const dsp::detail::DeviceTuning saved = tuning;
    tuning = dsp::detail::parse_device_tuning(knobs);
    std::vector<std::uint64_t> f_store(dst_elems * eb / 8 + 2);
    auto* f = reinterpret_cast<unsigned char*>(f_store.data()) + dst_off;
    if (!d.empty()) std::memcpy(f, d.data(), d.size());
    dsp::detail::copy_runs_tuned(exec, f, src, eb, tasks);
    exec.fence();
    tuning = saved;
    if (std::memcmp(a, f, dst_elems * eb) != 0) {
      std::size_t first = 0;
      while (a[first] == f[first]) ++first;
      FAIL("the tuned device path with " << knobs << " differs from the host path at byte " << first
                                         << " (element size " << eb << ", " << tasks.size() << " tasks)");
    }
  }
  if (std::memcmp(a, e, dst_elems * eb) != 0) {
    std::size_t first = 0;
    while (a[first] == e[first]) ++first;
    FAIL("the segment device path differs from the host path at byte " << first << " (element size " << eb << ", "
                                                                       << tasks.size() << " tasks)");
  }
  if (std::memcmp(a, c, dst_elems * eb) != 0) {
    std::size_t first = 0;
    while (a[first] == c[first]) ++first;
    FAIL("the tuned device path differs from the host path at byte "
         << first << " (element size " << eb << ", word " << dsp::detail::copy_word_bytes(c, src, eb, tasks, 16) << ", "
         << tasks.size() << " tasks)");
  }
  const std::size_t w = dsp::detail::copy_word_bytes(b, src, eb, tasks);
  if (std::memcmp(a, b, dst_elems * eb) != 0) {
    std::size_t first = 0;
    while (a[first] == b[first]) ++first;
    FAIL("device path differs from the host path at byte " << first << " (element size " << eb << ", word " << w << ", "
                                                           << tasks.size() << " tasks)");
  }
  return w;
}

}  // namespace

TEST_CASE("Divisor divides like / for every numerator below 2^32, and any numerator without the fast path") {
  std::mt19937_64 rng(seed() ^ 11);
  std::vector<std::uint64_t> ds{1, 2, 3, 5, 6, 7, 8, 10, 255, 256, 641, 65535, 65536, 65537, 1000003};
  for (int s = 1; s < 64; ++s)
    for (std::uint64_t p : {(std::uint64_t(1) << s) - 1, std::uint64_t(1) << s, (std::uint64_t(1) << s) + 1})
      ds.push_back(p);
  for (int k = 0; k < 200; ++k) ds.push_back(1 + rng() % (rng() % 2 ? 100000 : (std::uint64_t(1) << 40)));
  const std::uint64_t top = (std::uint64_t(1) << 32) - 1;
  for (std::uint64_t d : ds) {
    if (d == 0) continue;
    const auto fast = dsp::detail::Divisor::make(d, true), slow = dsp::detail::Divisor::make(d, false);
    std::vector<std::uint64_t> ns{0, 1, top, top - 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, top / d * d, top / d * d - 1};
    for (int k = 0; k < 200; ++k) ns.push_back(rng() % (top + 1));
    for (std::uint64_t n : ns) {
      if (n > top) continue;
      if (fast.div(n) != n / d) FAIL("fast: " << n << " / " << d << " gave " << fast.div(n));
    }
    for (int k = 0; k < 50; ++k) {
      const std::uint64_t n = rng();
      if (slow.div(n) != n / d) FAIL("slow: " << n << " / " << d << " gave " << slow.div(n));
    }
  }
}

TEST_CASE("flat_index maps every word of a call where the run patterns put its bytes") {
  std::mt19937_64 rng(seed() ^ 12);
  std::size_t checked = 0;
  for (int c = 0; c < 400; ++c) {
    const Case k = random_case(rng);
    for (std::size_t word : {std::size_t(1), std::size_t(2), std::size_t(4), std::size_t(8)}) {
      // The word must divide every byte offset the call uses (copy_word_bytes's rule, buffers aside).
      if (dsp::detail::copy_word_bytes(nullptr, nullptr, k.eb, k.tasks) % word != 0) continue;
      std::vector<std::size_t> table;
      const std::size_t n = dsp::detail::flatten_tasks(k.tasks, k.eb, word, table);
      const std::size_t* prefix = table.data();
      const auto* ft = reinterpret_cast<const dsp::detail::FlatTask*>(table.data() + n + 1);
      std::size_t e = 0;
      for (const CopyTask& t : k.tasks) {
        if (t.elems == 0) continue;
        for (std::size_t l = 0; l < t.elems * k.eb / word; ++l, ++e) {
          const auto i = dsp::detail::flat_index(prefix, ft, n, e);
          const std::size_t db = byte_at(t.dst, k.eb, l * word), sb = byte_at(t.src, k.eb, l * word);
          // The word's bytes are contiguous on both sides, and where the run patterns put them.
          REQUIRE(byte_at(t.dst, k.eb, l * word + word - 1) == db + word - 1);
          REQUIRE(byte_at(t.src, k.eb, l * word + word - 1) == sb + word - 1);
          if (i.dst * word != db || i.src * word != sb)
            FAIL("word " << e << " (word size " << word << ", element size " << k.eb << "): got dst " << i.dst * word
                         << " src " << i.src * word << ", expected " << db << ", " << sb);
          ++checked;
        }
      }
      REQUIRE(e == (n ? table[n] : 0));
    }
  }
  CHECK(checked > 10000);
}

TEST_CASE("flat_index without the fast division (a call of 2^32 words or more)") {
  // Tasks as large as that are not allocated: the table is built by hand with
  // slow divisors and sampled words are checked against the run patterns.
  std::mt19937_64 rng(seed() ^ 13);
  for (int c = 0; c < 200; ++c) {
    const std::size_t piece = 1 + rng() % 100000, m = 1 + rng() % 1000, pieces = (std::size_t(1) << 33) / piece + 1;
    const bool dst_long = rng() % 2;
    CopyTask t{Runs{rng() % 1000, piece * m * 3, dst_long ? piece * m : piece},
               Runs{rng() % 1000, piece * 2, dst_long ? piece : piece * m}, pieces * piece};
    if (!dst_long) t.src.stride = piece * m * 3, t.dst.stride = piece * 2;
    const CopyTask tasks[2] = {CopyTask{Runs{0, 4, 4}, Runs{0, 4, 4}, 4}, t};
    std::vector<std::size_t> table;
    const std::size_t n = dsp::detail::flatten_tasks(tasks, 1, 1, table);
    REQUIRE(n == 2);
    const auto* ft = reinterpret_cast<const dsp::detail::FlatTask*>(table.data() + n + 1);
    REQUIRE(ft[1].piece.m == 0);  // the call is too large for the fast path
    for (int s = 0; s < 100; ++s) {
      const std::size_t l = rng() % t.elems;
      const auto i = dsp::detail::flat_index(table.data(), ft, n, 4 + l);
      REQUIRE(i.dst == dsp::detail::element_at(t.dst, l));
      REQUIRE(i.src == dsp::detail::element_at(t.src, l));
    }
  }
}

TEST_CASE("copy_runs_device writes what the host path writes, and nothing else") {
  std::mt19937_64 rng(seed() ^ 14);
  std::size_t words[9] = {};
  for (int c = 0; c < 1500; ++c) {
    const Case k = random_case(rng);
    const std::size_t dst_off = rng() % 3 == 0 ? rng() % 8 : 0, src_off = rng() % 3 == 0 ? rng() % 8 : 0;
    ++words[compare_paths(rng, k.eb, k.tasks, k.dst_elems, k.src_elems, dst_off, src_off)];
  }
  // Every word size was chosen for some calls.
  CHECK(words[1] > 0);
  CHECK(words[2] > 0);
  CHECK(words[4] > 0);
  CHECK(words[8] > 0);
}

TEST_CASE("copy_runs_tuned and _segments: long pieces, 16-byte words, tiles, and the copy engine, as the host path") {
  // The cases above have short pieces; here pieces of 32 words and more (the
  // per-piece loop; tiles of whole pieces below 256 words, pieces cut into
  // tiles from 256 up), tasks of several segments and tiles, and contiguous
  // tasks of 1 MiB and more (Kokkos::deep_copy: the copy engine on a device),
  // some of them several runs that follow each other (stride == length).
  std::mt19937_64 rng(seed() ^ 16);
  std::size_t sixteen = 0;
  for (int c = 0; c < 60; ++c) {
    static constexpr std::size_t sizes[] = {1, 2, 4, 8, 16};
    const std::size_t eb = sizes[rng() % std::size(sizes)];
    std::vector<CopyTask> tasks;
    std::size_t dst_elems = 0, src_elems = 0;
    for (std::size_t k = 0, nt = 1 + rng() % 4; k < nt; ++k) {
      const bool engine = rng() % 4 == 0;
      const std::size_t piece = engine ? ((std::size_t(1) << 20) / eb + rng() % 64) : 32 + rng() % 3000;
      const bool abutting = engine && rng() % 2;  // runs that follow each other: still one range
      const std::size_t m = 1 + rng() % 3, pieces = engine ? 1 + abutting : 1 + rng() % 40;
      const bool dst_long = rng() % 2;
      const std::size_t dlen = engine ? piece : dst_long ? piece * m : piece;
      const std::size_t slen = engine ? piece : dst_long ? piece : piece * m;
      const std::size_t elems = pieces * piece;
      auto runs = [&](std::size_t len, std::size_t& end) {
        Runs r{end + (rng() % 2 ? 0 : rng() % 8), len + (abutting || rng() % 2 ? 0 : rng() % 9), len};
        const std::size_t nruns = (elems + len - 1) / len;
        end = r.base + (nruns - 1) * r.stride + len;
        return r;
      };
      CopyTask t;
      t.dst = runs(dlen, dst_elems);
      std::size_t s_end = src_elems;
      t.src = runs(slen, s_end);
      src_elems = s_end;
      t.elems = elems;
      tasks.push_back(t);
    }
    sixteen += compare_paths(rng, eb, tasks, dst_elems, src_elems, 0, 0) == 8 &&
               dsp::detail::copy_word_bytes(nullptr, nullptr, eb, tasks, 16) == 16;
  }
  CHECK(sixteen > 0);
}

TEST_CASE("copy_runs_device packs and unpacks real switch plans as the host path does") {
  std::mt19937_64 rng(seed() ^ 15);
  for (int c = 0; c < 300; ++c) {
    const std::size_t rank = 2 + rng() % 3;
    std::vector<std::size_t> g(rank);
    for (auto& e : g) e = rng() % 6 == 0 ? rng() % 3 : 1 + rng() % 9;
    const std::size_t i = rng() % rank, j = (i + 1 + rng() % (rank - 1)) % rank;
    const int n = 1 + int(rng() % 9), p = int(rng() % std::size_t(n));
    static constexpr std::size_t sizes[] = {1, 2, 4, 8, 12};
    const std::size_t eb = sizes[rng() % std::size(sizes)];
    const auto plan = dsp::detail::plan_alltoallv(g, i, j, p, n);
    std::size_t in_elems = 1, out_elems = 1;
    for (std::size_t d = 0; d < rank; ++d) {
      in_elems *= d == i ? dsp::Partition{g[d], std::size_t(n)}.count(std::size_t(p)) : g[d];
      out_elems *= d == j ? dsp::Partition{g[d], std::size_t(n)}.count(std::size_t(p)) : g[d];
    }
    INFO("switch " << i << " -> " << j << " of " << dsp::detail::text(g) << " on rank " << p << " of " << n);
    compare_paths(rng, eb, plan.pack, plan.send_elems, in_elems, 0, 0);
    compare_paths(rng, eb, plan.unpack, out_elems, plan.recv_elems, 0, 0);
    compare_paths(rng, eb, std::span(&plan.self, 1), out_elems, in_elems, 0, 0);
  }
}

TEST_CASE("the device task table cache: warm calls upload nothing; replacement and release") {
  using Cache = dsp::detail::TaskTableCache<Kokkos::HostSpace>;
  HostExec exec;
  Cache cache;
  std::vector<std::size_t> a{0, 5, 7, 9}, b{0, 5, 7, 10};
  const std::size_t* pa = cache.get(exec, a);
  CHECK(std::equal(a.begin(), a.end(), pa));
  CHECK(cache.get(exec, a) == pa);  // found by contents
  const std::size_t* pb = cache.get(exec, b);
  CHECK(pb != pa);
  CHECK(std::equal(b.begin(), b.end(), pb));
  CHECK(cache.uploads() == 2);
  CHECK(cache.hits() == 1);
  // More tables than slots: the least recently used are replaced, every table is right.
  std::vector<std::size_t> t(3);
  for (std::size_t k = 0; k < 3 * Cache::kSlots; ++k) {
    t = {k, k + 1, k + 2 + k % 5};
    CHECK(std::equal(t.begin(), t.end(), cache.get(exec, t)));
    CHECK(cache.get(exec, a) == pa);  // kept: used every time
  }
  CHECK(cache.bytes() <= Cache::kSlots * 4 * sizeof(std::size_t));
  cache.release();
  CHECK(cache.bytes() == 0);

  // The process-wide cache behind copy_runs_device: a repeated call is a hit.
  auto& global = dsp::detail::task_table_cache<Kokkos::HostSpace>();
  std::vector<float> src(64), dst(64);
  const CopyTask tasks[2] = {CopyTask{Runs{0, 8, 4}, Runs{0, 4, 4}, 16}, CopyTask{Runs{4, 8, 4}, Runs{16, 4, 4}, 16}};
  dsp::detail::copy_runs_device(exec, reinterpret_cast<unsigned char*>(dst.data()),
                                reinterpret_cast<const unsigned char*>(src.data()), sizeof(float), tasks);
  const std::size_t up = global.uploads(), hits = global.hits();
  dsp::detail::copy_runs_device(exec, reinterpret_cast<unsigned char*>(dst.data()),
                                reinterpret_cast<const unsigned char*>(src.data()), sizeof(float), tasks);
  CHECK(global.uploads() == up);
  CHECK(global.hits() == hits + 1);
}

TEST_CASE("one_range: runs that follow each other are one contiguous range") {
  CopyTask t{Runs{0, 10, 10}, Runs{5, 10, 10}, 30};
  CHECK(dsp::detail::one_range(t));
  t.dst.stride = 11;  // a gap between the destination's runs
  CHECK_FALSE(dsp::detail::one_range(t));
  t = CopyTask{Runs{0, 11, 10}, Runs{5, 40, 30}, 10};  // within one run on both sides
  CHECK(dsp::detail::one_range(t));
}

TEST_CASE("DSP_DEVICE_TUNING: parsed item by item, malformed items keep their defaults") {
  using dsp::detail::parse_device_tuning;
  const auto d = parse_device_tuning("");  // the configuration measured best on an H200, 2026-11-27
  CHECK(d.waves == 0);
  CHECK(d.unroll == 8);
  CHECK(d.groups == 1);
  CHECK(d.hardware_convert);
  const auto t = parse_device_tuning("waves=2,unroll=4,groups=4,convert=software");
  CHECK(t.waves == 2);
  CHECK(t.unroll == 4);
  CHECK(t.groups == 4);
  CHECK_FALSE(t.hardware_convert);
  const auto bad =
      parse_device_tuning("waves=x,unroll=9,groups=0,stream=1,fp8blocks=2,convert=fast,nonsense,=3,waves=");
  CHECK(bad.waves == 0);
  CHECK(bad.unroll == 8);
  CHECK(bad.groups == 1);
  CHECK(bad.hardware_convert);
  CHECK(parse_device_tuning("waves=1,convert=software,groups=2").groups == 2);
}
