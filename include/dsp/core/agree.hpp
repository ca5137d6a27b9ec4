// SPDX-License-Identifier: BSD-3-Clause
// dsp: cross-rank agreement before a collective.
//
// Every rank describes what it is about to do in a fixed-size signature
// (operation, call site, element type, global extents, layouts, root, the
// algorithm it resolved) and whether its local preparation succeeded. The
// ranks all-gather a 40-byte digest of it (status, operation and a hash of
// the compared fields) on the communicator's control channel; every rank
// then holds the same table and so reaches the same verdict. When the
// digests differ, a second all-gather of the whole signatures (on every
// rank: they all saw the difference) finds the field to name in the error.
// A disagreement or a local failure anywhere therefore raises on every rank
// instead of leaving some ranks waiting in a collective that never forms, or
// moving the data of two different calls.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/core/port.hpp>
#include <dsp/core/type_name.hpp>
#include <dsp/error.hpp>
#include <dsp/extents.hpp>
#include <dsp/layout.hpp>
#include <dsp/plan/mesh_plan.hpp>
#include <dsp/plan/switch.hpp>
#include <dsp/settings.hpp>
#include <dsp/wire.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <source_location>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dsp::detail {

/// Fault injection for tests: while positive, the next preparation step of a
/// collective on this rank fails as an allocation would, and the count drops.
inline int& injected_faults() {
  static int n = 0;
  return n;
}
inline void maybe_inject_fault() {
  if (injected_faults() > 0) {
    --injected_faults();
    throw std::bad_alloc();
  }
}

enum class Op : std::uint32_t {
  construct = 1,
  split,
  gather,
  dynamic_switch,
  distribute,
  make_groups,
  make_mesh,
  redistribute,
  start_switch,
  start_gather,
  batch_switch,
  start_redistribute,
  reshard,
  hdf5_save,
  hdf5_load,
};

inline const char* op_name(std::uint32_t op) {
  switch (static_cast<Op>(op)) {
    case Op::construct: return "dsp::DistTensor construction";
    case Op::split: return "dsp::split";
    case Op::gather: return "dsp::gather";
    case Op::dynamic_switch: return "dsp::dynamic_switch";
    case Op::distribute: return "dsp::distribute";
    case Op::make_groups: return "dsp::make_parallel_groups";
    case Op::make_mesh: return "dsp::Mesh construction";
    case Op::redistribute: return "dsp::redistribute";
    case Op::start_switch: return "dsp::start_switch";
    case Op::start_gather: return "dsp::start_gather";
    case Op::batch_switch: return "dsp::dynamic_switch of a dsp::batch";
    case Op::start_redistribute: return "dsp::start_redistribute";
    case Op::reshard: return "dsp::reshard";
    case Op::hdf5_save: return "dsp::hdf5::save";
    case Op::hdf5_load: return "dsp::hdf5::load";
  }
  return "an unknown operation";
}

/// The operations of the data path: under AgreementMode::first_call their
/// repeated calls skip the agreement. The others (construction, meshes,
/// groups, distribute, reshard, dsp::hdf5) are checked every time.
constexpr bool data_path_op(std::uint32_t op) {
  switch (static_cast<Op>(op)) {
    case Op::gather:
    case Op::dynamic_switch:
    case Op::redistribute:
    case Op::start_switch:
    case Op::start_gather:
    case Op::batch_switch:
    case Op::start_redistribute: return true;
    default: return false;
  }
}

/// What an error before anything moved leaves done, for its message.
constexpr const char* nothing_done(std::uint32_t op) {
  if (static_cast<Op>(op) == Op::hdf5_save) return "nothing was written";
  if (static_cast<Op>(op) == Op::hdf5_load) return "nothing was read and y is unchanged";
  if (static_cast<Op>(op) == Op::construct) return "nothing was allocated";
  return "nothing was communicated and the input is unchanged";
}

/// Why a rank could not take part; the rank that failed knows the details.
enum class Status : std::uint32_t {
  ok = 0,
  bad_local_view,
  alloc_failed,
  bad_output,
  bad_setting,
  bad_argument,
  backend,
  failed_in_flight,
};

inline const char* status_text(std::uint32_t s) {
  switch (static_cast<Status>(s)) {
    case Status::ok: return "no error";
    case Status::bad_local_view: return "its local view does not fit the partition";
    case Status::alloc_failed: return "it could not allocate memory";
    case Status::bad_output: return "its output tensor is invalid";
    case Status::bad_setting: return "a dsp setting from its environment is invalid";
    case Status::bad_argument: return "an argument is invalid there";
    case Status::backend: return "its communication backend failed";
    case Status::failed_in_flight: return "it failed while the operation was in flight";
  }
  return "an unknown failure";
}

/// The exception a rank throws for its own failure.
[[noreturn]] inline void throw_local(std::uint32_t status, const std::string& what) {
  if (static_cast<Status>(status) == Status::alloc_failed) throw ResourceError(what);
  if (static_cast<Status>(status) == Status::failed_in_flight) throw Error(what);
  throw InvalidArgument(what);
}

struct Signature {
  std::uint64_t magic = 0x6473702d61677265ull;  // "dsp-agre"
  std::uint32_t op = 0;
  std::uint32_t status = 0;
  std::uint64_t type_hash = 0;
  std::uint64_t elem_bytes = 0;
  std::uint64_t tensor_rank = 0;
  std::uint64_t extents[kMaxRank] = {};
  std::uint32_t mesh_axes = 0;  // 0: a plain communicator (one placement in src/dst_layout[0])
  std::int32_t mesh_shape[kMaxAxes] = {};
  std::int64_t src_layout[kMaxAxes] = {};  // placement codes (layout.hpp), one per mesh axis
  std::int64_t dst_layout[kMaxAxes] = {};
  std::int64_t root = -1;
  std::int64_t arg = 0;      // an operation's own argument (make_parallel_groups: the sequence-parallel size)
  std::uint64_t shapes = 0;  // a batch's every tensor's extents (and Blocks sizes), hashed (ShapeHash); 0: one tensor
  std::uint64_t comm_size = 0;
  std::uint32_t path = 0;  // the Path a rank resolved (0: none or not chosen)
  std::uint32_t wire = 0;  // dsp::Wire of a switch (0: exact)
  std::uint32_t site_line = 0;
  std::uint64_t site_hash = 0;  // 0: call-site checks off
  std::uint32_t planning = static_cast<std::uint32_t>(dsp::planning());
  std::uint32_t mode = static_cast<std::uint32_t>(dsp::agreement_mode());
  std::uint32_t plan = 0;  // the measured decisions a rank holds (not compared; see agree())
  char type[48] = {};
  char site[64] = {};  // the end of the call site's file name, for messages
};

template <class T>
void set_type(Signature& s) {
  constexpr std::string_view n = type_name<T>();
  constexpr std::uint64_t h = fnv1a(n) ^ sizeof(T);
  s.type_hash = h;
  s.elem_bytes = sizeof(T);
  std::memcpy(s.type, n.data(), n.size() < sizeof s.type - 1 ? n.size() : sizeof s.type - 1);
}

/// The element types of a batch, in order: their names joined by commas
/// (cut to fit the signature), one hash over all. `add` each type in order;
/// BatchTypes does it at compile time, a run-time front end (the Python
/// module) at run time, with the same result.
struct BatchTypeText {
  char names[sizeof Signature::type] = {};
  std::uint64_t hash = fnv1a("batch");
  std::size_t len = 0;
  constexpr void add(std::string_view n, std::size_t size) {
    auto put = [&](char c) {
      if (len < sizeof names - 1) names[len++] = c;
    };
    if (len) put(',');
    for (char c : n) put(c);
    hash = fnv1a(n, hash) ^ size;
  }
};
template <class... T>
struct BatchTypes {
  static constexpr BatchTypeText value = [] {
    BatchTypeText t;
    (t.add(type_name<T>(), sizeof(T)), ...);
    return t;
  }();
};

/// One element type's name (cut to fit the signature) and hash, as set_type
/// makes them, at compile time.
template <class T>
struct SingleType {
  struct Text {
    char names[sizeof Signature::type] = {};
    std::uint64_t hash = 0;
  };
  static constexpr Text value = [] {
    Text t;
    constexpr std::string_view n = type_name<T>();
    for (std::size_t k = 0; k < n.size() && k + 1 < sizeof t.names; ++k) t.names[k] = n[k];
    t.hash = fnv1a(n) ^ sizeof(T);
    return t;
  }();
};

/// The element types of a batch: BatchTypes' names and hash, elem_bytes the
/// sum (the bytes of one element of each).
template <class... T>
void set_types(Signature& s) {
  s.type_hash = BatchTypes<T...>::value.hash;
  s.elem_bytes = (sizeof(T) + ... + 0);
  std::memcpy(s.type, BatchTypes<T...>::value.names, sizeof s.type);
}

/// A hash of a batch's shapes, for Signature::shapes: add each tensor's
/// extents in order (and its Blocks sizes' hash, where it has them).
struct ShapeHash {
  std::uint64_t h = 1469598103934665603ull;
  void add(std::uint64_t v) { h = (h ^ v) * 1099511628211ull, h ^= h >> 29; }
  void add(std::span<const std::size_t> e) {
    add(e.size());
    for (std::size_t v : e) add(v);
  }
};

inline void set_extents(Signature& s, std::span<const std::size_t> e) {
  s.tensor_rank = e.size();
  for (std::size_t d = 0; d < e.size() && d < kMaxRank; ++d) s.extents[d] = e[d];
}

/// Records where the public call was made (when call-site checks are on).
/// This runs on every collective call, so a call site's hash and file-name
/// tail are kept in a small per-thread cache keyed by where its
/// std::source_location points (the file name is a string literal).
DSP_FUNC void set_site(Signature& s, const std::source_location& loc);
#if DSP_FUNC_BODIES
DSP_FUNC void set_site(Signature& s, const std::source_location& loc) {
  if (!call_site_checks() || !agreement_checks()) return;  // only the agreement check reads it
  struct Entry {
    const char* file = nullptr;
    std::uint_least32_t line = 0, column = 0;
    std::uint64_t hash = 0;
    char tail[sizeof s.site] = {};
  };
  thread_local Entry cache[8];
  const char* file = loc.file_name();
  Entry& e = cache[(reinterpret_cast<std::uintptr_t>(file) / 8 ^ loc.line() ^ loc.column()) % 8];
  if (e.file != file || e.line != loc.line() || e.column != loc.column()) {
    const std::string_view f = file;
    const std::uint64_t lc[2] = {loc.line(), loc.column()};
    e = Entry{file,
              loc.line(),
              loc.column(),
              fnv1a(f, fnv1a(std::string_view(reinterpret_cast<const char*>(lc), sizeof lc))) | 1,
              {}};
    const std::string_view tail = f.size() < sizeof s.site - 1 ? f : f.substr(f.size() - (sizeof s.site - 1));
    std::memcpy(e.tail, tail.data(), tail.size());
  }
  s.site_hash = e.hash;
  s.site_line = e.line;
  std::memcpy(s.site, e.tail, sizeof s.site);
}
#endif

/// A signature for `op` on a tensor of element type T and extents e.
template <class T>
Signature make_signature(Op op, std::span<const std::size_t> e, long src_layout, long dst_layout,
                         const std::source_location& loc) {
  Signature s;
  s.op = static_cast<std::uint32_t>(op);
  set_type<T>(s);
  set_extents(s, e);
  s.src_layout[0] = src_layout;
  s.dst_layout[0] = dst_layout;
  set_site(s, loc);
  return s;
}

[[gnu::cold]] inline std::string shape_text(const Signature& s) {
  std::string t = "[";
  for (std::uint32_t a = 0; a < s.mesh_axes && a < kMaxAxes; ++a)
    t += (a ? ", " : "") + std::to_string(s.mesh_shape[a]);
  return t + "]";
}

[[gnu::cold]] inline std::string extents_text(const Signature& s) {
  std::string t = "[";
  for (std::uint64_t d = 0; d < s.tensor_rank && d < kMaxRank; ++d) t += (d ? ", " : "") + std::to_string(s.extents[d]);
  return t + "]";
}

[[gnu::cold]] inline std::string site_text(const Signature& s) {
  if (s.site_hash == 0) return "(unknown: call-site checks off)";
  std::string_view f(s.site, strnlen(s.site, sizeof s.site));
  if (const auto slash = f.rfind('/'); slash != std::string_view::npos) f.remove_prefix(slash + 1);
  return std::string(f) + ":" + std::to_string(s.site_line);
}

/// Whether two ranks' signatures describe the same call: every field that
/// describe_disagreement compares, compared as numbers (no text is built on
/// the path every successful call takes).
inline bool same_call(const Signature& a, const Signature& b) {
  auto same_n = [](const auto* x, const auto* y, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k)
      if (x[k] != y[k]) return false;
    return true;
  };
  const std::size_t axes = a.mesh_axes < kMaxAxes ? a.mesh_axes : kMaxAxes;
  const std::size_t rank = a.tensor_rank < kMaxRank ? a.tensor_rank : kMaxRank;
  const std::size_t placements = axes == 0 ? 1 : axes;
  return a.magic == b.magic && a.comm_size == b.comm_size && a.op == b.op && a.mesh_axes == b.mesh_axes &&
         same_n(a.mesh_shape, b.mesh_shape, axes) && a.tensor_rank == b.tensor_rank &&
         (a.type_hash ^ a.elem_bytes) == (b.type_hash ^ b.elem_bytes) && same_n(a.extents, b.extents, rank) &&
         same_n(a.src_layout, b.src_layout, placements) && same_n(a.dst_layout, b.dst_layout, placements) &&
         a.root == b.root && a.arg == b.arg && a.shapes == b.shapes && a.wire == b.wire && a.path == b.path &&
         a.site_hash == b.site_hash && a.planning == b.planning && a.mode == b.mode;
}

/// What every rank sends in the agreement all-gather: small, because the
/// all-gather's latency is most of the check's cost and grows with its size
/// (Open MPI 4.1, shared memory, 2 ranks: 0.41 us at 40 bytes, 0.46 us at
/// 184 and 256, 0.69 us at 352; the whole Signature is 352 bytes).
struct Digest {
  std::uint64_t magic = 0;
  std::uint32_t comm_size = 0;
  std::uint32_t plan = 0;  // Signature::plan
  std::uint32_t op = 0;
  std::uint32_t status = 0;
  std::uint64_t hash[2] = {};  // of every field same_call compares
};
static_assert(sizeof(Digest) == 40);

/// Two hashes of the fields same_call compares, in its order. The first
/// sums a strong mix (splitmix64's finalizer) of each word xored with a key
/// of its position; the second sums each word times an odd key of its
/// position. A difference in one word always changes the second; calls that
/// differ in several fields collide in both with probability about 2^-64 or
/// less. The words' mixes are independent, so they run in parallel.
inline void hash_call(const Signature& s, std::uint64_t (&h)[2]) {
  constexpr std::size_t kWords = 14 + kMaxAxes * 3 + kMaxRank;
  struct Keys {
    std::uint64_t x[kWords], m[kWords];
  };
  static constexpr Keys keys = [] {
    Keys k{};
    std::uint64_t z = 0x243f6a8885a308d3ull;  // digits of pi
    for (std::size_t i = 0; i < kWords; ++i) {
      auto next = [&z] {
        z += 0x9e3779b97f4a7c15ull;
        std::uint64_t v = z;
        v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
        v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
        return v ^ (v >> 31);
      };
      k.x[i] = next();
      k.m[i] = next() | 1;
    }
    return k;
  }();
  auto mix = [](std::uint64_t v) {
    v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
    v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
    return v ^ (v >> 31);
  };
  std::uint64_t a = 0, b = 0;
  std::size_t i = 0;
  auto add = [&](std::uint64_t v) {
    a += mix(v ^ keys.x[i]);
    b += v * keys.m[i];
    ++i;
  };
  const std::size_t axes = s.mesh_axes < kMaxAxes ? s.mesh_axes : kMaxAxes;
  const std::size_t rank = s.tensor_rank < kMaxRank ? s.tensor_rank : kMaxRank;
  const std::size_t placements = axes == 0 ? 1 : axes;
  add(s.op);
  add(s.mesh_axes);
  for (std::size_t k = 0; k < axes; ++k) add(static_cast<std::uint64_t>(s.mesh_shape[k]));
  add(s.tensor_rank);
  add(s.type_hash ^ s.elem_bytes);
  for (std::size_t k = 0; k < rank; ++k) add(s.extents[k]);
  for (std::size_t k = 0; k < placements; ++k) add(static_cast<std::uint64_t>(s.src_layout[k]));
  for (std::size_t k = 0; k < placements; ++k) add(static_cast<std::uint64_t>(s.dst_layout[k]));
  add(static_cast<std::uint64_t>(s.root));
  add(static_cast<std::uint64_t>(s.arg));
  add(s.shapes);
  add(s.wire);
  add(s.path);
  add(s.site_hash);
  add(s.planning);
  add(s.mode);
  h[0] = a;
  h[1] = b;
}

inline Digest digest_of(const Signature& s) {
  Digest d;
  d.magic = s.magic;
  d.comm_size = static_cast<std::uint32_t>(s.comm_size);
  d.plan = s.plan;
  d.op = s.op;
  d.status = s.status;
  hash_call(s, d.hash);
  return d;
}

/// One field of a Signature the agreement can name: what it is called, its
/// value as text, and (where the text may hide a difference) a key to compare.
struct SignatureField {
  const char* what;
  std::string (*text)(const Signature&);
  std::uint64_t (*key)(const Signature&) = nullptr;
};

[[gnu::cold]] inline std::string u64_text(std::uint64_t v) { return std::to_string(v); }
[[gnu::cold]] inline std::string arg_text(const Signature& s) { return std::to_string(s.arg); }

/// The index of the shapes field in signature_fields().
inline constexpr std::size_t kShapesField = 5;
/// The fields in the order a disagreement is reported (the first that differs).
[[gnu::cold]] inline std::span<const SignatureField> signature_fields() {
  static const SignatureField fields[] = {
      {"the ranks called different operations", [](const Signature& s) { return std::string(op_name(s.op)); },
       [](const Signature& s) { return std::uint64_t(s.op); }},
      {"mesh shapes disagree", shape_text},
      {"tensor ranks disagree", [](const Signature& s) { return u64_text(s.tensor_rank); },
       [](const Signature& s) { return std::uint64_t(s.tensor_rank); }},
      {"element types disagree",
       [](const Signature& s) { return std::string(s.type) + " (" + u64_text(s.elem_bytes) + " bytes)"; },
       [](const Signature& s) { return std::uint64_t(s.type_hash ^ s.elem_bytes); }},
      {"global extents disagree", extents_text},
      {"the extents (or Blocks sizes) of the batch's tensors disagree",  // kShapesField
       [](const Signature& s) { return "hash " + u64_text(s.shapes); }, [](const Signature& s) { return s.shapes; }},
      {"input layouts disagree", [](const Signature& s) { return layout_text(s.src_layout, s.mesh_axes); }},
      {"target layouts disagree", [](const Signature& s) { return layout_text(s.dst_layout, s.mesh_axes); }},
      {"root ranks disagree", [](const Signature& s) { return std::to_string(s.root); },
       [](const Signature& s) { return std::uint64_t(s.root); }},
      {"arguments disagree", arg_text, [](const Signature& s) { return std::uint64_t(s.arg); }},
      {"wire types disagree", [](const Signature& s) { return std::string(wire_name(Wire(s.wire))); },
       [](const Signature& s) { return std::uint64_t(s.wire); }},
      {"planning modes disagree (dsp::set_planning or DSP_PLANNING)",
       [](const Signature& s) { return std::string(to_string(Planning(s.planning))); },
       [](const Signature& s) { return std::uint64_t(s.planning); }},
      {"agreement modes disagree (dsp::set_agreement_mode or DSP_AGREEMENT_MODE)",
       [](const Signature& s) { return std::string(to_string(AgreementMode(s.mode))); },
       [](const Signature& s) { return std::uint64_t(s.mode); }},
      {"the ranks resolved different communication algorithms (is dsp::set_switch_algorithm or "
       "DSP_SWITCH_ALGORITHM set differently across ranks?)",
       [](const Signature& s) { return std::string(path_name(s.path)); },
       [](const Signature& s) { return std::uint64_t(s.path); }},
      {"the ranks reached this collective from different call sites (a rank that skipped a collective is "
       "at its next one; if different places are intended, dsp::set_call_site_checks(false) or "
       "DSP_CALL_SITE_CHECKS=0 turns this check off)",
       site_text, [](const Signature& s) { return s.site_hash; }},
  };
  return fields;
}

/// Whether some rank's value of field f differs from rank 0's.
[[gnu::cold]] inline bool field_differs(const std::vector<Signature>& all, const SignatureField& f) {
  if (f.key) {
    for (const Signature& b : all)
      if (f.key(b) != f.key(all[0])) return true;
    return false;
  }
  const std::string first = f.text(all[0]);
  for (const Signature& b : all)
    if (f.text(b) != first) return true;
  return false;
}

/// The ranks' values of field f (the first 16).
[[gnu::cold]] inline std::string field_list(const std::vector<Signature>& all, const SignatureField& f) {
  std::string t;
  const std::size_t shown = all.size() < 16 ? all.size() : 16;
  for (std::size_t r = 0; r < shown; ++r) {
    if (r) t += ", ";
    t += "rank " + std::to_string(r) + " " + f.text(all[r]);
  }
  if (shown < all.size()) t += ", ... (" + std::to_string(all.size() - shown) + " more ranks)";
  return t;
}

// The first field on which some rank differs from rank 0, described with
// the ranks' values (the first 16), or "" when all agree.
[[gnu::cold]] inline std::string describe_disagreement(const std::vector<Signature>& all) {
  const Signature& a = all[0];
  bool all_same = true;
  for (const Signature& b : all) all_same = all_same && same_call(a, b);
  if (all_same) return "";
  for (const Signature& b : all)
    if (b.magic != a.magic || b.comm_size != a.comm_size)
      return "the ranks are not running the same dsp operation on one communicator";
  for (const SignatureField& f : signature_fields()) {
    if (!field_differs(all, f)) continue;
    const bool groups = f.text == &arg_text && static_cast<Op>(a.op) == Op::make_groups;
    // A layout with Blocks: its sizes are hashed into arg (a construction, a
    // communicator's redistribution) or into shapes (a mesh's redistribution).
    bool has_blocks = false;
    for (std::uint32_t x = 0; x < (a.mesh_axes ? a.mesh_axes : 1) && x < kMaxAxes; ++x)
      has_blocks = has_blocks || a.src_layout[x] <= kBlocks || a.dst_layout[x] <= kBlocks;
    const bool in_shapes = a.mesh_axes && static_cast<Op>(a.op) != Op::construct;
    const bool blocks =
        has_blocks && (in_shapes ? f.what == signature_fields()[kShapesField].what : f.text == &arg_text);
    if (blocks)
      return "Blocks sizes disagree (each rank's sizes, hashed" +
             std::string(in_shapes ? " with the extents of a batch's tensors" : "") + "): " + field_list(all, f) +
             "; every rank must pass the same sizes, one per rank" + (a.mesh_axes ? " of the Blocks axis" : "");
    return std::string(groups ? "sequence-parallel sizes disagree" : f.what) + ": " + field_list(all, f);
  }
  return "";
}

/// The time point `d` from now, saturated at the clock's end: a deadline of
/// years (or milliseconds::max()) must mean "far away", and now + d would
/// overflow the clock's representation and lie in the past.
inline Deadline deadline_after(std::chrono::milliseconds d) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point now = Clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  if (d >= room) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(d);
}

/// Collective (when agreement checks are on): all ranks exchange the
/// digests of `mine` and either all return or all throw. `local_error` is
/// this rank's own message when mine.status != ok; that rank throws it
/// (ResourceError for a failed allocation, InvalidArgument otherwise), the
/// others a MismatchError naming the failing rank. With checks off, a local
/// failure throws on this rank only. With a collective deadline, ranks that
/// wait past it raise TimeoutError. Returns whether every rank's
/// Signature::plan equals this rank's (true with checks off: nothing to
/// compare); all ranks return the same.
DSP_FUNC bool agree(Port& comm, const Signature& mine, const std::string& local_error);
#if DSP_FUNC_BODIES
/// The agreement's control all-gather, under the collective deadline when
/// one is set: a rank that gave up waiting poisons the communicator and
/// raises TimeoutError naming the ranks that did not come.
inline void agreement_gather(Port& comm, const char* op, const void* send, void* recv, std::size_t bytes) {
  const auto deadline = comm.caps().deadline ? collective_deadline() : std::chrono::milliseconds(0);
  if (deadline.count() <= 0) return comm.control_all_gather(send, recv, bytes);
  const std::vector<int> missing = comm.control_all_gather_until(send, recv, bytes, deadline_after(deadline));
  if (missing.empty()) return;
  comm.resources().poison();  // whatever the backend did: its messages may still be in flight
  std::string who;
  for (std::size_t k = 0; k < missing.size() && k < 16; ++k) {
    if (k) who += ", ";
    who += std::to_string(missing[k]);
  }
  if (missing.size() > 16) who += ", ...";
  throw TimeoutError(std::string(op) + ": rank(s) " + who + " of " + std::to_string(comm.size()) +
                     " did not reach this collective within " + std::to_string(deadline.count()) +
                     " ms (dsp::set_collective_deadline); nothing was communicated, and this communicator "
                     "cannot be used any more");
}

/// Raises MismatchError naming the first rank whose digest carries a failure.
inline void raise_peer_failure(std::span<const Digest> all, const Signature& mine) {
  for (std::size_t r = 0; r < all.size(); ++r)
    if (const Digest& o = all[r]; o.status != 0) {
      // A failure after the start of a split-phase operation: messages did move.
      const bool in_flight = static_cast<Status>(o.status) == Status::failed_in_flight;
      throw MismatchError(std::string(op_name(mine.op)) + ": rank " + std::to_string(r) +
                          " could not take part because " + status_text(o.status) +
                          (in_flight ? "; the input is unchanged, the output is incomplete"
                                     : "; " + std::string(nothing_done(mine.op))));
    }
}

/// Some rank's call differs (every rank saw the same digests, so every rank
/// comes here): the whole signatures, exchanged to say how they differ.
[[noreturn]] inline void raise_disagreement(Port& comm, const Signature& mine) {
  Signature full = mine;
  full.comm_size = static_cast<std::uint64_t>(comm.size());
  thread_local std::vector<Signature> sigs;
  sigs.assign(static_cast<std::size_t>(comm.size()), Signature{});
  agreement_gather(comm, op_name(mine.op), &full, sigs.data(), sizeof(Signature));
  std::string why = describe_disagreement(sigs);
  if (why.empty()) why = "the ranks' calls differ in a field dsp cannot name (their digests differ)";
  throw MismatchError(std::string(op_name(mine.op)) + ": " + why + "; " + nothing_done(mine.op));
}

DSP_FUNC bool agree(Port& comm, const Signature& mine, const std::string& local_error) {
  if (mine.status == 0 && !settings_ok()) {
    // A bad setting from the environment fails here, before communicating,
    // as any local failure does, so every rank raises.
    Signature bad = mine;
    bad.status = static_cast<std::uint32_t>(Status::bad_setting);
    return agree(comm, bad, std::string(op_name(mine.op)) + ": " + settings_error());
  }
  if (!agreement_checks()) {
    if (mine.status != 0) throw_local(mine.status, local_error);
    return true;
  }
  const int n = comm.size();
  Digest d = digest_of(mine);
  d.comm_size = static_cast<std::uint32_t>(n);
  // AgreementMode::first_call: a data-path call this communicator agreed on
  // before (the same digest: operation, site, types, extents, layouts,
  // settings, decisions) goes on without communicating. A local failure then
  // raises here only (docs/reliability.md: what this mode gives up).
  const std::array<std::uint64_t, 3> key{d.hash[0], d.hash[1], (std::uint64_t(d.op) << 32) | d.plan};
  const bool once = mine.mode == static_cast<std::uint32_t>(AgreementMode::first_call) && data_path_op(mine.op);
  if (once && comm.resources().agreed(key)) {
    if (mine.status != 0) throw_local(mine.status, local_error);
    return true;
  }
  thread_local std::vector<Digest> all;
  all.assign(static_cast<std::size_t>(n), Digest{});
  // Both exchanges honour the deadline: a rank that got every digest may
  // meet, in the second one, a rank that gave up in the first.
  agreement_gather(comm, op_name(mine.op), &d, all.data(), sizeof(Digest));
  if (mine.status != 0) throw_local(mine.status, local_error);
  raise_peer_failure(all, mine);
  bool same = true, plans = true;
  for (const Digest& o : all) {
    plans = plans && o.plan == d.plan;
    if (o.magic != d.magic || o.comm_size != d.comm_size)
      throw MismatchError(std::string(op_name(mine.op)) +
                          ": the ranks are not running the same dsp operation on one communicator; nothing was "
                          "communicated and the input is unchanged");
    same = same && o.op == d.op && o.hash[0] == d.hash[0] && o.hash[1] == d.hash[1];
  }
  if (!same) raise_disagreement(comm, mine);
  if (once && plans) comm.resources().remember_agreed(key);
  return plans;
}

#endif

/// agree() on a communicator of any type (through its Port).
template <class Comm>
requires(!std::is_base_of_v<Port, Comm>) bool agree(Comm& comm, const Signature& mine, const std::string& local_error) {
  PortOf<Comm> port(comm);
  return agree(static_cast<Port&>(port), mine, local_error);
}

}  // namespace dsp::detail
