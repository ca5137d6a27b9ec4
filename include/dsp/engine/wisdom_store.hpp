// SPDX-License-Identifier: BSD-3-Clause
// dsp: the process's wisdom table (what Planning::measure decided, by key),
// its text form, and DSP_WISDOM's loading. The public functions are in
// wisdom.hpp; the engine's measuring step (engine/measure.hpp) reads and
// writes the table.
#pragma once

#include <dsp/core/type_name.hpp>
#include <dsp/error.hpp>
#include <dsp/extents.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/settings.hpp>
#include <dsp/wire.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <sys/stat.h>

namespace dsp::detail {

/// What kind of step a decision is for.
enum class DecisionKind : std::size_t { none = 0, switch_one, switch_batch, gather_one, gather_batch };

/// A decision's key: kind, the operation's world size, the step's axis size,
/// the backend's name hash, tensor rank, the block's extents, dims, wire,
/// batch size, element sizes, capabilities. No rank: every rank of a group
/// shares it, and a wisdom text from one rank serves them all.
inline constexpr std::size_t kDecisionWords = 18 + kMaxRank + kMaxBatch;
using DecisionKey = std::array<std::size_t, kDecisionWords>;
namespace dk {
inline constexpr std::size_t kind = 0, world = 1, axis = 2, backend = 3, rank = 4, extents = 5, i = 5 + kMaxRank,
                             j = i + 1, wire = j + 1, items = wire + 1, elems = items + 1, caps = elems + kMaxBatch;
}
static_assert(dk::caps + 1 <= kDecisionWords);

/// A backend's name as wisdom writes it (no spaces).
inline std::string backend_text(std::string_view name) {
  std::string s;
  for (char c : name)
    if (c != ' ') s += c;
  return s;
}

inline DecisionKey decision_key(DecisionKind kind, int world, int axis, std::string_view backend,
                                std::span<const std::size_t> extents, std::size_t i, std::size_t j, Wire wire,
                                std::span<const std::size_t> elem_bytes, std::size_t caps) {
  DecisionKey k{};
  k[dk::kind] = std::size_t(kind);
  k[dk::world] = std::size_t(world);
  k[dk::axis] = std::size_t(axis);
  k[dk::backend] = std::size_t(fnv1a(backend_text(backend)));
  k[dk::rank] = extents.size();
  for (std::size_t d = 0; d < extents.size() && d < kMaxRank; ++d) k[dk::extents + d] = extents[d];
  k[dk::i] = i;
  k[dk::j] = j;
  k[dk::wire] = std::size_t(wire);
  k[dk::items] = elem_bytes.size();
  for (std::size_t t = 0; t < elem_bytes.size() && t < kMaxBatch; ++t) k[dk::elems + t] = elem_bytes[t];
  k[dk::caps] = caps;
  return k;
}

struct Decision {
  SwitchAlgorithm choice = SwitchAlgorithm::automatic;
  std::string backend;   // for export
  std::string measured;  // the candidates' times, for export
};

/// The process's decisions. `generation` changes with every change, so a
/// thread's last lookup stays valid until then without a lock.
struct WisdomTable {
  std::mutex mutex;
  std::map<DecisionKey, Decision> entries;
  std::atomic<std::uint64_t> generation{1};
};
inline WisdomTable& wisdom_table() {
  static WisdomTable t;
  return t;
}

/// The decision for `key`, if one was measured or imported.
inline std::optional<SwitchAlgorithm> find_decision(const DecisionKey& key) {
  WisdomTable& w = wisdom_table();
  thread_local std::uint64_t last_gen = 0;
  thread_local DecisionKey last_key{};
  thread_local std::optional<SwitchAlgorithm> last;
  const std::uint64_t gen = w.generation.load(std::memory_order_acquire);
  if (gen == last_gen && key == last_key) return last;
  std::lock_guard<std::mutex> lock(w.mutex);
  auto it = w.entries.find(key);
  last_gen = gen;
  last_key = key;
  last = it == w.entries.end() ? std::nullopt : std::optional<SwitchAlgorithm>(it->second.choice);
  return last;
}

inline void record_decision(const DecisionKey& key, Decision d) {
  WisdomTable& w = wisdom_table();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.entries[key] = std::move(d);
  w.generation.fetch_add(1, std::memory_order_acq_rel);
}

/// Adds parsed decisions to the table (later ones replace earlier ones).
inline void merge_wisdom(std::map<DecisionKey, Decision>& parsed) {
  WisdomTable& w = wisdom_table();
  std::lock_guard<std::mutex> lock(w.mutex);
  for (auto& [k, d] : parsed) w.entries[k] = std::move(d);
  w.generation.fetch_add(1, std::memory_order_acq_rel);
}

/// Whether DSP_WISDOM was read, and why loading it failed.
struct WisdomEnv {
  std::mutex mutex;
  std::atomic<bool> done{false};
  std::string error;
};
inline WisdomEnv& wisdom_env() {
  static WisdomEnv e;
  return e;
}
/// Tests: read DSP_WISDOM again at the next measured operation.
inline void reread_wisdom_env() { wisdom_env().done.store(false, std::memory_order_release); }

DSP_FUNC std::string wisdom_text();
DSP_FUNC std::string parse_wisdom(std::string_view text, std::map<DecisionKey, Decision>& out);
DSP_FUNC const std::string& wisdom_env_error();

#if DSP_FUNC_BODIES
DSP_FUNC std::string wisdom_text() {
  static constexpr const char* kinds[] = {"none", "switch", "batch-switch", "gather", "batch-gather"};
  WisdomTable& w = wisdom_table();
  std::lock_guard<std::mutex> lock(w.mutex);
  std::string s = "dsp-wisdom 1\n";
  for (const auto& [k, d] : w.entries) {
    s += kinds[k[dk::kind] < 5 ? k[dk::kind] : 0];
    s += " world=" + std::to_string(k[dk::world]) + " axis=" + std::to_string(k[dk::axis]) + " backend=" + d.backend;
    s += " extents=";
    for (std::size_t e = 0; e < k[dk::rank]; ++e) {
      if (e) s += 'x';
      s += std::to_string(k[dk::extents + e]);
    }
    s += " dims=" + std::to_string(k[dk::i]) + "," + std::to_string(k[dk::j]) + " elems=";
    for (std::size_t t = 0; t < k[dk::items]; ++t) {
      if (t) s += ',';
      s += std::to_string(k[dk::elems + t]);
    }
    s += std::string(" wire=") + wire_name(Wire(k[dk::wire])) + " caps=" + std::to_string(k[dk::caps]);
    s += std::string(" choice=") + to_string(d.choice);
    if (!d.measured.empty()) s += " measured=" + d.measured;
    s += "\n";
  }
  return s;
}

/// Parses wisdom text into `out`; returns why it does not parse ("" when it does).
/// A decimal number of at most 18 digits.
inline bool wisdom_number(std::string_view v, std::size_t& n) {
  if (v.empty() || v.size() > 18) return false;
  n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + std::size_t(c - '0');
  }
  return true;
}

/// A list of at most `most` numbers separated by `sep`.
inline bool wisdom_list(std::string_view v, char sep, std::size_t most, std::size_t* vals, std::size_t& count) {
  count = 0;
  while (true) {
    const std::size_t at = v.find(sep);
    if (count == most || !wisdom_number(v.substr(0, at), vals[count])) return false;
    ++count;
    if (at == std::string_view::npos) return true;
    v.remove_prefix(at + 1);
  }
}

/// One decision line as read, field by field.
struct WisdomLine {
  DecisionKind kind = DecisionKind::none;
  std::size_t w = 0, axis = 0, caps = 0, nd = 0, ne = 0, ni = 0;
  std::size_t ext[kMaxRank] = {}, dims[2] = {}, elems[kMaxBatch] = {};
  std::string backend, measured;
  std::optional<Wire> wire;
  std::optional<SwitchAlgorithm> choice;
  unsigned seen = 0;  // one bit per key
};

/// Reads `key=value` into the line; returns why it cannot ("" when it can).
inline std::string wisdom_field(std::string_view k, std::string_view v, WisdomLine& l) {
  bool ok = true;
  unsigned bit = 0;
  if (k == "world") bit = 1, ok = wisdom_number(v, l.w) && l.w >= 1 && l.w <= (1u << 30);
  else if (k == "axis") bit = 2, ok = wisdom_number(v, l.axis) && l.axis >= 1 && l.axis <= (1u << 30);
  else if (k == "backend") bit = 4, l.backend = std::string(v), ok = !v.empty();
  else if (k == "extents") bit = 8, ok = wisdom_list(v, 'x', kMaxRank, l.ext, l.nd);
  else if (k == "dims") bit = 16, ok = wisdom_list(v, ',', 2, l.dims, l.ni) && l.ni == 2;
  else if (k == "elems") bit = 32, ok = wisdom_list(v, ',', kMaxBatch, l.elems, l.ne);
  else if (k == "wire") {
    bit = 64;
    for (Wire x : kWires)
      if (v == wire_name(x)) l.wire = x;
    ok = l.wire.has_value();
  } else if (k == "caps") bit = 128, ok = wisdom_number(v, l.caps) && l.caps <= 3;
  else if (k == "choice") {
    bit = 256;
    for (SwitchAlgorithm a : {SwitchAlgorithm::automatic, SwitchAlgorithm::alltoall, SwitchAlgorithm::alltoallv,
                              SwitchAlgorithm::pairwise, SwitchAlgorithm::datatypes})
      if (v == to_string(a)) l.choice = a;
    ok = l.choice.has_value();
  } else if (k == "measured") bit = 512, l.measured = std::string(v);
  else return "unknown key \"" + std::string(k) + "\"";
  if (!ok) return "bad value \"" + std::string(v) + "\" for " + std::string(k);
  if (l.seen & bit) return std::string(k) + " given twice";
  l.seen |= bit;
  return "";
}

/// What is wrong with a line whose fields all read (or "").
inline std::string wisdom_line_error(const WisdomLine& l) {
  if ((l.seen & 511) != 511) return "missing one of world, axis, backend, extents, dims, elems, wire, caps, choice";
  if (l.dims[0] >= l.nd || l.dims[1] >= l.nd) return "dims name a dim past the extents";
  if (l.axis > l.w) return "axis is larger than world";
  for (std::size_t t = 0; t < l.ne; ++t)
    if (l.elems[t] == 0 || l.elems[t] > 64) return "an element size must be 1 to 64 bytes";
  if ((l.kind == DecisionKind::switch_one || l.kind == DecisionKind::gather_one) && l.ne != 1)
    return "a one-tensor step has one element size";
  return "";
}

/// Reads one decision line (trimmed, not a comment) into `out`; returns why
/// it cannot ("" when it can).
inline std::string parse_wisdom_line(std::string_view line, std::map<DecisionKey, Decision>& out) {
  std::array<std::string_view, 16> tok{};
  std::size_t nt = 0;
  while (!line.empty()) {
    const std::size_t sp = line.find_first_of(" \t");
    if (nt == tok.size()) return "too many fields";
    tok[nt++] = line.substr(0, sp);
    line.remove_prefix(sp == std::string_view::npos ? line.size() : sp);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  }
  WisdomLine l;
  if (tok[0] == "switch") l.kind = DecisionKind::switch_one;
  else if (tok[0] == "batch-switch") l.kind = DecisionKind::switch_batch;
  else if (tok[0] == "gather") l.kind = DecisionKind::gather_one;
  else if (tok[0] == "batch-gather") l.kind = DecisionKind::gather_batch;
  else return "unknown kind \"" + std::string(tok[0]) + "\" (switch, batch-switch, gather, batch-gather)";
  for (std::size_t t = 1; t < nt; ++t) {
    const std::size_t eq = tok[t].find('=');
    if (eq == std::string_view::npos) return "expected key=value, found \"" + std::string(tok[t]) + "\"";
    if (std::string why = wisdom_field(tok[t].substr(0, eq), tok[t].substr(eq + 1), l); !why.empty()) return why;
  }
  if (std::string why = wisdom_line_error(l); !why.empty()) return why;
  Decision d;
  d.choice = *l.choice;
  d.backend = l.backend;
  d.measured = l.measured;
  out[decision_key(l.kind, int(l.w), int(l.axis), l.backend, std::span<const std::size_t>(l.ext, l.nd), l.dims[0],
                   l.dims[1], *l.wire, std::span<const std::size_t>(l.elems, l.ne), l.caps)] = std::move(d);
  return "";
}

DSP_FUNC std::string parse_wisdom(std::string_view text, std::map<DecisionKey, Decision>& out) {
  std::size_t line_no = 0;
  bool header = false;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = "wisdom line " + std::to_string(line_no) + ": ";
    if (!header) {
      if (line != "dsp-wisdom 1")
        return where + "expected the header \"dsp-wisdom 1\", found \"" + std::string(line) + "\"";
      header = true;
    } else if (std::string why = parse_wisdom_line(line, out); !why.empty()) {
      return where + why;
    }
  }
  if (!header) return "wisdom: empty text (no \"dsp-wisdom 1\" header)";
  return "";
}

/// DSP_WISDOM, read and loaded once, by the first measured operation (or
/// export_wisdom); returns why it could not be loaded ("" when it was, or is
/// unset). Every line is loaded, whatever world size and backend it was
/// measured for: those are part of each decision's key, so a line is used
/// exactly where it fits (a file from a run that also measured on a split,
/// or from before an elastic restart on another rank count, is fine). The
/// operation that asks raises the text on every rank (and so does every
/// later one: the variable is not read again).
DSP_FUNC const std::string& wisdom_env_error() {
  WisdomEnv& st = wisdom_env();
  if (st.done.load(std::memory_order_acquire)) return st.error;
  std::lock_guard<std::mutex> lock(st.mutex);
  if (st.done.load(std::memory_order_relaxed)) return st.error;
  st.error.clear();
  const char* e = std::getenv("DSP_WISDOM");
  const std::string path = e ? e : "";
  // A wisdom file has a line per measured shape: a few KiB. A bound keeps a
  // wrong path (/dev/zero, a huge file) from reading without end.
  constexpr std::size_t kMost = std::size_t(16) << 20;
  std::string text;
  struct stat info {};
  if (path.empty()) {
  } else if (::stat(path.c_str(), &info) != 0) {
    st.error = "DSP_WISDOM=" + path + ": cannot open the file (no such file?)";
  } else if (S_ISDIR(info.st_mode)) {
    st.error = "DSP_WISDOM=" + path + ": is a directory, not a wisdom file";
  } else if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    for (std::size_t n; text.size() <= kMost && (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
    std::map<DecisionKey, Decision> parsed;
    if (text.size() > kMost)
      st.error = "DSP_WISDOM=" + path + ": longer than " + std::to_string(kMost >> 20) +
                 " MiB, which no wisdom file is (is it the right path?)";
    else if (std::string why = parse_wisdom(text, parsed); !why.empty()) st.error = "DSP_WISDOM=" + path + ": " + why;
    else merge_wisdom(parsed);
  } else {
    st.error = "DSP_WISDOM=" + path + ": cannot open the file";
  }
  st.done.store(true, std::memory_order_release);
  return st.error;
}
#endif

}  // namespace dsp::detail
