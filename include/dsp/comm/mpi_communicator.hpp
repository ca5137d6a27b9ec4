// SPDX-License-Identifier: BSD-3-Clause
// dsp: the MPI communicator.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/comm/resources.hpp>
#include <dsp/comm/runs.hpp>
#include <dsp/error.hpp>

// Open MPI's and MPICH's C++ bindings (deprecated in MPI-2.2, removed in
// MPI-3.0) cost every file that includes <mpi.h> about 0.4 s of compile time
// (docs/benchmarks.md, "Compile cost"); dsp does not use them, so it leaves
// them out, as PETSc does. A file that uses them includes <mpi.h> before dsp.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

/// Calls an MPI function and throws dsp::BackendError with MPI's error string,
/// the call and file:line when it does not return MPI_SUCCESS.
#define DSP_CHECK_MPI(call)                                                                           \
  do {                                                                                                \
    const int dsp_mpi_rc_ = (call);                                                                   \
    if (dsp_mpi_rc_ != MPI_SUCCESS) ::dsp::detail::throw_mpi(dsp_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

namespace dsp {
namespace detail {

[[noreturn]] inline void throw_mpi(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof text, "MPI error %d", rc);
  int cls = rc;
  MPI_Error_class(rc, &cls);
  throw_backend("MPI", call, file, line, cls, text);
}

/// Largest count or displacement passed to one MPI call. MPI's interfaces take
/// `int`; past this, dsp splits the exchange into point-to-point messages of at
/// most this many elements. Tests lower it to exercise that path on small data.
inline std::size_t& mpi_count_limit() {
  static std::size_t limit = static_cast<std::size_t>(INT_MAX);
  return limit;
}

inline bool mpi_is_live() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

/// The requests of a posted run exchange: every message of every peer, the
/// receives first. Complete it (wait_runs, or test_runs until done) before it
/// is destroyed: destroying it with messages in flight cancels the receives
/// and frees the sends.
struct MpiPending {
  MpiPending() = default;
  MpiPending(MpiPending&& o) noexcept { *this = std::move(o); }
  MpiPending& operator=(MpiPending&& o) noexcept {
    abandon();
    req = std::move(o.req), owner = std::move(o.owner), left = std::move(o.left), ready = std::move(o.ready);
    left_total = o.left_total;
    o.req.clear();
    o.left_total = 0;
    return *this;
  }
  MpiPending(const MpiPending&) = delete;
  MpiPending& operator=(const MpiPending&) = delete;
  ~MpiPending() { abandon(); }
  /// Whether every message has completed.
  bool done() const noexcept { return left_total == 0; }

  void abandon() noexcept {
    if (left_total > 0 && mpi_is_live())
      for (std::size_t k = 0; k < req.size(); ++k)
        if (req[k] != MPI_REQUEST_NULL) {
          if (owner[k] >= 0) MPI_Cancel(&req[k]);
          MPI_Request_free(&req[k]);
        }
    req.clear();
    left_total = 0;
  }
  void completed(std::size_t k) {
    --left_total;
    const long o = owner[k];
    if (o >= 0 && --left[static_cast<std::size_t>(o)] == 0) ready.push_back(static_cast<std::size_t>(o));
  }

  std::vector<MPI_Request> req;
  std::vector<long> owner;         // the receive a request belongs to, -1 for a send
  std::vector<std::size_t> left;   // messages not yet arrived, per receive
  std::vector<std::size_t> ready;  // receives complete but not yet reported
  std::size_t left_total = 0;      // requests not yet complete
};

// State shared by the copies of one communicator: a private duplicate of the
// user's communicator (so dsp's messages never match the user's and errors
// return instead of aborting) and the element datatypes built on it.
struct MpiState {
  MPI_Comm parent = MPI_COMM_NULL;  // the caller's: reported, never compared (it may be freed and reused)
  MPI_Comm comm = MPI_COMM_NULL;    // dsp's own: a duplicate, or a split's result
  CommResources resources;
  int rank = 0;
  int size = 1;
  std::mutex types_mutex;
  std::map<std::size_t, MPI_Datatype> types;
  MpiPending pending;                                          // reused by exchange_runs: no allocation once warm
  std::map<std::array<std::size_t, 3>, MPI_Datatype> strided;  // (runs, run bytes, stride bytes)
  std::map<std::vector<long long>, MPI_Datatype> structs;      // several run patterns of one peer (struct_type)
  std::vector<int> w_counts, w_rcounts, w_sdispls, w_rdispls;  // reused by exchange_runs_typed
  std::vector<MPI_Datatype> w_stypes, w_rtypes;

  int finalize_key = MPI_KEYVAL_INVALID;  // attribute on MPI_COMM_SELF: see watch_finalize

  // Frees what dsp created on MPI (idempotent). Runs from the destructor, or
  // from MPI_Finalize when a communicator outlives MPI (a static, say).
  void release() noexcept {
    for (auto& [bytes, t] : types) MPI_Type_free(&t);
    types.clear();
    for (auto& [key, t] : strided) MPI_Type_free(&t);
    strided.clear();
    for (auto& [key, t] : structs) MPI_Type_free(&t);
    structs.clear();
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);  // ours: a duplicate, or a split's result
  }

  // MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else, while
  // MPI still works: an attribute whose delete callback releases this state
  // keeps a communicator that outlives MPI from leaking its duplicate.
  void watch_finalize() {
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &on_finalize, &finalize_key, nullptr) != MPI_SUCCESS) {
      finalize_key = MPI_KEYVAL_INVALID;
      return;  // only a leak at exit is at stake
    }
    MPI_Comm_set_attr(MPI_COMM_SELF, finalize_key, this);
  }
  // Runs once, at MPI_Finalize or from the destructor's MPI_Comm_delete_attr,
  // whichever comes first; it also frees the keyval (MPI keeps it alive until
  // this attribute is gone).
  static int on_finalize(MPI_Comm, int key, void* state, void*) {
    auto* self = static_cast<MpiState*>(state);
    self->release();
    self->finalize_key = MPI_KEYVAL_INVALID;
    MPI_Comm_free_keyval(&key);
    return MPI_SUCCESS;
  }

  ~MpiState() {
    if (!mpi_is_live()) return;  // MPI_Finalize ran on_finalize already
    if (finalize_key != MPI_KEYVAL_INVALID) MPI_Comm_delete_attr(MPI_COMM_SELF, finalize_key);  // runs on_finalize
    release();
  }

  MPI_Datatype type(std::size_t elem_bytes) {
    // Predefined types where the size allows: MPI copies them on its fastest
    // paths (a derived contiguous type of bytes may go through its packing
    // engine). Only sizes matter here: dsp moves elements as bytes.
    switch (elem_bytes) {
      case 1: return MPI_BYTE;
      case 2: return MPI_UINT16_T;
      case 4: return MPI_UINT32_T;
      case 8: return MPI_UINT64_T;
      default: break;
    }
    std::lock_guard<std::mutex> lock(types_mutex);
    return committed(types, elem_bytes, [&] {
      if (elem_bytes > static_cast<std::size_t>(INT_MAX))
        throw InvalidArgument("dsp::MpiCommunicator: element size beyond INT_MAX bytes");
      MPI_Datatype t;
      DSP_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(elem_bytes), MPI_BYTE, &t));
      return t;
    });
  }

  // The datatype of `key` in `cache`: made by `make()` and committed the first
  // time, freed by release().
  template <class Map, class Make>
  static MPI_Datatype committed(Map& cache, const typename Map::key_type& key, Make&& make) {
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    MPI_Datatype t = make();
    if (const int rc = MPI_Type_commit(&t); rc != MPI_SUCCESS) {
      MPI_Type_free(&t);  // not cached: nobody else would free it
      throw_mpi(rc, "MPI_Type_commit(&t)", __FILE__, __LINE__);
    }
    cache.emplace(key, t);
    return t;
  }
};

/// The runs of a PeerRuns as one MPI datatype (cached per shape).
inline MPI_Datatype strided_type(MpiState& st, const PeerRuns& pr, std::size_t elem) {
  const std::array<std::size_t, 3> key{pr.elems / pr.runs.len, pr.runs.len * elem, pr.runs.stride * elem};
  return MpiState::committed(st.strided, key, [&] {
    MPI_Datatype t;
    DSP_CHECK_MPI(MPI_Type_create_hvector(static_cast<int>(key[0]), static_cast<int>(key[1]),
                                          static_cast<MPI_Aint>(key[2]), MPI_BYTE, &t));
    return t;
  });
}

/// One peer's chunk given as several run patterns (consecutive entries of
/// one peer in an exchange's list), as one datatype: a struct of their
/// strided types at their byte offsets from the first pattern's base
/// (negative where a later pattern lies before it).
inline MPI_Datatype struct_type(MpiState& st, std::span<const PeerRuns> runs, std::size_t elem) {
  std::vector<long long> key;
  key.reserve(runs.size() * 4);
  for (const PeerRuns& pr : runs)
    key.insert(key.end(),
               {static_cast<long long>(pr.elems / pr.runs.len), static_cast<long long>(pr.runs.len * elem),
                static_cast<long long>(pr.runs.stride * elem),
                static_cast<long long>(pr.runs.base * elem) - static_cast<long long>(runs[0].runs.base * elem)});
  return MpiState::committed(st.structs, key, [&] {
    std::vector<int> ones(runs.size(), 1);
    std::vector<MPI_Aint> at(runs.size());
    std::vector<MPI_Datatype> parts(runs.size());
    for (std::size_t k = 0; k < runs.size(); ++k) {
      at[k] = static_cast<MPI_Aint>(key[4 * k + 3]);
      parts[k] = strided_type(st, runs[k], elem);
    }
    MPI_Datatype t;
    DSP_CHECK_MPI(MPI_Type_create_struct(static_cast<int>(runs.size()), ones.data(), at.data(), parts.data(), &t));
    return t;
  });
}

inline MPI_Datatype mpi_reduce_type(ReduceType t) {
  switch (t) {
    case ReduceType::f32: return MPI_FLOAT;
    case ReduceType::f64: return MPI_DOUBLE;
    case ReduceType::i32: return MPI_INT32_T;
    case ReduceType::i64: return MPI_INT64_T;
    case ReduceType::u32: return MPI_UINT32_T;
    case ReduceType::u64: return MPI_UINT64_T;
    case ReduceType::c64: return MPI_C_FLOAT_COMPLEX;
    case ReduceType::c128: return MPI_C_DOUBLE_COMPLEX;
  }
  return MPI_DATATYPE_NULL;
}
inline MPI_Op mpi_reduce_op(ReduceOp o) {
  switch (o) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

inline bool fits_mpi(std::size_t v) { return v <= mpi_count_limit(); }
inline bool fits_mpi(std::span<const std::size_t> v) {
  for (std::size_t x : v)
    if (!fits_mpi(x)) return false;
  return true;
}
inline std::vector<int> to_int(std::span<const std::size_t> v) { return std::vector<int>(v.begin(), v.end()); }

}  // namespace detail

/// Communicator over an MPI communicator, for data in `MemorySpace` (host
/// memory by default; device memory only with a CUDA-aware MPI).
///
/// Construction is collective over `comm`: it duplicates it (dsp's messages
/// then never match the caller's, and MPI errors come back as
/// dsp::BackendError instead of aborting). The caller's communicator is not
/// owned and not modified. Copies share the duplicate, which is freed with
/// the last copy (or left to MPI_Finalize if MPI is already finalized).
template <class MemorySpace = Kokkos::HostSpace>
class BasicMpiCommunicator {
 public:
  using memory_space = MemorySpace;
  /// What this backend offers beyond the Communicator concept (checked against the concepts).
  static constexpr unsigned capabilities =
      kPeerExchange | kTypedExchange | kAsyncPeerExchange | kSplittable | kReductions | kDeadlineControl;

  /// Throws UsageError when MPI is not initialized or already finalized,
  /// InvalidArgument for MPI_COMM_NULL or an intercommunicator (on every rank:
  /// both are properties of the communicator, the same everywhere).
  explicit BasicMpiCommunicator(MPI_Comm comm) : state_(std::make_shared<detail::MpiState>()) {
    if (!detail::mpi_is_live())
      throw UsageError(
          "dsp::MpiCommunicator: MPI is not initialized (or already finalized); create dsp "
          "communicators between MPI_Init and MPI_Finalize");
    if (comm == MPI_COMM_NULL) throw InvalidArgument("dsp::MpiCommunicator: MPI_COMM_NULL given");
    int inter = 0;
    DSP_CHECK_MPI(MPI_Comm_test_inter(comm, &inter));
    if (inter)
      throw InvalidArgument(
          "dsp::MpiCommunicator: an intercommunicator was given; dsp needs an intracommunicator "
          "(one group of ranks), e.g. from MPI_Intercomm_merge");
    state_->parent = comm;
    DSP_CHECK_MPI(MPI_Comm_dup(comm, &state_->comm));
    init();
  }

  int rank() const noexcept { return state_->rank; }
  int size() const noexcept { return state_->size; }
  const void* id() const noexcept { return state_->resources.id(); }
  /// dsp's caches for this communicator; released with the last copy.
  const CommResources& resources() const noexcept { return state_->resources; }
  /// The duplicate communicator dsp sends on.
  MPI_Comm native() const noexcept { return state_->comm; }
  /// The communicator this one was built from (the caller's handle, which the
  /// caller may have freed since: for reporting only).
  MPI_Comm parent() const noexcept { return state_->parent; }

  /// Collective over this communicator: a new communicator per `color`, ranks
  /// ordered by `key` (MPI_Comm_split). The result owns its MPI communicator.
  BasicMpiCommunicator split(int color, int key) const {
    check_live();
    MPI_Comm out = MPI_COMM_NULL;
    DSP_CHECK_MPI(MPI_Comm_split(state_->comm, color, key, &out));
    return BasicMpiCommunicator(owned_tag{}, out);
  }

  void all_to_all(const void* s, void* r, std::size_t count, std::size_t elem) {
    check_live();
    if (detail::fits_mpi(count)) {
      DSP_CHECK_MPI(MPI_Alltoall(s, static_cast<int>(count), state_->type(elem), r, static_cast<int>(count),
                                 state_->type(elem), state_->comm));
      return;
    }
    std::vector<std::size_t> c(size(), count), d(size());
    for (int k = 0; k < size(); ++k) d[k] = k * count;
    point_to_point(s, c, d, r, c, d, elem);
  }

  void all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                    std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t elem,
                    std::size_t bound) {
    check_live();
    // `bound` is equal on every rank, so every rank takes the same branch.
    if (detail::fits_mpi(bound)) {
      auto isc = detail::to_int(sc), isd = detail::to_int(sd), irc = detail::to_int(rc), ird = detail::to_int(rd);
      MPI_Datatype t = state_->type(elem);
      DSP_CHECK_MPI(MPI_Alltoallv(s, isc.data(), isd.data(), t, r, irc.data(), ird.data(), t, state_->comm));
      return;
    }
    point_to_point(s, sc, sd, r, rc, rd, elem);
  }

  /// The requests of a posted run exchange (post_runs).
  using Pending = detail::MpiPending;

  /// Posts a point-to-point exchange of run patterns (see exchange_runs) and
  /// returns at once: every peer's chunk goes as consecutive messages of
  /// `piece` elements (split further at mpi_count_limit()), straight from the
  /// runs of `s` into the runs of `r`. Both buffers must stay untouched until
  /// the exchange completes (wait_runs, or test_runs returning true).
  Pending post_runs(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                    std::size_t elem) {
    check_live();
    Pending p;
    post_into(p, s, sends, r, recvs, elem);
    return p;
  }

  /// Progresses a posted exchange; true when every message has completed.
  bool test_runs(Pending& p) {
    check_live();
    for (std::size_t k = 0; k < p.req.size() && p.left_total > 0; ++k) {
      if (p.req[k] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      DSP_CHECK_MPI(MPI_Test(&p.req[k], &flag, MPI_STATUS_IGNORE));
      if (flag) p.completed(k);
    }
    return p.done();
  }

  /// Completes a posted exchange.
  void wait_runs(Pending& p) {
    check_live();
    wait_all(p.req);
    p.left_total = 0;
  }

  /// Completes a posted exchange, calling `arrived(k)` for each receive k
  /// (an index into the posted `recvs`) as soon as all its messages have
  /// landed, in the order they land; each k once.
  template <class Arrived>
  void wait_runs(Pending& p, Arrived&& arrived) {
    check_live();
    auto report = [&] {
      while (!p.ready.empty()) {
        const std::size_t k = p.ready.back();
        p.ready.pop_back();
        arrived(k);
      }
    };
    report();
    while (p.left_total > 0) {
      int idx = MPI_UNDEFINED;
      DSP_CHECK_MPI(MPI_Waitany(static_cast<int>(p.req.size()), p.req.data(), &idx, MPI_STATUS_IGNORE));
      if (idx == MPI_UNDEFINED) break;
      p.completed(static_cast<std::size_t>(idx));
      report();
    }
    p.left_total = 0;
    report();
  }

  /// Point-to-point exchange of run patterns (dsp's pairwise switch): every
  /// peer's chunk goes as consecutive messages of `piece` elements (split
  /// further at mpi_count_limit()), straight from the runs of `s` into the runs
  /// of `r`; `local()` runs while the messages fly. Both sides of a pair cut a
  /// chunk the same way, and messages of one pair keep their order.
  template <class Local>
  void exchange_runs(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                     std::size_t elem, Local&& local) {
    check_live();
    Pending& p = state_->pending;  // reused: no allocation once warm
    post_into(p, s, sends, r, recvs, elem);
    try {
      local();
    } catch (...) {
      p.abandon();
      throw;
    }
    wait_runs(p);
  }

  /// The exchange of exchange_runs as one MPI_Alltoallw with a strided
  /// datatype per peer: MPI packs and unpacks while it transfers. A peer may
  /// have several consecutive entries (its chunk is their concatenation, as
  /// in exchange_runs): one struct datatype of them. The caller guarantees
  /// (from values equal on all ranks) that every byte offset and run fits
  /// MPI's int. `local()` runs before the exchange.
  template <class Local>
  void exchange_runs_typed(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                           std::size_t elem, Local&& local) {
    check_live();
    detail::MpiState& st = *state_;
    const std::size_t n = static_cast<std::size_t>(size());
    st.w_counts.assign(n, 0);  // counts are 0 or 1: one datatype covers a peer's chunk
    st.w_rcounts.assign(n, 0);
    st.w_sdispls.assign(n, 0);
    st.w_rdispls.assign(n, 0);
    st.w_stypes.assign(n, MPI_BYTE);
    st.w_rtypes.assign(n, MPI_BYTE);
    auto describe = [&](std::span<const PeerRuns> list, std::vector<int>& counts, std::vector<int>& displs,
                        std::vector<MPI_Datatype>& types) {
      for (std::size_t k = 0, e = 0; k < list.size(); k = e) {
        for (e = k + 1; e < list.size() && list[e].peer == list[k].peer;) ++e;
        const PeerRuns& pr = list[k];
        counts[pr.peer] = 1;
        displs[pr.peer] = static_cast<int>(pr.runs.base * elem);
        types[pr.peer] =
            e - k == 1 ? detail::strided_type(st, pr, elem) : detail::struct_type(st, list.subspan(k, e - k), elem);
      }
    };
    describe(sends, st.w_counts, st.w_sdispls, st.w_stypes);
    describe(recvs, st.w_rcounts, st.w_rdispls, st.w_rtypes);
    local();
    DSP_CHECK_MPI(MPI_Alltoallw(s, st.w_counts.data(), st.w_sdispls.data(), st.w_stypes.data(), r, st.w_rcounts.data(),
                                st.w_rdispls.data(), st.w_rtypes.data(), st.comm));
  }

  void all_gather(const void* s, void* r, std::size_t count, std::size_t elem) {
    check_live();
    if (detail::fits_mpi(count)) {
      DSP_CHECK_MPI(MPI_Allgather(s, static_cast<int>(count), state_->type(elem), r, static_cast<int>(count),
                                  state_->type(elem), state_->comm));
      return;
    }
    std::vector<std::size_t> d(size());
    for (int k = 0; k < size(); ++k) d[k] = k * count;
    gather_point_to_point(s, count, r, std::vector<std::size_t>(size(), count), d, elem);
  }

  void all_gather_v(const void* s, std::size_t count, void* r, std::span<const std::size_t> rc,
                    std::span<const std::size_t> rd, std::size_t elem) {
    check_live();
    // rc and rd are the same on every rank, so every rank takes the same branch.
    const std::size_t n = static_cast<std::size_t>(size());
    bool regular = true;
    for (std::size_t k = 0; k < n && regular; ++k) regular = rc[k] == rc[0] && rd[k] == k * rc[0];
    if (regular) return all_gather(s, r, count, elem);
    if (detail::fits_mpi(rc) && detail::fits_mpi(rd)) {
      auto irc = detail::to_int(rc), ird = detail::to_int(rd);
      MPI_Datatype t = state_->type(elem);
      DSP_CHECK_MPI(MPI_Allgatherv(s, static_cast<int>(count), t, r, irc.data(), ird.data(), t, state_->comm));
      return;
    }
    gather_point_to_point(s, count, r, rc, rd, elem);
  }

  /// MPI_Allreduce, in pieces of at most mpi_count_limit() elements.
  void all_reduce(const void* s, void* r, std::size_t count, ReduceType t, ReduceOp o) {
    check_live();
    const std::size_t eb = reduce_bytes(t), lim = detail::mpi_count_limit();
    for (std::size_t done = 0; done < count; done += lim)
      DSP_CHECK_MPI(MPI_Allreduce(static_cast<const char*>(s) + done * eb, static_cast<char*>(r) + done * eb,
                                  static_cast<int>(std::min(lim, count - done)), detail::mpi_reduce_type(t),
                                  detail::mpi_reduce_op(o), state_->comm));
  }

  /// MPI_Reduce_scatter_block for equal counts, MPI_Reduce_scatter otherwise;
  /// beyond MPI's int range, one MPI_Reduce per rank and piece. `counts` are
  /// the same on every rank, so every rank takes the same path.
  void reduce_scatter(const void* s, void* r, std::span<const std::size_t> counts, ReduceType t, ReduceOp o) {
    check_live();
    const std::size_t n = counts.size(), eb = reduce_bytes(t), lim = detail::mpi_count_limit();
    const MPI_Datatype dt = detail::mpi_reduce_type(t);
    const MPI_Op op = detail::mpi_reduce_op(o);
    std::size_t total = 0;
    bool equal = true;
    for (std::size_t q = 0; q < n; ++q) total += counts[q], equal = equal && counts[q] == counts[0];
    if (total == 0) return;
    if (detail::fits_mpi(total)) {
      if (equal) {
        DSP_CHECK_MPI(MPI_Reduce_scatter_block(s, r, static_cast<int>(counts[0]), dt, op, state_->comm));
      } else {
        auto ic = detail::to_int(counts);
        DSP_CHECK_MPI(MPI_Reduce_scatter(s, r, ic.data(), dt, op, state_->comm));
      }
      return;
    }
    std::size_t at = 0;
    for (std::size_t q = 0; q < n; ++q) {
      for (std::size_t done = 0; done < counts[q]; done += lim) {
        const int len = static_cast<int>(std::min(lim, counts[q] - done));
        void* out = static_cast<int>(q) == rank() ? static_cast<char*>(r) + done * eb : nullptr;
        DSP_CHECK_MPI(MPI_Reduce(static_cast<const char*>(s) + (at + done) * eb, out, len, dt, op, static_cast<int>(q),
                                 state_->comm));
      }
      at += counts[q];
    }
  }

  void broadcast(void* b, std::size_t count, std::size_t elem, int root) {
    check_live();
    char* p = static_cast<char*>(b);
    MPI_Datatype t = state_->type(elem);
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = std::min(count - done, detail::mpi_count_limit());
      DSP_CHECK_MPI(MPI_Bcast(p + done * elem, static_cast<int>(n), t, root, state_->comm));
      done += n;
    }
  }

  void control_all_gather(const void* s, void* r, std::size_t bytes) {
    check_live();
    DSP_CHECK_MPI(
        MPI_Allgather(s, static_cast<int>(bytes), MPI_BYTE, r, static_cast<int>(bytes), MPI_BYTE, state_->comm));
  }

  /// The agreement check's all-gather, giving up at `deadline`: returns the
  /// ranks whose bytes had not arrived by then (empty: all arrived). Point to
  /// point on tags of dsp's own, so that a rank that gives up can leave: its
  /// unmatched receives are cancelled, every other rank is sent an abort
  /// notice (a rank that finds one once its bytes are in raises TimeoutError
  /// instead of going on without the rank that left), and the communicator
  /// is marked unusable.
  std::vector<int> control_all_gather_until(const void* s, void* r, std::size_t bytes, Deadline deadline) {
    check_live();
    const int n = size(), me = rank();
    MPI_Comm c = state_->comm;
    std::memcpy(static_cast<char*>(r) + std::size_t(me) * bytes, s, bytes);
    std::vector<MPI_Request> recvs(std::size_t(n), MPI_REQUEST_NULL), sends(std::size_t(n), MPI_REQUEST_NULL);
    for (int q = 0; q < n; ++q)
      if (q != me)
        DSP_CHECK_MPI(MPI_Irecv(static_cast<char*>(r) + std::size_t(q) * bytes, static_cast<int>(bytes), MPI_BYTE, q,
                                kControlTag, c, &recvs[std::size_t(q)]));
    for (int q = 0; q < n; ++q)
      if (q != me)
        DSP_CHECK_MPI(MPI_Isend(s, static_cast<int>(bytes), MPI_BYTE, q, kControlTag, c, &sends[std::size_t(q)]));
    for (;;) {
      // MPI_Test frees each request as it completes (MPI_Testall would leave
      // them all untouched until every one has), so the ones left are missing.
      bool done = true;
      for (MPI_Request& rq : recvs) {
        if (rq == MPI_REQUEST_NULL) continue;
        int flag = 0;
        DSP_CHECK_MPI(MPI_Test(&rq, &flag, MPI_STATUS_IGNORE));
        done = done && flag;
      }
      if (done) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        // Every other rank gets a notice, not only the missing ones: a rank
        // that did arrive may still see all the bytes once the late ones
        // come, and must not go on to the data exchange without this one.
        std::vector<int> missing;
        for (int q = 0; q < n; ++q) {
          if (q == me) continue;
          MPI_Request& rq = recvs[std::size_t(q)];
          const bool was_missing = rq != MPI_REQUEST_NULL;
          if (was_missing) {
            missing.push_back(q);
            MPI_Cancel(&rq);
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
          }
          MPI_Request nq = MPI_REQUEST_NULL;
          if (MPI_Isend(was_missing ? &kNoticeMissing : &kNoticeArrived, 1, MPI_INT, q, kAbortTag, c, &nq) ==
              MPI_SUCCESS)
            MPI_Request_free(&nq);
        }
        for (MPI_Request& sq : sends)
          if (sq != MPI_REQUEST_NULL) MPI_Request_free(&sq);
        state_->resources.poison();
        return missing;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // Did ranks give up on this one before it came? Their notices were sent
    // when they gave up, long before this rank got here.
    std::string for_me, for_others;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      DSP_CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, c, &flag, &st));
      if (!flag) break;
      int v = 0;
      DSP_CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, kAbortTag, c, MPI_STATUS_IGNORE));
      std::string& list = v == kNoticeMissing ? for_me : for_others;
      list += (list.empty() ? "" : ", ") + std::to_string(st.MPI_SOURCE);
    }
    if (!for_me.empty() || !for_others.empty()) {
      for (MPI_Request& sq : sends)  // the ranks that gave up will never receive these
        if (sq != MPI_REQUEST_NULL) MPI_Request_free(&sq);
      state_->resources.poison();
      std::string what = "dsp: ";
      if (!for_me.empty())
        what += "rank(s) " + for_me + " gave up waiting for rank " + std::to_string(me) + " at an earlier collective";
      if (!for_others.empty())
        what += std::string(for_me.empty() ? "" : "; ") + "rank(s) " + for_others +
                " gave up waiting for other ranks at this collective";
      throw TimeoutError(what + " (dsp::set_collective_deadline); this communicator cannot be used any more");
    }
    DSP_CHECK_MPI(MPI_Waitall(n, sends.data(), MPI_STATUSES_IGNORE));
    return {};
  }

  /// Same group for dsp: the same ranks in the same order. Compares dsp's own
  /// duplicates (MPI_IDENT or MPI_CONGRUENT), never the caller's handles,
  /// which may have been freed and reused for another communicator.
  friend bool operator==(const BasicMpiCommunicator& a, const BasicMpiCommunicator& b) {
    if (a.state_ == b.state_) return true;
    if (a.state_->comm == MPI_COMM_NULL || b.state_->comm == MPI_COMM_NULL) return false;
    int res = MPI_UNEQUAL;
    if (MPI_Comm_compare(a.state_->comm, b.state_->comm, &res) != MPI_SUCCESS) return false;
    return res == MPI_IDENT || res == MPI_CONGRUENT;
  }

 private:
  static constexpr int kControlTag = 7301;  // the deadline-aware agreement check
  static constexpr int kAbortTag = 7302;    // "I gave up", with one of:
  static constexpr int kNoticeMissing = 1;  // ... waiting for you
  static constexpr int kNoticeArrived = 2;  // ... waiting for others; you came

  // Every call runs this. A watched state learns of MPI_Finalize from its
  // attribute (on_finalize frees its communicator, leaving MPI_COMM_NULL), so
  // only an unwatched one asks MPI (MPI_Initialized and MPI_Finalized take locks).
  void check_live() const {
    if (state_->comm == MPI_COMM_NULL || (state_->finalize_key == MPI_KEYVAL_INVALID && !detail::mpi_is_live()))
      throw UsageError(
          "dsp::MpiCommunicator: MPI is finalized (or not initialized); finish every dsp call and "
          "destroy dsp tensors and communicators before MPI_Finalize");
  }

  struct owned_tag {};
  BasicMpiCommunicator(owned_tag, MPI_Comm owned) : state_(std::make_shared<detail::MpiState>()) {
    state_->parent = owned;
    state_->comm = owned;
    init();
  }

  void init() {
    DSP_CHECK_MPI(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN));
    DSP_CHECK_MPI(MPI_Comm_rank(state_->comm, &state_->rank));
    DSP_CHECK_MPI(MPI_Comm_size(state_->comm, &state_->size));
    state_->watch_finalize();
  }

  // Large-count fallback: every exchange as messages of at most
  // mpi_count_limit() elements. Messages between one pair keep their order
  // (MPI's non-overtaking rule), so one tag serves all pieces.
  void point_to_point(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                      std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t elem) {
    std::vector<MPI_Request> req;
    MPI_Datatype t = state_->type(elem);
    const std::size_t lim = detail::mpi_count_limit();
    for (int k = 0; k < size(); ++k)
      for (std::size_t done = 0; done < rc[k]; done += lim)
        post_recv(req, static_cast<char*>(r) + (rd[k] + done) * elem, std::min(lim, rc[k] - done), t, k);
    for (int k = 0; k < size(); ++k)
      for (std::size_t done = 0; done < sc[k]; done += lim)
        post_send(req, static_cast<const char*>(s) + (sd[k] + done) * elem, std::min(lim, sc[k] - done), t, k);
    wait_all(req);
  }

  void gather_point_to_point(const void* s, std::size_t count, void* r, std::span<const std::size_t> rc,
                             std::span<const std::size_t> rd, std::size_t elem) {
    std::vector<MPI_Request> req;
    MPI_Datatype t = state_->type(elem);
    const std::size_t lim = detail::mpi_count_limit();
    for (int k = 0; k < size(); ++k)
      for (std::size_t done = 0; done < rc[k]; done += lim)
        post_recv(req, static_cast<char*>(r) + (rd[k] + done) * elem, std::min(lim, rc[k] - done), t, k);
    for (int k = 0; k < size(); ++k)
      for (std::size_t done = 0; done < count; done += lim)
        post_send(req, static_cast<const char*>(s) + done * elem, std::min(lim, count - done), t, k);
    wait_all(req);
  }

  // Posts every message of an exchange into p (its vectors reused).
  void post_into(Pending& p, const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                 std::size_t elem) {
    p.req.clear();
    p.owner.clear();
    p.left.assign(recvs.size(), 0);
    p.ready.clear();
    MPI_Datatype t = state_->type(elem);
    const std::size_t lim = detail::mpi_count_limit();
    auto each = [lim](const PeerRuns& pr, auto&& post) {
      for (std::size_t e = 0; e < pr.elems; e += pr.piece) {
        const std::size_t at = pr.runs.base + (e / pr.runs.len) * pr.runs.stride + e % pr.runs.len;
        for (std::size_t done = 0; done < pr.piece; done += lim) post(at + done, std::min(lim, pr.piece - done));
      }
    };
    try {
      for (std::size_t k = 0; k < recvs.size(); ++k) {
        const auto& pr = recvs[k];
        each(pr, [&](std::size_t at, std::size_t n) {
          post_recv(p.req, static_cast<char*>(r) + at * elem, n, t, pr.peer);
          p.owner.push_back(static_cast<long>(k));
          ++p.left[k];
        });
        if (p.left[k] == 0) p.ready.push_back(k);  // nothing to wait for
      }
      for (const auto& pr : sends)
        each(pr, [&](std::size_t at, std::size_t n) {
          post_send(p.req, static_cast<const char*>(s) + at * elem, n, t, pr.peer);
          p.owner.push_back(-1);
        });
    } catch (...) {
      p.abandon();
      throw;
    }
    p.left_total = p.req.size();
  }

  void post_recv(std::vector<MPI_Request>& req, void* p, std::size_t n, MPI_Datatype t, int peer) {
    req.emplace_back();
    DSP_CHECK_MPI(MPI_Irecv(p, static_cast<int>(n), t, peer, 0, state_->comm, &req.back()));
  }
  void post_send(std::vector<MPI_Request>& req, const void* p, std::size_t n, MPI_Datatype t, int peer) {
    req.emplace_back();
    DSP_CHECK_MPI(MPI_Isend(p, static_cast<int>(n), t, peer, 0, state_->comm, &req.back()));
  }
  static void wait_all(std::vector<MPI_Request>& req) {
    if (!req.empty()) DSP_CHECK_MPI(MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE));
  }

  std::shared_ptr<detail::MpiState> state_;
};

/// The MPI communicator for host memory.
using MpiCommunicator = BasicMpiCommunicator<>;

static_assert(Communicator<MpiCommunicator>);

}  // namespace dsp
