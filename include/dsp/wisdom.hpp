// SPDX-License-Identifier: BSD-3-Clause
// dsp: wisdom, what Planning::measure measured, kept for the process and
// carried between runs as text.
//
//   dsp::set_planning(dsp::Planning::measure);  // or DSP_PLANNING=measure
//   ... run the program's operations once: each new shape is measured ...
//   std::string w = dsp::export_wisdom();       // on one rank, save it
//   dsp::import_wisdom(w, comm);                // in a later run, before the operations
//   DSP_WISDOM=path                             // or: loaded by the first measured operation
//
// One decision per step of an operation: a switch of one tensor or of a
// batch, or a gather of one tensor or a batch, keyed by everything the
// candidates depend on (see docs/api.md, "Measured plans"):
//
//   switch world=2 axis=2 backend=dsp::MpiCommunicator extents=8x64x64x16 dims=1,2 elems=4
//          wire=exact caps=3 choice=datatypes measured=automatic:41.2,alltoall:-,...
//
// (one line in the text). `choice` is the switch algorithm setting the step
// runs under (automatic: the heuristic's own choice was fastest); `measured`
// the candidates' times in microseconds, max over ranks, "-" where a
// candidate was the same plan as an earlier one or could not run, ">t" where
// its warm-up run took t, over 4x the fastest's, and it was dropped. Import
// checks every line and changes nothing when one is wrong.
#pragma once

#include <dsp/engine/wisdom_store.hpp>
#include <dsp/error.hpp>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>

namespace dsp {

/// What this process measured under Planning::measure (and imported, from
/// import_wisdom or DSP_WISDOM), as text: one line per decision. Local;
/// every rank of a group holds the same decisions for the steps it shares,
/// so one rank's text serves all. DSP_WISDOM is loaded first, if it was not
/// yet (so the text changes only when a call measures); a DSP_WISDOM that
/// cannot be loaded raises dsp::InvalidArgument.
inline std::string export_wisdom() {
  if (const std::string& why = detail::wisdom_env_error(); !why.empty())
    throw InvalidArgument("dsp::export_wisdom: " + why);
  return detail::wisdom_text();
}

/// Loads wisdom text (local: call it on every rank). Text that does not
/// parse raises dsp::InvalidArgument and changes nothing. Later decisions
/// replace earlier ones of the same key. Every line is kept: its world size
/// and backend are part of its key, so it is used only where it fits.
inline void import_wisdom(std::string_view text) {
  std::map<detail::DecisionKey, detail::Decision> parsed;
  if (std::string why = detail::parse_wisdom(text, parsed); !why.empty())
    throw InvalidArgument("dsp::import_wisdom: " + why + " (nothing was imported)");
  detail::merge_wisdom(parsed);
}

namespace detail {
/// The communicator whose size and type key a group's decisions: a mesh's
/// world (the communicator it was made from), itself otherwise.
template <class G>
const auto& wisdom_world(const G& g) {
  if constexpr (requires {
                  g.world();
                  g.shape();
                  g.coords();
                })
    return wisdom_world(g.world());
  else return g;
}
}  // namespace detail

/// As import_wisdom(text), for the operations on `comm` (a communicator or a
/// mesh: a mesh means the communicator it was made from). Imports every line
/// (as import_wisdom(text)) and returns how many can serve `comm` or a
/// communicator split from it: those of its backend (a counting decorator
/// is its inner communicator's) measured on at most comm.size() ranks. Text
/// with decisions of which none is for comm's backend raises
/// dsp::InvalidArgument naming both (the wrong file, surely), and nothing
/// changes; a world size never does (after an elastic restart on fewer
/// ranks, the larger world's lines wait for a run that has it).
template <class Comm>
std::size_t import_wisdom(std::string_view text, const Comm& comm) {
  const auto& w = detail::wisdom_world(comm);
  const std::string backend = detail::backend_text(detail::backend_name<std::remove_cvref_t<decltype(w)>>());
  std::map<detail::DecisionKey, detail::Decision> parsed;
  const std::string who = "dsp::import_wisdom (rank " + std::to_string(w.rank()) + "): ";
  if (std::string why = detail::parse_wisdom(text, parsed); !why.empty())
    throw InvalidArgument(who + why + " (nothing was imported)");
  std::size_t fits = 0, ours = 0;
  std::string other;
  for (const auto& [k, d] : parsed) {
    if (d.backend != backend) {
      other = d.backend;
      continue;
    }
    ++ours;
    if (k[detail::dk::world] <= std::size_t(w.size())) ++fits;
  }
  if (!parsed.empty() && ours == 0)
    throw InvalidArgument(who + "the wisdom was measured for backend " + other + ", none of it for " + backend +
                          " (nothing was imported)");
  detail::merge_wisdom(parsed);
  return fits;
}

/// Forgets every decision (the next measured operation of each shape measures again).
inline void forget_wisdom() {
  detail::WisdomTable& w = detail::wisdom_table();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.entries.clear();
  w.generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace dsp
