// SPDX-License-Identifier: BSD-3-Clause
// dsp: the one copy kernel every primitive reduces to: copies between run
// patterns (plan/tasks.hpp), on the tensor's execution space.
#pragma once

#include <dsp/kernels/tuning.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/settings.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dsp::detail {

template <class Exec>
inline constexpr bool is_host_exec_v = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

// ---------------------------------------------------------------- device path
//
// On an execution space that cannot reach host memory (a GPU), a call's tasks
// (one per peer for a pack or an unpack) are copied by one kernel launch. The
// host flattens them into a table: a prefix array of their sizes in words and
// each task's runs in words. Thread e finds its task by binary search in the
// prefix array and copies word e of it. The word is the widest (8, 4, 2 or 1
// bytes) that every byte offset of the call is a multiple of. Tables live on
// the device in a small cache (TaskTableCache), so a warm call uploads and
// allocates nothing. The same code runs on host execution spaces too, which
// is how the tests check it (copy_runs_device).

/// Division by a fixed divisor d >= 1. For numerators below 2^32 without a
/// divide instruction (64-bit division is slow on GPUs): with m = ceil(2^64 /
/// d), n / d is the high 64 bits of m * n (Lemire, Kaser and Kurz, "Faster
/// remainder by direct computation", 2019), exact for every n < 2^32 and d >= 2.
struct Divisor {
  std::size_t d = 1;
  std::uint64_t m = 0;  // ceil(2^64 / d) when every numerator is below 2^32, else 0 (divide)

  /// `small`: every numerator this divisor will see is below 2^32.
  static Divisor make(std::size_t d, bool small) { return Divisor{d, small && d > 1 ? ~std::uint64_t(0) / d + 1 : 0}; }
  KOKKOS_INLINE_FUNCTION std::size_t div(std::size_t n) const {
    if (d == 1) return n;
    if (m == 0) return n / d;
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __umul64hi(m, n);
#else
    // The high 64 bits of m * n for n < 2^32, in 64-bit arithmetic.
    return ((m >> 32) * n + (((m & 0xffffffffu) * n) >> 32)) >> 32;
#endif
  }
};

struct FlatIndex {
  std::size_t dst = 0, src = 0;
};

/// One CopyTask in words: the runs' bases and strides, the piece (the shorter
/// run), and how many pieces make a run on each side (one side has 1).
struct FlatTask {
  std::size_t dbase = 0, dstride = 0, sbase = 0, sstride = 0;
  Divisor piece, md, ms;
  /// Where word l of the task is written and read. The arithmetic is the
  /// host path's, in words.
  KOKKOS_INLINE_FUNCTION FlatIndex at(std::size_t l) const {
    const std::size_t q = piece.div(l), o = l - q * piece.d;  // piece q of the task, word o in it
    const std::size_t qd = md.div(q), qs = ms.div(q);         // the runs piece q lies in
    return FlatIndex{dbase + qd * dstride + (q - qd * md.d) * piece.d + o,
                     sbase + qs * sstride + (q - qs * ms.d) * piece.d + o};
  }
};

/// Task `t` (elements of `elem_bytes`) in words of `word` bytes; `small`:
/// every word index of the call is below 2^32 (Divisor's fast path).
inline FlatTask flat_task(const CopyTask& t, std::size_t elem_bytes, std::size_t word, bool small) {
  const std::size_t piece = t.dst.len < t.src.len ? t.dst.len : t.src.len;
  auto words = [&](std::size_t elems) { return elems * elem_bytes / word; };
  return FlatTask{words(t.dst.base),
                  words(t.dst.stride),
                  words(t.src.base),
                  words(t.src.stride),
                  Divisor::make(words(piece), small),
                  Divisor::make(t.dst.len / piece, small),
                  Divisor::make(t.src.len / piece, small)};
}

/// Where word `e` of a flattened call is written and read. `prefix` has n + 1
/// strictly increasing entries from 0: task k covers words [prefix[k],
/// prefix[k + 1]). The arithmetic is the host path's, in words.
KOKKOS_INLINE_FUNCTION FlatIndex flat_index(const std::size_t* prefix, const FlatTask* tasks, std::size_t n,
                                            std::size_t e) {
  std::size_t lo = 0, hi = n;  // prefix[lo] <= e < prefix[hi]
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (prefix[mid] <= e) lo = mid;
    else hi = mid;
  }
  return tasks[lo].at(e - prefix[lo]);
}

/// The widest word (`widest`, 8, 4, 2 or 1 bytes; widest a power of two up to
/// 16) that every byte offset of the call is a multiple of: both buffers'
/// addresses and, in every non-empty task, both run bases, the piece and the
/// strides that are used (a task within one run never steps by its stride).
/// Decided once for the whole call.
inline std::size_t copy_word_bytes(const void* dst, const void* src, std::size_t elem_bytes,
                                   std::span<const CopyTask> tasks, std::size_t widest = 8) {
  std::size_t a = reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src);
  for (const CopyTask& t : tasks) {
    if (t.elems == 0) continue;
    std::size_t off = t.dst.base | t.src.base | (t.dst.len < t.src.len ? t.dst.len : t.src.len);
    if (t.elems > t.dst.len) off |= t.dst.stride;
    if (t.elems > t.src.len) off |= t.src.stride;
    a |= off * elem_bytes;
  }
  std::size_t w = widest;
  while (w > 1 && a % w) w /= 2;
  return w;
}

/// A call's table, as the kernel reads it: n + 1 prefix entries, then n
/// FlatTasks (the non-empty tasks, in words of `word` bytes). Returns n.
inline std::size_t flatten_tasks(std::span<const CopyTask> tasks, std::size_t elem_bytes, std::size_t word,
                                 std::vector<std::size_t>& table) {
  static_assert(sizeof(FlatTask) % sizeof(std::size_t) == 0 && alignof(FlatTask) <= alignof(std::size_t));
  constexpr std::size_t per = sizeof(FlatTask) / sizeof(std::size_t);
  std::size_t n = 0, total = 0;
  for (const CopyTask& t : tasks)
    if (t.elems) ++n, total += t.elems * elem_bytes / word;
  const bool small = total < (std::size_t(1) << 32);
  table.assign(n + 1 + n * per, 0);
  std::size_t k = 0;
  for (const CopyTask& t : tasks) {
    if (t.elems == 0) continue;
    const FlatTask f = flat_task(t, elem_bytes, word, small);
    table[k + 1] = table[k] + t.elems * elem_bytes / word;
    std::memcpy(table.data() + n + 1 + k * per, &f, sizeof f);
    ++k;
  }
  return n;
}

/// Device copies of recent task tables, for one memory space. Plans are
/// cached, so a steady loop presents the same tables again: those calls find
/// theirs here, by contents, and upload and allocate nothing. Up to kSlots
/// tables, each in a grow-only buffer; the least recently used one is
/// replaced. Thread safe. Released at Kokkos::finalize (task_table_cache).
template <class MemorySpace>
class TaskTableCache {
 public:
  static constexpr std::size_t kSlots = 32;

  /// The device copy of `table`, uploaded on `exec` if it is not here. An
  /// upload waits for `exec` (so that work on other instances may use the
  /// table at once); replacing a table waits for the whole device (kernels
  /// on any instance may still read it). A warm call does neither.
  template <class Exec>
  const std::size_t* get(const Exec& exec, const std::vector<std::size_t>& table) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (std::size_t v : table) h = (h ^ v) * 1099511628211ull;
    std::lock_guard<std::mutex> lock(mutex_);
    ++clock_;
    Slot* victim = &slots_[0];
    for (Slot& s : slots_) {
      if (s.used && s.hash == h && s.host == table) {
        s.used = clock_;
        ++hits_;
        return s.device.data();
      }
      if (s.used < victim->used) victim = &s;
    }
    if (victim->used) Kokkos::fence();
    if (victim->device.extent(0) < table.size()) {
      victim->device = Device();  // release first: peak memory is the new size, not old + new
      victim->device =
          Device(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("dsp::copy_runs::tasks")), table.size());
    }
    victim->host = table;
    victim->hash = h;
    victim->used = clock_;
    using Host = Kokkos::View<const std::size_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(exec, Kokkos::subview(victim->device, std::make_pair(std::size_t(0), table.size())),
                      Host(victim->host.data(), table.size()));
    exec.fence();
    ++uploads_;
    return victim->device.data();
  }

  /// Frees every table (Kokkos::finalize; tests).
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Slot& s : slots_) s = Slot{};
  }
  /// Counters for tests: tables found, tables uploaded, device bytes held.
  std::size_t hits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hits_;
  }
  std::size_t uploads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return uploads_;
  }
  std::size_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t b = 0;
    for (const Slot& s : slots_) b += s.device.extent(0) * sizeof(std::size_t);
    return b;
  }

 private:
  using Device = Kokkos::View<std::size_t*, MemorySpace>;
  struct Slot {
    std::vector<std::size_t> host;     // the table (the key, and the upload's source)
    std::uint64_t hash = 0, used = 0;  // used: last use on the cache's clock; 0: empty
    Device device;
  };
  mutable std::mutex mutex_;
  std::array<Slot, kSlots> slots_{};
  std::uint64_t clock_ = 0;
  std::size_t hits_ = 0, uploads_ = 0;
};

/// The process's table cache for MemorySpace; emptied at Kokkos::finalize.
template <class MemorySpace>
TaskTableCache<MemorySpace>& task_table_cache() {
  static TaskTableCache<MemorySpace> cache;
  static const bool hooked = [] {
    Kokkos::push_finalize_hook([] { cache.release(); });
    return true;
  }();
  (void)hooked;
  return cache;
}

template <class Word, class Exec>
void launch_flat(const Exec& exec, unsigned char* dst, const unsigned char* src, const std::size_t* table,
                 std::size_t n, std::size_t total) {
  Word* out = reinterpret_cast<Word*>(dst);
  const Word* in = reinterpret_cast<const Word*>(src);
  const std::size_t* prefix = table;
  const FlatTask* tasks = reinterpret_cast<const FlatTask*>(table + n + 1);
  Kokkos::parallel_for(
      "dsp::copy_runs", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, total),
      KOKKOS_LAMBDA(std::size_t e) {
        const FlatIndex i = flat_index(prefix, tasks, n, e);
        out[i.dst] = in[i.src];
      });
}

/// The device path of copy_runs: every task of the call in one kernel launch
/// on `exec`. Works on any execution space (the tests run it on the host).
/// Does not fence, except when it uploads a table (TaskTableCache::get).
template <class Exec>
void copy_runs_device(const Exec& exec, unsigned char* dst, const unsigned char* src, std::size_t elem_bytes,
                      std::span<const CopyTask> tasks) {
  const std::size_t word = copy_word_bytes(dst, src, elem_bytes, tasks);
  thread_local std::vector<std::size_t> table;
  const std::size_t n = flatten_tasks(tasks, elem_bytes, word, table);
  if (n == 0) return;
  const std::size_t total = table[n];
  const std::size_t* dev = task_table_cache<typename Exec::memory_space>().get(exec, table);
  switch (word) {
    case 8: return launch_flat<std::uint64_t>(exec, dst, src, dev, n, total);
    case 4: return launch_flat<std::uint32_t>(exec, dst, src, dev, n, total);
    case 2: return launch_flat<std::uint16_t>(exec, dst, src, dev, n, total);
    default: return launch_flat<std::uint8_t>(exec, dst, src, dev, n, total);
  }
}

// ------------------------------------------------ device path, segment schedule
//
// DeviceKernels::segments (the first tuned schedule, measured beside the tile
// schedule below; docs/gpu.md): the call's tasks are cut into
// segments of kSegmentWords words, a team per segment, so no thread searches
// for its task; words are up to 16 bytes wide; each thread keeps four words
// in flight. A task whose pieces are at least a warp long is walked piece by
// piece (the index arithmetic once per piece, the team's threads on
// neighbouring words); shorter pieces are found word by word with Divisor's
// multiply. A task that is one contiguous range on both sides and at least
// kEngineBytes long goes to the copy engine (Kokkos::deep_copy on the
// execution space: cudaMemcpyAsync on its stream). The table, as the
// baseline's, is cached on the device by contents.

/// Words per segment (a team's share of a task).
inline constexpr std::size_t kSegmentWords = 4096;
/// Contiguous tasks of at least this many bytes go to the copy engine.
inline constexpr std::size_t kEngineBytes = std::size_t(1) << 20;

/// A 16-byte word: one vector load and store on a GPU. (And an 8-byte one.)
struct alignas(16) Word16 {
  std::uint64_t lo, hi;
};
struct alignas(8) Word8 {
  std::uint64_t v;
};

/// A segment of a call: words [first, first + words) of task `task`.
struct Segment {
  std::size_t task = 0, first = 0, words = 0;
};

/// Whether a run pattern holding `elems` elements is one contiguous range
/// (within one run, or runs that follow each other).
constexpr bool contiguous_runs(const Runs& r, std::size_t elems) { return elems <= r.len || r.stride == r.len; }
/// Whether a task is one contiguous range on both sides.
constexpr bool one_range(const CopyTask& t) {
  return contiguous_runs(t.dst, t.elems) && contiguous_runs(t.src, t.elems);
}

/// The tuned table: [segments, tasks, then the segments (3 words each), then
/// the FlatTasks]; the engine tasks are left out (`engine` lists them).
inline void segment_tasks(std::span<const CopyTask> tasks, std::size_t elem_bytes, std::size_t word,
                          std::vector<std::size_t>& table, std::vector<const CopyTask*>& engine) {
  static_assert(sizeof(FlatTask) % sizeof(std::size_t) == 0 && sizeof(Segment) == 3 * sizeof(std::size_t));
  constexpr std::size_t per = sizeof(FlatTask) / sizeof(std::size_t);
  engine.clear();
  auto to_engine = [&](const CopyTask& t) { return one_range(t) && t.elems * elem_bytes >= kEngineBytes; };
  std::size_t nt = 0, ns = 0, total = 0;
  for (const CopyTask& t : tasks) {
    if (t.elems == 0) continue;
    if (to_engine(t)) {
      engine.push_back(&t);
      continue;
    }
    const std::size_t w = t.elems * elem_bytes / word;
    ++nt, ns += (w + kSegmentWords - 1) / kSegmentWords, total += w;
  }
  const bool small = total < (std::size_t(1) << 32);
  table.assign(2 + 3 * ns + per * nt, 0);
  table[0] = ns, table[1] = nt;
  std::size_t k = 0, seg = 0;
  for (const CopyTask& t : tasks) {
    if (t.elems == 0 || to_engine(t)) continue;
    const FlatTask f = flat_task(t, elem_bytes, word, small);
    std::memcpy(table.data() + 2 + 3 * ns + k * per, &f, sizeof f);
    const std::size_t w = t.elems * elem_bytes / word;
    for (std::size_t first = 0; first < w; first += kSegmentWords, ++seg) {
      const Segment s{k, first, w - first < kSegmentWords ? w - first : kSegmentWords};
      std::memcpy(table.data() + 2 + 3 * seg, &s, sizeof s);
    }
    ++k;
  }
}

/// Copies words [l, l + len) of task t (all in one piece) with a team: each
/// thread four words in flight.
template <class Word, class Member>
KOKKOS_INLINE_FUNCTION void team_copy_run(const Member& m, Word* out, const Word* in, std::size_t db, std::size_t sb,
                                          std::size_t len) {
  const std::size_t T = std::size_t(m.team_size());
  std::size_t i = std::size_t(m.team_rank());
  for (; i + 3 * T < len; i += 4 * T) {
    const Word a = in[sb + i], b = in[sb + i + T], c = in[sb + i + 2 * T], d = in[sb + i + 3 * T];
    out[db + i] = a, out[db + i + T] = b, out[db + i + 2 * T] = c, out[db + i + 3 * T] = d;
  }
  for (; i < len; i += T) out[db + i] = in[sb + i];
}

template <class Word, class Exec>
void launch_segments(const Exec& exec, unsigned char* dst, const unsigned char* src, const std::size_t* table,
                     std::size_t ns) {
  Word* out = reinterpret_cast<Word*>(dst);
  const Word* in = reinterpret_cast<const Word*>(src);
  const Segment* segs = reinterpret_cast<const Segment*>(table + 2);
  const FlatTask* tasks = reinterpret_cast<const FlatTask*>(table + 2 + 3 * ns);
  using Policy = Kokkos::TeamPolicy<Exec>;
  using Member = typename Policy::member_type;
  const int team = is_host_exec_v<Exec> ? 1 : 256;
  Kokkos::parallel_for(
      "dsp::copy_runs_tuned", Policy(exec, int(ns), team), KOKKOS_LAMBDA(const Member& m) {
        const Segment s = segs[m.league_rank()];
        const FlatTask t = tasks[s.task];
        const std::size_t P = t.piece.d, end = s.first + s.words;
        if (P >= 32) {  // long pieces: the arithmetic once per piece
          for (std::size_t l = s.first; l < end;) {
            const std::size_t o = l - t.piece.div(l) * P;  // the word's place in its piece
            const std::size_t len = P - o < end - l ? P - o : end - l;
            const FlatIndex at = t.at(l);
            team_copy_run<Word>(m, out, in, at.dst, at.src, len);
            l += len;
          }
          return;
        }
        // short pieces: each word finds its piece by multiply (Divisor)
        for (std::size_t i = std::size_t(m.team_rank()); i < s.words; i += std::size_t(m.team_size())) {
          const FlatIndex at = t.at(s.first + i);
          out[at.dst] = in[at.src];
        }
      });
}

/// Large contiguous tasks on the copy engine (Kokkos::deep_copy on `exec`: a
/// cudaMemcpyAsync on its stream).
template <class Exec>
void copy_engine_tasks(const Exec& exec, unsigned char* dst, const unsigned char* src, std::size_t elem_bytes,
                       std::span<const CopyTask* const> engine) {
  using Bytes = Kokkos::View<unsigned char*, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using CBytes =
      Kokkos::View<const unsigned char*, typename Exec::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  for (const CopyTask* t : engine) {
    const std::size_t bytes = t->elems * elem_bytes;
    Kokkos::deep_copy(exec, Bytes(dst + t->dst.base * elem_bytes, bytes),
                      CBytes(src + t->src.base * elem_bytes, bytes));
  }
}

/// The segment device path of copy_runs (DeviceKernels::segments): every task
/// of the call in one launch of segments, and large contiguous tasks on the
/// copy engine. Works on any execution space (the tests run it on the host).
/// Does not fence, except when it uploads a table (TaskTableCache::get).
template <class Exec>
void copy_runs_segments(const Exec& exec, unsigned char* dst, const unsigned char* src, std::size_t elem_bytes,
                        std::span<const CopyTask> tasks) {
  thread_local std::vector<std::size_t> table;
  thread_local std::vector<const CopyTask*> engine;
  const std::size_t word = copy_word_bytes(dst, src, elem_bytes, tasks, 16);
  segment_tasks(tasks, elem_bytes, word, table, engine);
  copy_engine_tasks(exec, dst, src, elem_bytes, engine);
  const std::size_t ns = table[0];
  if (ns == 0) return;
  const std::size_t* dev = task_table_cache<typename Exec::memory_space>().get(exec, table);
  switch (word) {
    case 16: return launch_segments<Word16>(exec, dst, src, dev, ns);
    case 8: return launch_segments<std::uint64_t>(exec, dst, src, dev, ns);
    case 4: return launch_segments<std::uint32_t>(exec, dst, src, dev, ns);
    case 2: return launch_segments<std::uint16_t>(exec, dst, src, dev, ns);
    default: return launch_segments<std::uint8_t>(exec, dst, src, dev, ns);
  }
}

// ------------------------------------------------ device path, tile schedule
//
// DeviceKernels::tuned (the default on devices). The call's words are cut
// into tiles of kTileThreads x U words (U from 1 to kTileUnroll, smaller for
// small calls so that they still spread over the device), each tile inside
// one task, copied by kTileThreads consecutive threads (a "virtual team": any
// block size keeps it coalesced). A task whose pieces have at least
// kTileThreads words is tiled piece by piece, so a tile is one contiguous
// range on both sides and its index arithmetic is done once per thread, not
// per word; shorter pieces are packed whole into tiles and each word finds its
// piece with Divisor's multiply. Each thread loads its U words (up to 16 bytes
// each) before it stores any. The launch has a virtual team per tile, which
// finds its task by a binary search in the table's prefix (once per thread
// per tile), and the hardware's block scheduler balances the tiles; with
// DeviceTuning::waves (tuning.hpp) it is about that many waves of threads
// walking the tiles grid-stride, each thread moving forward through the task
// table. (One wave was the 2026-11-27 form: ncu showed its blocks did not
// all fit at once, 2.29 waves, the last a third full.) Contiguous tasks of at least
// kEngineBytes go to the copy engine. The table is small (a few words per
// task) and cached as the other schedules' are.

/// Unrolls the next loop in device code (the host compilers do not know the pragma).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define DSP_DEVICE_UNROLL _Pragma("unroll")
#else
#define DSP_DEVICE_UNROLL
#endif

/// Threads per tile, and the most words each thread copies per tile.
inline constexpr std::size_t kTileThreads = 256, kTileUnroll = 8;

/// One task of the tile schedule, in words.
struct TileTask {
  std::size_t dbase = 0, dstride = 0, sbase = 0, sstride = 0;
  Divisor piece, md, ms;   // as FlatTask
  Divisor per;             // long pieces: tiles per piece; short pieces: pieces per tile
  std::size_t pieces = 0;  // pieces in the task
  std::size_t is_long = 0;
};

/// The tile table: [n, tile words, then n + 1 prefix entries of tiles, then n
/// TileTasks]; contiguous tasks for the copy engine are left out (`engine`).
/// Returns whether every task in the table has long pieces.
inline bool tile_tasks(std::span<const CopyTask> tasks, std::size_t elem_bytes, std::size_t word,
                       std::vector<std::size_t>& table, std::vector<const CopyTask*>& engine) {
  static_assert(sizeof(TileTask) % sizeof(std::size_t) == 0 && alignof(TileTask) <= alignof(std::size_t));
  constexpr std::size_t per = sizeof(TileTask) / sizeof(std::size_t);
  engine.clear();
  std::size_t n = 0, total = 0;
  auto to_engine = [&](const CopyTask& t) { return one_range(t) && t.elems * elem_bytes >= kEngineBytes; };
  for (const CopyTask& t : tasks) {
    if (t.elems == 0) continue;
    if (to_engine(t)) engine.push_back(&t);
    else ++n, total += t.elems * elem_bytes / word;
  }
  // Words per thread: all kTileUnroll (or DeviceTuning::unroll) from about
  // two waves of full tiles up; fewer below, so that small calls still spread.
  const std::size_t most = device_tuning().unroll < kTileUnroll ? device_tuning().unroll : kTileUnroll;
  std::size_t unroll = total / (kTileThreads * 2048);
  unroll = unroll < 1 ? 1 : unroll > most ? most : unroll;
  const std::size_t tw = kTileThreads * unroll;
  const bool small = total < (std::size_t(1) << 32);
  table.assign(2 + n + 1 + n * per, 0);
  table[0] = n, table[1] = tw;
  std::size_t k = 0;
  bool all_long = true;
  for (const CopyTask& t : tasks) {
    if (t.elems == 0 || to_engine(t)) continue;
    const std::size_t piece = t.dst.len < t.src.len ? t.dst.len : t.src.len;
    auto words = [&](std::size_t elems) { return elems * elem_bytes / word; };
    TileTask f{words(t.dst.base),
               words(t.dst.stride),
               words(t.src.base),
               words(t.src.stride),
               Divisor::make(words(piece), true),  // divides only word offsets in a tile (short pieces)
               Divisor::make(t.dst.len / piece, small),
               Divisor::make(t.src.len / piece, small),
               {},
               t.elems / piece,
               0};
    const std::size_t pw = words(piece);
    std::size_t tiles;
    if (pw >= kTileThreads) {
      const std::size_t tpp = (pw + tw - 1) / tw;
      f.per = Divisor::make(tpp, small), f.is_long = 1, tiles = f.pieces * tpp;
    } else {
      const std::size_t ppt = tw / pw;
      f.per = Divisor::make(ppt, small), tiles = (f.pieces + ppt - 1) / ppt;
      all_long = false;
    }
    table[2 + k + 1] = table[2 + k] + tiles;
    std::memcpy(table.data() + 2 + n + 1 + k * per, &f, sizeof f);
    ++k;
  }
  return all_long;
}

/// `AllLong`: every task has long pieces (the kernel then has no short-piece
/// branch, and needs fewer registers: 130 per thread with it, measured).
/// `teams`: virtual teams of the launch, each walking the tiles grid-stride
/// from its first (`tiles` of them: one tile each).
template <class Word, bool AllLong, class Exec>
void launch_tiles(const Exec& exec, unsigned char* dst, const unsigned char* src, const std::size_t* table,
                  std::size_t n, std::size_t tw, std::size_t tiles, std::size_t teams) {
  Word* out = reinterpret_cast<Word*>(dst);
  const Word* in = reinterpret_cast<const Word*>(src);
  const std::size_t* prefix = table + 2;
  const TileTask* tt = reinterpret_cast<const TileTask*>(table + 2 + n + 1);
  const std::size_t unroll = tw / kTileThreads;
  Kokkos::parallel_for(
      "dsp::copy_runs_tiles", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, teams * kTileThreads),
      KOKKOS_LAMBDA(std::size_t i) {
        const std::size_t lane = i % kTileThreads;
        std::size_t tile = i / kTileThreads;
        // The task of the first tile, by binary search (prefix[k] <= tile < prefix[k + 1]).
        std::size_t k = 0, hi = n;
        while (hi - k > 1) {
          const std::size_t mid = k + (hi - k) / 2;
          if (prefix[mid] <= tile) k = mid;
          else hi = mid;
        }
        std::size_t end = prefix[k + 1];
        TileTask t = tt[k];
        for (; tile < tiles; tile += teams) {
          while (tile >= end) end = prefix[++k + 1], t = tt[k];
          const std::size_t j = tile - prefix[k];
          const std::size_t P = t.piece.d;
          Word v[kTileUnroll]{};       // initialized: GCC cannot see that the stores read only what the loads wrote
          if (AllLong || t.is_long) {  // one contiguous range on both sides
            const std::size_t q = t.per.div(j), off = (j - q * t.per.d) * tw;
            const std::size_t len = P - off < tw ? P - off : tw;
            const std::size_t qd = t.md.div(q), qs = t.ms.div(q);
            const std::size_t d0 = t.dbase + qd * t.dstride + (q - qd * t.md.d) * P + off;
            const std::size_t s0 = t.sbase + qs * t.sstride + (q - qs * t.ms.d) * P + off;
            DSP_DEVICE_UNROLL
            for (std::size_t u = 0; u < kTileUnroll; ++u) {
              const std::size_t w = lane + u * kTileThreads;
              if (u < unroll && w < len) v[u] = in[s0 + w];
            }
            DSP_DEVICE_UNROLL
            for (std::size_t u = 0; u < kTileUnroll; ++u) {
              const std::size_t w = lane + u * kTileThreads;
              if (u < unroll && w < len) out[d0 + w] = v[u];
            }
            continue;
          }
          // short pieces: the tile holds pieces [q0, q1), each word finds its own
          if constexpr (!AllLong) {
            const std::size_t q0 = j * t.per.d, q1 = q0 + t.per.d < t.pieces ? q0 + t.per.d : t.pieces;
            const std::size_t len = (q1 - q0) * P;
            auto at = [&](std::size_t w, std::size_t& d, std::size_t& s) {
              const std::size_t r = t.piece.div(w), o = w - r * P, q = q0 + r;
              const std::size_t qd = t.md.div(q), qs = t.ms.div(q);
              d = t.dbase + qd * t.dstride + (q - qd * t.md.d) * P + o;
              s = t.sbase + qs * t.sstride + (q - qs * t.ms.d) * P + o;
            };
            DSP_DEVICE_UNROLL
            for (std::size_t u = 0; u < kTileUnroll; ++u) {
              const std::size_t w = lane + u * kTileThreads;
              if (u < unroll && w < len) {
                std::size_t d, s;
                at(w, d, s);
                v[u] = in[s];
              }
            }
            DSP_DEVICE_UNROLL
            for (std::size_t u = 0; u < kTileUnroll; ++u) {  // the index again: fewer registers than keeping it
              const std::size_t w = lane + u * kTileThreads;
              if (u < unroll && w < len) {
                std::size_t d, s;
                at(w, d, s);
                out[d] = v[u];
              }
            }
          }
        }
      });
}

/// The tuned device path of copy_runs (DeviceKernels::tuned): every task of
/// the call in one launch of tiles, and large contiguous tasks on the copy
/// engine. Works on any execution space (the tests run it on the host). Does
/// not fence, except when it uploads a table (TaskTableCache::get).
template <class Exec>
void copy_runs_tuned(const Exec& exec, unsigned char* dst, const unsigned char* src, std::size_t elem_bytes,
                     std::span<const CopyTask> tasks) {
  thread_local std::vector<std::size_t> table;
  thread_local std::vector<const CopyTask*> engine;
  const std::size_t word = copy_word_bytes(dst, src, elem_bytes, tasks, 16);
  const bool all_long = tile_tasks(tasks, elem_bytes, word, table, engine);
  copy_engine_tasks(exec, dst, src, elem_bytes, engine);
  const std::size_t n = table[0];
  if (n == 0) return;
  const std::size_t tw = table[1], tiles = table[2 + n];
  const std::size_t* dev = task_table_cache<typename Exec::memory_space>().get(exec, table);
  // The grid (DeviceTuning::waves): a virtual team per tile, or about `waves`
  // waves of the device's threads walking the tiles grid-stride.
  const DeviceTuning& tuning = device_tuning();
  std::size_t teams = tiles;
  if (tuning.waves > 0) {
    teams = tuning.waves * std::size_t(exec.concurrency()) / kTileThreads;
    teams = teams < 1 ? 1 : teams > tiles ? tiles : teams;
  }
  auto launch = [&](auto long_only) {
    constexpr bool L = decltype(long_only)::value;
    switch (word) {
      case 16: return launch_tiles<Word16, L>(exec, dst, src, dev, n, tw, tiles, teams);
      case 8: return launch_tiles<std::uint64_t, L>(exec, dst, src, dev, n, tw, tiles, teams);
      case 4: return launch_tiles<std::uint32_t, L>(exec, dst, src, dev, n, tw, tiles, teams);
      case 2: return launch_tiles<std::uint16_t, L>(exec, dst, src, dev, n, tw, tiles, teams);
      default: return launch_tiles<std::uint8_t, L>(exec, dst, src, dev, n, tw, tiles, teams);
    }
  };
  if (all_long) launch(std::true_type{});
  else launch(std::false_type{});
}

/// Host tasks of at least this many bytes are written with streaming
/// (non-temporal) stores: the destination is not read into the cache first,
/// which saves a third of the memory traffic of a copy much larger than the
/// cache. glibc's memcpy does this only for single copies of several MiB, not
/// for the short runs a pack or unpack is made of.
inline std::size_t& stream_threshold() {
  static std::size_t bytes = std::size_t(4) << 20;
  return bytes;
}

/// Host tasks of at most this many bytes are copied by the calling thread, not
/// through a Kokkos kernel (whose launch and profiling hooks cost more).
inline constexpr std::size_t kInlineCopyBytes = std::size_t(64) << 10;

/// memcpy with streaming stores where the CPU has them (SSE2), memcpy elsewhere.
/// Callers end a sequence of these with stream_fence().
inline void stream_copy(unsigned char* dst, const unsigned char* src, std::size_t bytes) {
#if defined(__SSE2__)
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
  if (bytes < head + 64) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const std::size_t body = bytes / 64 * 64;
  for (std::size_t k = 0; k < body; k += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 48), d);
  }
  std::memcpy(dst + body, src + body, bytes - body);
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// Orders streaming stores before what follows (a no-op without SSE2).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// Runs every task on `exec`; does not fence (the device path waits once when
/// it uploads a task table it has not seen before; see TaskTableCache).
/// On the host, a task of stream_threshold() bytes or more is copied with
/// streaming stores; `by_call`: a task past kInlineCopyBytes is, when the
/// whole call's tasks reach it (a cut exchange cuts one peer's part into a
/// task per batch slab and chunk: the volume that passes the caches is the
/// call's).
template <class Exec>
void copy_runs(const Exec& exec, void* dst_ptr, const void* src_ptr, std::size_t elem_bytes,
               std::span<const CopyTask> tasks, bool by_call = false) {
  auto* dst = static_cast<unsigned char*>(dst_ptr);
  const auto* src = static_cast<const unsigned char*>(src_ptr);
  if constexpr (!is_host_exec_v<Exec>) {
    switch (device_kernels()) {
      case DeviceKernels::tuned: return copy_runs_tuned(exec, dst, src, elem_bytes, tasks);
      case DeviceKernels::segments: return copy_runs_segments(exec, dst, src, elem_bytes, tasks);
      case DeviceKernels::baseline: return copy_runs_device(exec, dst, src, elem_bytes, tasks);
    }
  } else {
    std::size_t call_bytes = 0;
    if (by_call)
      for (const CopyTask& t : tasks) call_bytes += t.elems * elem_bytes;
    for (const CopyTask& t : tasks) {
      if (t.elems == 0) continue;
      const std::size_t piece = t.dst.len < t.src.len ? t.dst.len : t.src.len;
      const std::size_t n = t.elems / piece, md = t.dst.len / piece, ms = t.src.len / piece;
      const std::size_t pb = piece * elem_bytes;
      const Runs d = t.dst, s = t.src;
      auto at = [=](std::size_t k, auto&& copy) {
        copy(dst + (d.base + (k / md) * d.stride + (k % md) * piece) * elem_bytes,
             src + (s.base + (k / ms) * s.stride + (k % ms) * piece) * elem_bytes, pb);
      };
      using Policy = Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>;
      if (t.elems * elem_bytes <= kInlineCopyBytes) {  // small: a kernel launch would cost more than the copy
        // Walk both run patterns incrementally (no divisions per piece).
        std::size_t dk = 0, dm = 0, sk = 0, sm = 0;
        for (std::size_t k = 0; k < n; ++k) {
          std::memcpy(dst + (d.base + dk * d.stride + dm * piece) * elem_bytes,
                      src + (s.base + sk * s.stride + sm * piece) * elem_bytes, pb);
          if (++dm == md) dm = 0, ++dk;
          if (++sm == ms) sm = 0, ++sk;
        }
      } else if ((by_call ? call_bytes : t.elems * elem_bytes) >= stream_threshold()) {
        Kokkos::parallel_for("dsp::copy_runs", Policy(exec, 0, n), [=](std::size_t k) {
          at(k, [](unsigned char* o, const unsigned char* i, std::size_t b) {
            stream_copy(o, i, b);
            stream_fence();  // on the thread that stored: orders its streaming stores before the kernel ends
          });
        });
      } else {
        Kokkos::parallel_for("dsp::copy_runs", Policy(exec, 0, n), [=](std::size_t k) {
          at(k, [](unsigned char* o, const unsigned char* i, std::size_t b) { std::memcpy(o, i, b); });
        });
      }
    }
  }
}

}  // namespace dsp::detail
