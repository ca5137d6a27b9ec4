// dsp: cross-rank agreement before a collective.
//
// Every rank contributes a fixed-size signature of what it is about to do
// (operation, element type, global extents, layouts, root) and whether its
// local preparation succeeded; one all-gather on the communicator's control
// channel later, every rank holds the same table and so reaches the same
// verdict. A disagreement or a local failure anywhere therefore raises on every
// rank instead of leaving some ranks waiting in a collective that never forms.
#pragma once

#include <dsp/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace dsp {

namespace detail {
inline bool& agreement_flag() {
  static bool on = [] {
    const char* e = std::getenv("DSP_AGREEMENT_CHECKS");
    return !(e && (std::string_view(e) == "0" || std::string_view(e) == "off"));
  }();
  return on;
}
}  // namespace detail

/// Turns the cross-rank agreement check of every collective on or off (on by
/// default; the environment variable DSP_AGREEMENT_CHECKS=0 starts with it
/// off). Off saves one small all-gather per call, but ranks that then disagree
/// may hang or corrupt data. Every rank must use the same setting.
inline void set_agreement_checks(bool on) { detail::agreement_flag() = on; }
/// Whether collectives check cross-rank agreement first.
inline bool agreement_checks() { return detail::agreement_flag(); }

namespace detail {

inline constexpr std::size_t kMaxRank = 8;

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

template <class T>
constexpr std::string_view type_name() {
  std::string_view p = __PRETTY_FUNCTION__;  // "... [with T = float; ...]" (gcc) / "[T = float]" (clang)
  const auto b = p.find("T = ");
  if (b == std::string_view::npos) return p;
  p.remove_prefix(b + 4);
  const auto e = p.find_first_of(";]");
  return p.substr(0, e);
}

constexpr std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

enum class Op : std::uint32_t { construct = 1, split, gather, dynamic_switch, distribute };

inline const char* op_name(std::uint32_t op) {
  switch (static_cast<Op>(op)) {
    case Op::construct: return "DistTensor construction";
    case Op::split: return "dsp::split";
    case Op::gather: return "dsp::gather";
    case Op::dynamic_switch: return "dsp::dynamic_switch";
    case Op::distribute: return "dsp::distribute";
  }
  return "an unknown operation";
}

/// Why a rank could not take part; the rank that failed knows the details.
enum class Status : std::uint32_t {
  ok = 0,
  bad_local_view,
  alloc_failed,
  bad_output,
  backend,
  other,
};

inline const char* status_text(std::uint32_t s) {
  switch (static_cast<Status>(s)) {
    case Status::ok: return "no error";
    case Status::bad_local_view: return "its local view does not fit the partition";
    case Status::alloc_failed: return "it could not allocate memory";
    case Status::bad_output: return "its output tensor is invalid";
    case Status::backend: return "its communication backend failed";
    case Status::other: return "it failed locally";
  }
  return "an unknown failure";
}

struct Signature {
  std::uint64_t magic = 0x6473702d61677265ull;  // "dsp-agre"
  std::uint32_t op = 0;
  std::uint32_t status = 0;
  std::uint64_t type_hash = 0;
  std::uint64_t elem_bytes = 0;
  std::uint64_t tensor_rank = 0;
  std::uint64_t extents[kMaxRank] = {};
  std::int64_t src_layout = 0;
  std::int64_t dst_layout = 0;
  std::int64_t root = -1;
  std::uint64_t comm_size = 0;
  std::uint32_t algorithm = 0;  // the collective path a rank resolved (0: none or not chosen)
  std::uint32_t reserved = 0;
  char type[48] = {};
};

template <class T>
void set_type(Signature& s) {
  constexpr std::string_view n = type_name<T>();
  s.type_hash = fnv1a(n) ^ sizeof(T);
  s.elem_bytes = sizeof(T);
  std::memcpy(s.type, n.data(), n.size() < sizeof s.type - 1 ? n.size() : sizeof s.type - 1);
}

template <std::size_t R>
void set_extents(Signature& s, const std::array<std::size_t, R>& e) {
  s.tensor_rank = R;
  for (std::size_t d = 0; d < R; ++d) s.extents[d] = e[d];
}

inline std::string layout_text(std::int64_t code) {
  return code < 0 ? std::string("Replicated") : "Sharded<" + std::to_string(code) + ">";
}

inline std::string extents_text(const Signature& s) {
  std::string t = "[";
  for (std::uint64_t d = 0; d < s.tensor_rank && d < kMaxRank; ++d)
    t += (d ? ", " : "") + std::to_string(s.extents[d]);
  return t + "]";
}

// The first field on which some rank differs from rank 0, described with
// every rank's value, or "" when all agree.
inline std::string describe_disagreement(const std::vector<Signature>& all) {
  const Signature& a = all[0];
  auto list = [&](auto field) {
    std::string t;
    for (std::size_t r = 0; r < all.size(); ++r) t += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " " + field(all[r]);
    return t;
  };
  for (const Signature& b : all) {
    if (b.magic != a.magic || b.comm_size != a.comm_size)
      return "the ranks are not running the same dsp operation on one communicator";
    if (b.op != a.op)
      return "the ranks called different operations: " + list([](const Signature& s) { return std::string(op_name(s.op)); });
  }
  for (const Signature& b : all)
    if (b.type_hash != a.type_hash || b.elem_bytes != a.elem_bytes)
      return "element types disagree: " + list([](const Signature& s) {
               return std::string(s.type) + " (" + std::to_string(s.elem_bytes) + " bytes)";
             });
  for (const Signature& b : all)
    if (b.tensor_rank != a.tensor_rank || std::memcmp(b.extents, a.extents, sizeof a.extents) != 0)
      return "global extents disagree: " + list(extents_text);
  for (const Signature& b : all)
    if (b.src_layout != a.src_layout)
      return "input layouts disagree: " + list([](const Signature& s) { return layout_text(s.src_layout); });
  for (const Signature& b : all)
    if (b.dst_layout != a.dst_layout)
      return "target layouts disagree: " + list([](const Signature& s) { return layout_text(s.dst_layout); });
  for (const Signature& b : all)
    if (b.algorithm != a.algorithm)
      return "the ranks resolved different communication algorithms (is dsp::set_switch_algorithm or "
             "DSP_SWITCH_ALGORITHM set differently across ranks?): " +
             list([](const Signature& s) { return std::to_string(s.algorithm); });
  for (const Signature& b : all)
    if (b.root != a.root)
      return "root ranks disagree: " + list([](const Signature& s) { return std::to_string(s.root); });
  return "";
}

/// Collective (when agreement checks are on): all ranks exchange `mine` and
/// either all return or all throw. `local_error` is this rank's own message
/// when mine.status != ok; that rank throws it as InvalidArgument (or
/// `local_kind`), the others a MismatchError naming the failing rank.
/// With checks off, a local failure throws on this rank only.
template <class Comm>
void agree(Comm& comm, Signature mine, const std::string& local_error) {
  if (!agreement_checks()) {
    if (mine.status != 0) throw InvalidArgument(local_error);
    return;
  }
  const int n = comm.size();
  mine.comm_size = static_cast<std::uint64_t>(n);
  std::vector<Signature> all(static_cast<std::size_t>(n));
  comm.control_all_gather(&mine, all.data(), sizeof(Signature));
  const char* op = op_name(mine.op);
  if (mine.status != 0) throw InvalidArgument(local_error);
  for (int r = 0; r < n; ++r)
    if (all[r].status != 0)
      throw MismatchError(std::string(op) + ": rank " + std::to_string(r) + " could not take part because " +
                          status_text(all[r].status) + "; nothing was communicated and the input is unchanged");
  const std::string why = describe_disagreement(all);
  if (!why.empty())
    throw MismatchError(std::string(op) + ": " + why + "; nothing was communicated and the input is unchanged");
}

}  // namespace detail
}  // namespace dsp
