// SPDX-License-Identifier: BSD-3-Clause
// dsp: the engine of a redistribution on one communicator where a side is
// Zigzag<D> or Blocks<D>, or of a batch of tensors of different extents
// (plan/cut.hpp): prepare (each tensor's plan, cached, and the workspace),
// agree, then one exchange: point-to-point messages between the blocks'
// runs (or one side's runs, the other side staged through the workspace),
// the same runs as one typed collective (a rank's sends packed first where
// its parts are a few long runs), or one packed all-to-all-v
// (of every tensor's sections, for a batch; or, where each tensor of a batch
// moves without copies on its own, each tensor's exchange in turn). On a
// low-precision wire: the packed exchange, each tensor's part of a peer's
// chunk one wire section (wire.hpp), converted straight from and into the
// tensors (bf16, fp16, fp32) or through an exact staging copy (fp8, whose
// scales belong to blocks of the section), the own block through the wire's
// rounding.
#pragma once

#include <dsp/core/agree.hpp>
#include <dsp/core/buffers.hpp>
#include <dsp/core/exclusive.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/engine/steps.hpp>
#include <dsp/kernels/convert.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/plan/cut.hpp>
#include <dsp/plan/packed.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace dsp::detail {

/// The cut plans in use, by every value they depend on (Blocks' sizes
/// included): a small cache of its own, emptied when it passes 64 plans. The
/// last plan a thread used is found by comparing its key, without a lock.
inline std::shared_ptr<const CutPlan> cached_cut_plan(const RecutArgs& a, std::size_t p, std::size_t n,
                                                      Capabilities caps, SwitchAlgorithm setting, bool direct) {
  thread_local std::vector<std::size_t> key, last_key;
  thread_local std::shared_ptr<const CutPlan> last;
  key.clear();
  key.insert(key.end(), a.global.begin(), a.global.end());
  for (const CutSide* s : {&a.from, &a.to}) {
    key.push_back(s->dim);
    key.push_back(std::size_t(s->cut.kind));
    if (s->cut.kind == Cut::Kind::blocks) key.insert(key.end(), s->cut.starts, s->cut.starts + n + 1);
  }
  key.insert(key.end(), {a.global.size(), p, n, a.elem_bytes, std::size_t(caps.peer) | std::size_t(caps.typed) << 1,
                         std::size_t(setting), std::size_t(direct)});
  if (last && key == last_key) return last;
  static std::mutex m;
  static std::map<std::vector<std::size_t>, std::shared_ptr<const CutPlan>> plans;
  {
    std::lock_guard lock(m);
    if (auto it = plans.find(key); it != plans.end()) {
      last_key = key;
      return last = it->second;
    }
  }
  const CutMode mode = cut_mode(a.global, a.from, a.to, n, a.elem_bytes, caps, setting);
  auto built = std::make_shared<CutPlan>(plan_cut(a.global, a.from, a.to, p, n, mode, direct));
  if (direct && mode == CutMode::packed && setting == SwitchAlgorithm::automatic && n > 1 &&
      a.from.cut.kind != Cut::Kind::whole && eager_pieces_chunk(average_cut_chunk(a.global, a.to, n) * a.elem_bytes))
    built->copies_kept = std::make_shared<const CutPlan>(plan_cut(a.global, a.from, a.to, p, n, mode, false));
  std::shared_ptr<const CutPlan> plan = std::move(built);
  {
    std::lock_guard lock(m);
    if (plans.size() >= 64) plans.clear();
    plans.emplace(key, plan);
  }
  last_key = key;
  return last = plan;
}

/// A batch's packed exchange: every tensor's section of each peer's chunk in
/// turn, each at an offset aligned to its element size, counts in bytes;
/// each tensor's pack and unpack tasks moved into its sections. Rebuilt per
/// call into reused buffers (no allocation once warm).
struct BatchSections {
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;  // bytes, rank order
  std::vector<std::vector<CopyTask>> pack, unpack;                              // per tensor
  std::vector<std::size_t> send_at, recv_at;  // tensor k's section of peer q's chunk: byte [k * n + q]
  std::size_t send_bytes = 0, recv_bytes = 0, bound = 0;
};

/// Tasks [first[q], end[q]) of `tasks` moved so that peer q's section (at
/// `own[q]` elements in the tensor's own buffer) starts at byte `at[q]`.
inline void rebase(const std::vector<CopyTask>& tasks, const std::vector<std::size_t>& first,
                   const std::vector<std::size_t>& end, const std::vector<std::size_t>& own,
                   const std::vector<std::size_t>& at, std::size_t eb, bool buffer_is_dst, std::vector<CopyTask>& out) {
  out.clear();
  for (std::size_t q = 0; q < first.size(); ++q)
    for (std::size_t t = first[q]; t < end[q]; ++t) {
      CopyTask c = tasks[t];
      Runs& r = buffer_is_dst ? c.dst : c.src;
      r.base = at[q] / eb + (r.base - own[q]);
      out.push_back(c);
    }
}

inline void batch_sections(std::span<const RecutArgs> items, std::span<const std::shared_ptr<const CutPlan>> plans,
                           std::size_t n, BatchSections& b) {
  b.send_counts.assign(n, 0), b.send_displs.assign(n, 0), b.recv_counts.assign(n, 0), b.recv_displs.assign(n, 0);
  b.pack.resize(items.size()), b.unpack.resize(items.size());
  b.send_at.resize(items.size() * n), b.recv_at.resize(items.size() * n);
  thread_local std::vector<std::size_t> sat, rat;
  auto align = [](std::size_t v, std::size_t a) { return (v + a - 1) / a * a; };
  // A chunk's layout is the same on both sides of a pair: each section aligned to its element size
  // from the chunk's start, and chunks start at multiples of every element size.
  std::size_t unit = 1;
  b.bound = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const std::size_t eb = items[k].elem_bytes;
    unit = std::lcm(unit, eb);
    b.bound += plans[k]->bound * eb + eb;  // equal on every rank: each tensor's bound, its padding
  }
  b.bound += n * unit;
  std::size_t so = 0, ro = 0;
  for (std::size_t q = 0; q < n; ++q) {
    so = align(so, unit), ro = align(ro, unit);
    b.send_displs[q] = so, b.recv_displs[q] = ro;
    std::size_t sc = 0, rc = 0;
    for (std::size_t k = 0; k < items.size(); ++k) {
      const std::size_t eb = items[k].elem_bytes;
      sc = align(sc, eb) + plans[k]->send_counts[q] * eb;
      rc = align(rc, eb) + plans[k]->recv_counts[q] * eb;
    }
    b.send_counts[q] = sc, b.recv_counts[q] = rc;
    so += sc, ro += rc;
  }
  b.send_bytes = so, b.recv_bytes = ro;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const std::size_t eb = items[k].elem_bytes;
    sat.assign(n, 0), rat.assign(n, 0);
    for (std::size_t q = 0; q < n; ++q) {  // this tensor's section of each chunk
      std::size_t s = 0, r = 0;
      for (std::size_t u = 0; u <= k; ++u) {
        const std::size_t e = items[u].elem_bytes;
        s = align(s, e), r = align(r, e);
        if (u < k) s += plans[u]->send_counts[q] * e, r += plans[u]->recv_counts[q] * e;
      }
      sat[q] = b.send_displs[q] + s, rat[q] = b.recv_displs[q] + r;
      b.send_at[k * n + q] = sat[q], b.recv_at[k * n + q] = rat[q];
    }
    const CutPlan& c = *plans[k];
    rebase(c.pack, c.pack_first, c.pack_end, c.send_displs, sat, eb, true, b.pack[k]);
    rebase(c.unpack, c.unpack_first, c.unpack_end, c.recv_displs, rat, eb, false, b.unpack[k]);
  }
}

/// A batch's exchange on a low-precision wire: tensor k's exact section of
/// peer q's chunk (BatchSections) travels as one wire section of as many
/// elements (wire_section_bytes: a multiple of 4 bytes), the tensors'
/// sections one after another, counts in bytes: the bytes of the main
/// engine's wire sections. A sender and its receiver lay a chunk out alike:
/// each tensor's element counts are the same on both sides of a pair.
struct WireSections {
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;  // bytes, rank order
  std::vector<std::size_t> send_at, recv_at;                                    // [k * n + q], bytes
  std::size_t send_bytes = 0, recv_bytes = 0, bound = 0;
};

inline void wire_sections(std::span<const RecutArgs> items, std::span<const std::shared_ptr<const CutPlan>> plans,
                          std::size_t n, Wire w, WireSections& ws) {
  ws.send_counts.assign(n, 0), ws.send_displs.assign(n, 0), ws.recv_counts.assign(n, 0), ws.recv_displs.assign(n, 0);
  ws.send_at.assign(items.size() * n, 0), ws.recv_at.assign(items.size() * n, 0);
  ws.bound = 0;
  for (std::size_t k = 0; k < items.size(); ++k)  // equal on every rank: each tensor's bound, n sections' scales
    ws.bound += wire_section_bytes(w, plans[k]->bound, items[k].elem_bytes) + n * 8;
  std::size_t so = 0, ro = 0;
  for (std::size_t q = 0; q < n; ++q) {
    ws.send_displs[q] = so, ws.recv_displs[q] = ro;
    for (std::size_t k = 0; k < items.size(); ++k) {
      const std::size_t eb = items[k].elem_bytes;
      ws.send_at[k * n + q] = so, ws.recv_at[k * n + q] = ro;
      so += wire_section_bytes(w, plans[k]->send_counts[q], eb);
      ro += wire_section_bytes(w, plans[k]->recv_counts[q], eb);
    }
    ws.send_counts[q] = so - ws.send_displs[q], ws.recv_counts[q] = ro - ws.recv_displs[q];
  }
  ws.send_bytes = so, ws.recv_bytes = ro;
}

/// Whether wire w's sections are element by element (bf16, fp16, fp32: element
/// e of a section at byte e * width), so that each copy task converts
/// straight between the tensor and its part of the section; fp8's blocks of
/// kFp8Block elements share a scale, so its sections are packed exact first.
inline bool elementwise_wire(Wire w) { return w != Wire::fp8_e4m3; }
/// The bytes the exact staging of a wire exchange takes ahead of its wire
/// sections in a workspace buffer (fp8 only), to a 16-byte boundary.
inline std::size_t wire_staging_bytes(Wire w, std::size_t exact_bytes) {
  return elementwise_wire(w) ? 0 : (exact_bytes + 15) / 16 * 16;
}

/// The packed exchange on a wire (run_recut): the own blocks through the
/// wire's rounding; each tensor's sections converted into its wire sections
/// in `wsbuf` (element-wise wires: each pack task straight from the tensor;
/// fp8: packed exact into `sbuf` first, then each section converted), the
/// all-to-all-v of the wire sections into `wrbuf`, and back the same way
/// (fp8 through `rbuf`).
template <class M>
void exchange_wired(PortOn<M>& port, std::span<const RecutArgs> items,
                    std::span<const std::shared_ptr<const CutPlan>> plans, const BatchSections& b,
                    const WireSections& ws, unsigned char* sbuf, unsigned char* rbuf, unsigned char* wsbuf,
                    unsigned char* wrbuf) {
  using Exec = typename M::execution_space;
  const auto exec = port.exec();
  const std::size_t n = std::size_t(port.size());
  const Wire w = items[0].wire;
  const bool direct = elementwise_wire(w);
  const std::size_t width = w == Wire::fp32 ? 4 : 2;
  auto kernels = [&](std::size_t k) -> const WireKernels<Exec>& {
    return *static_cast<const WireKernels<Exec>*>(items[k].wire_kernels);
  };
  for (std::size_t k = 0; k < items.size(); ++k)
    for (const CopyTask& t : plans[k]->self) kernels(k).round(exec, w, items[k].dst, items[k].src, t);
  if (n == 1) return;  // one rank: its own block is everything
  for (std::size_t k = 0; k < items.size(); ++k) {
    const CutPlan& c = *plans[k];
    if (!direct) copy_runs(exec, sbuf, items[k].src, items[k].elem_bytes, b.pack[k], true);
    for (std::size_t q = 0; q < n; ++q) {
      unsigned char* sec = wsbuf + ws.send_at[k * n + q];
      if (!direct) {
        if (const std::size_t m = c.send_counts[q])
          kernels(k).pack(exec, w, sec, sbuf + b.send_at[k * n + q], contiguous(0, m), m);
        continue;
      }
      for (std::size_t t = c.pack_first[q]; t < c.pack_end[q]; ++t) {  // buffer side: contiguous from dst.base
        const CopyTask& task = c.pack[t];
        kernels(k).pack(exec, w, sec + (task.dst.base - c.send_displs[q]) * width, items[k].src, task.src, task.elems);
      }
    }
  }
  fence_before_transfer(port, exec);
  port.all_to_all_v(wsbuf, ws.send_counts, ws.send_displs, wrbuf, ws.recv_counts, ws.recv_displs, 1, ws.bound);
  for (std::size_t k = 0; k < items.size(); ++k) {
    const CutPlan& c = *plans[k];
    for (std::size_t q = 0; q < n; ++q) {
      const unsigned char* sec = wrbuf + ws.recv_at[k * n + q];
      if (!direct) {
        if (const std::size_t m = c.recv_counts[q])
          kernels(k).unpack(exec, w, rbuf + b.recv_at[k * n + q], contiguous(0, m), sec, m);
        continue;
      }
      for (std::size_t t = c.unpack_first[q]; t < c.unpack_end[q]; ++t) {  // buffer side: contiguous from src.base
        const CopyTask& task = c.unpack[t];
        kernels(k).unpack(exec, w, items[k].dst, task.dst, sec + (task.src.base - c.recv_displs[q]) * width,
                          task.elems);
      }
    }
    if (!direct) copy_runs(exec, items[k].dst, rbuf, items[k].elem_bytes, b.unpack[k], true);
  }
}

/// A batch at least this large (every tensor's largest block, summed) moves
/// tensor by tensor (RecutRun::separate): measured, three GQA tensors of
/// 96 MiB in all moved 1.24-1.30x slower as one packed exchange than as
/// three switches (docs/benchmarks.md); at 24 KiB one exchange is 0.74-0.84x.
inline constexpr std::size_t kSeparateBatchBytes = std::size_t(4) << 20;

/// The packed exchange of one tensor's own plan: its own part copied, the
/// rest packed (or sent from the tensor where its plan allows), one
/// all-to-all-v, unpacked (or received into the tensor).
template <class M>
void exchange_packed(PortOn<M>& port, const CutPlan& c, const RecutArgs& a) {
  const auto exec = port.exec();
  copy_runs(exec, a.dst, a.src, a.elem_bytes, c.self, true);
  if (port.size() > 1 && c.bound > 0) {
    const auto [sbuf, rbuf] = workspace_buffers<M>(port);
    copy_runs(exec, sbuf, a.src, a.elem_bytes, c.pack, true);
    fence_before_transfer(port, exec);
    port.all_to_all_v(c.send_from_input ? a.src : sbuf, c.send_counts, c.send_displs,
                      c.recv_into_output ? a.dst : static_cast<void*>(rbuf), c.recv_counts, c.recv_displs, a.elem_bytes,
                      c.bound);
    copy_runs(exec, a.dst, rbuf, a.elem_bytes, c.unpack, true);
  }
  fence_after(port, exec);
}

/// The point-to-point exchange of one tensor's staged plan (CutMode::staged_send
/// or staged_recv): the staged side through the workspace (packed before,
/// or unpacked after), the other straight from or into the tensor, its own
/// part copied while the messages fly.
template <class M>
void exchange_staged(PortOn<M>& port, const CutPlan& c, const RecutArgs& a) {
  const auto exec = port.exec();
  const auto [sbuf, rbuf] = workspace_buffers<M>(port);
  const bool send_staged = c.mode == CutMode::staged_send;
  copy_runs(exec, sbuf, a.src, a.elem_bytes, c.pack, true);
  fence_before_transfer(port, exec);
  port.exchange_runs(send_staged ? static_cast<const void*>(sbuf) : a.src, c.sends,
                     send_staged ? a.dst : static_cast<void*>(rbuf), c.recvs, a.elem_bytes, [&] {
                       copy_runs(exec, a.dst, a.src, a.elem_bytes, c.self, true);
                       fence_after(port, exec);
                     });
  copy_runs(exec, a.dst, rbuf, a.elem_bytes, c.unpack, true);
  fence_after(port, exec);
}

/// The exchange of one tensor's own plan (point to point or typed; a
/// typed_staged plan's sends packed into the workspace first where it has
/// pack tasks), its own part copied meanwhile.
template <class M>
void exchange_one(PortOn<M>& port, const CutPlan& plan, const RecutArgs& a) {
  const auto exec = port.exec();
  auto local = [&] {
    copy_runs(exec, a.dst, a.src, a.elem_bytes, plan.self, true);
    fence_after(port, exec);
  };
  if (product(a.global) == 0) return local();  // the same on every rank: none enters the typed collective
  const void* from = a.src;
  if (!plan.pack.empty()) {
    unsigned char* sbuf = workspace_buffers<M>(port).send;
    copy_runs(exec, sbuf, a.src, a.elem_bytes, plan.pack, true);
    from = sbuf;
  }
  fence_before_transfer(port, exec);
  if (cut_typed(plan.mode)) return port.exchange_runs_typed(from, plan.sends, a.dst, plan.recvs, a.elem_bytes, local);
  port.exchange_runs(a.src, plan.sends, a.dst, plan.recvs, a.elem_bytes, local);
}

/// A prepared exchange between cuts (of one tensor or a batch): each
/// tensor's plan, and how they run together.
struct RecutRun {
  std::vector<std::shared_ptr<const CutPlan>> plans;
  BatchSections sections;
  WireSections wired;
  bool on_wire = false, whole_in = false, separate = false;
  // A packed batch's chunks as point-to-point messages (packed_sectioned's rule: automatic or pairwise,
  // a backend with PeerExchange), each cut by chunk_piece_bytes.
  bool sectioned = false;
  std::vector<PeerRuns> section_sends, section_recvs;
};

/// The chunks of a packed batch as messages (chunk_piece_bytes, plan/packed.hpp:
/// unlike a switch batch's sections, a cut batch's sections differ in size,
/// so a message need not be one tensor's), peer by peer from the nearest.
inline void chunk_peer_messages(const BatchSections& b, std::size_t p, std::size_t n, std::vector<PeerRuns>& sends,
                                std::vector<PeerRuns>& recvs) {
  sends.clear(), recvs.clear();
  auto message = [&](std::size_t q, std::size_t bytes, std::size_t at, std::vector<PeerRuns>& out) {
    if (bytes) out.push_back({int(q), contiguous(at, bytes), chunk_piece_bytes(bytes), bytes});
  };
  for (std::size_t k = 1; k < n; ++k) {
    const std::size_t to = (p + k) % n, from = (p + n - k) % n;
    message(to, b.send_counts[to], b.send_displs[to], sends);
    message(from, b.recv_counts[from], b.recv_displs[from], recvs);
  }
}

/// Plans `items` (their pointers unused) on port, into r, and reserves the
/// workspace; throws on failure (the caller's prepare reports it).
template <class M>
void prepare_recut(PortOn<M>& port, std::span<const RecutArgs> items, SwitchAlgorithm setting, RecutRun& r) {
  const std::size_t n = std::size_t(port.size()), p = std::size_t(port.rank());
  const Capabilities caps = capabilities_of(port);
  r.whole_in = items[0].from.cut.kind == Cut::Kind::whole;  // a batch shares its layouts
  r.separate = r.sectioned = false;  // a thread's previous exchange must not leak into this one's path
  // On a wire: every tensor's elements converted, one packed exchange (a split, from Replicated, is
  // local and exact, as everywhere).
  r.on_wire = items[0].wire != Wire::exact && !r.whole_in;
  r.plans.assign(items.size(), nullptr);
  if (r.on_wire) {
    for (std::size_t k = 0; k < items.size(); ++k)
      r.plans[k] = cached_cut_plan(items[k], p, n, caps, SwitchAlgorithm::alltoallv, false);
    batch_sections(items, r.plans, n, r.sections);
    wire_sections(items, r.plans, n, items[0].wire, r.wired);
    // The exact staging (fp8 only) first, then the wire sections.
    if (n > 1 && (r.wired.send_bytes || r.wired.recv_bytes))
      workspace<M>(port).reserve(wire_staging_bytes(items[0].wire, r.sections.send_bytes) + r.wired.send_bytes,
                                 wire_staging_bytes(items[0].wire, r.sections.recv_bytes) + r.wired.recv_bytes);
    return;
  }
  // A batch whose every tensor would move without copies on its own does so, in turn (two copies per
  // byte saved), and so does a large batch (each tensor its own exchange, a packed one sending from
  // and receiving into the tensors where it can: what one packed exchange of the whole batch saves is
  // a collective per tensor, which pays only for small blocks); else one packed exchange of every
  // tensor's sections. `most`: every tensor's largest block, summed (equal on every rank of the port).
  if (items.size() == 1) {
    // One tensor: its own exchange, or (packed, a small one whose chunks pass the eager limit) its chunks
    // in eager pieces, through the batch's sections below (plan/packed.hpp, kEagerPiecesChunkBytes), with
    // the copies the direct plan saves kept (CutPlan::copies_kept).
    r.plans[0] = cached_cut_plan(items[0], p, n, caps, setting, true);
    const bool eager =
        setting == SwitchAlgorithm::automatic && caps.peer && eager_pieces_apply(port) && r.plans[0]->copies_kept;
    if (eager) r.plans[0] = r.plans[0]->copies_kept;
    r.separate = !eager;
  }
  std::size_t most = 0;
  if (!r.separate)
    for (const RecutArgs& a : items) most += largest_cut_block(a.global, a.from, a.to, n) * a.elem_bytes;
  if (items.size() > 1 && !r.whole_in) {
    bool copy_free = true;
    for (const RecutArgs& a : items)
      if (const CutMode m = cut_mode(a.global, a.from, a.to, n, a.elem_bytes, caps, setting, false);
          m != CutMode::peer && m != CutMode::typed)
        copy_free = false;
    r.separate = copy_free || most >= kSeparateBatchBytes;
  }
  if (items.size() > 1)
    for (std::size_t k = 0; k < items.size(); ++k)
      r.plans[k] = r.separate ? cached_cut_plan(items[k], p, n, caps, setting, true)
                              : cached_cut_plan(items[k], p, n, caps, SwitchAlgorithm::alltoallv, false);
  std::size_t sb = 0, rb = 0;
  if (r.separate)  // each tensor in turn: the workspace of the largest packed or staged one (else 0)
    for (std::size_t k = 0; k < items.size(); ++k)
      sb = std::max(sb, r.plans[k]->send_elems * items[k].elem_bytes),
      rb = std::max(rb, r.plans[k]->recv_elems * items[k].elem_bytes);
  if (!r.separate) {
    batch_sections(items, r.plans, n, r.sections);
    sb = r.sections.send_bytes, rb = r.sections.recv_bytes;
    // Under automatic and pairwise, small chunks go point to point where the backend can, cut into
    // messages under the transport's eager limit: one round trip fewer than an all-to-all-v
    // (docs/benchmarks.md). Small: `most` fits kMaxEagerPieces messages.
    r.sectioned = (setting == SwitchAlgorithm::automatic || setting == SwitchAlgorithm::pairwise) && caps.peer &&
                  n > 1 && !r.whole_in && (items.size() == 1 || most <= kMaxEagerPieces * kEagerMessageBytes);
    if (r.sectioned) chunk_peer_messages(r.sections, p, n, r.section_sends, r.section_recvs);
  }
  if (n > 1 && !r.whole_in && (sb || rb)) workspace<M>(port).reserve(sb, rb);
}

/// The path a prepared exchange takes (the agreement compares it).
inline Path recut_path(const RecutRun& r, std::size_t items) {
  const CutMode mode = r.plans[0]->mode;
  return r.whole_in                                  ? Path::identity
         : items > 1 && r.separate                   ? Path::per_tensor
         : r.sectioned                               ? Path::sections
         : mode == CutMode::peer || cut_staged(mode) ? Path::pairwise
         : cut_typed(mode)                           ? Path::datatypes
                                                     : Path::alltoallv;
}

/// Runs a prepared exchange on `items` (blocking).
template <class M>
void execute_recut(PortOn<M>& port, std::span<const RecutArgs> items, const RecutRun& r) {
  const std::size_t n = std::size_t(port.size());
  const auto exec = port.exec();
  if (r.on_wire) {
    const auto [sbuf, rbuf] = workspace_buffers<M>(port);
    const Wire wire = items[0].wire;
    exchange_wired(port, items, r.plans, r.sections, r.wired, sbuf, rbuf,
                   sbuf ? sbuf + wire_staging_bytes(wire, r.sections.send_bytes) : nullptr,
                   rbuf ? rbuf + wire_staging_bytes(wire, r.sections.recv_bytes) : nullptr);
    fence_after(port, exec);
    return;
  }
  if (r.separate) {  // one tensor, or each tensor's own exchange in turn
    for (std::size_t k = 0; k < items.size(); ++k) {
      const CutMode m = r.plans[k]->mode;
      if (m == CutMode::packed) exchange_packed(port, *r.plans[k], items[k]);
      else if (cut_staged(m)) exchange_staged(port, *r.plans[k], items[k]);
      else exchange_one(port, *r.plans[k], items[k]);
    }
    return;
  }
  for (std::size_t k = 0; k < items.size(); ++k)
    copy_runs(exec, items[k].dst, items[k].src, items[k].elem_bytes, r.plans[k]->self, true);
  if (n > 1 && !r.whole_in) {
    const auto [sbuf, rbuf] = workspace_buffers<M>(port);
    if (r.sections.bound > 0) {
      for (std::size_t k = 0; k < items.size(); ++k)
        copy_runs(exec, sbuf, items[k].src, items[k].elem_bytes, r.sections.pack[k], true);
      fence_before_transfer(port, exec);
      if (r.sectioned) port.exchange_runs(sbuf, r.section_sends, rbuf, r.section_recvs, 1, [] {});
      else
        port.all_to_all_v(sbuf, r.sections.send_counts, r.sections.send_displs, rbuf, r.sections.recv_counts,
                          r.sections.recv_displs, 1, r.sections.bound);
      for (std::size_t k = 0; k < items.size(); ++k)
        copy_runs(exec, items[k].dst, rbuf, items[k].elem_bytes, r.sections.unpack[k], true);
    }
  }
  fence_after(port, exec);
}

/// The mesh engine's recut step (RecutHooks): prepare into the thread's
/// slot for step `slot`, then execute.
template <class M>
RecutRun* prepare_recut_slot(PortOn<M>& port, std::span<const RecutArgs> items, SwitchAlgorithm setting,
                             std::size_t slot) {
  thread_local std::array<RecutRun, kMaxSteps> runs;
  prepare_recut(port, items, setting, runs[slot]);
  return &runs[slot];
}
template <class M>
const void* recut_hooks() {
  static constexpr RecutHooks<M> hooks{&prepare_recut_slot<M>, &execute_recut<M>};
  return &hooks;
}

/// Runs a redistribution between cuts of one tensor or a batch (engine/api.hpp).
/// Collective over port.
template <class M>
void run_recut(PortOn<M>& port, Signature sig, std::string err, std::span<const RecutArgs> items) {
  ExclusiveUse use(port, op_name(sig.op));
  thread_local RecutRun run;
  const Wire wire = items[0].wire;
  sig.wire = static_cast<std::uint32_t>(wire);
  for (std::size_t k = 0; k < items.size() && err.empty() && wire != Wire::exact; ++k)
    if (err = wire_error(op_name(sig.op), port.rank(), wire, items[k].kind, items.size() > 1 ? long(k) : -1);
        !err.empty())
      sig.status = static_cast<std::uint32_t>(Status::bad_argument);
  const bool ok = prepare(port.rank(), sig, err, [&] {
    prepare_recut(port, items, switch_algorithm(), run);
    return true;
  });
  if (ok) sig.path = static_cast<std::uint32_t>(recut_path(run, items.size()));
  agree(port, sig, err);
  execute_recut(port, items, run);
}

}  // namespace dsp::detail
