// SPDX-License-Identifier: BSD-3-Clause
// dsp::hdf5: checkpoints as plain HDF5 datasets, written and read with
// collective MPI-IO hyperslabs, that load under any layout, mesh and rank
// count. The optional component dsp::hdf5 (parallel HDF5; CMake option
// DSP_ENABLE_HDF5; Debian: libhdf5-openmpi-dev).
//
//   dsp::hdf5::save(x, "run.h5", "fields/u");  // collective over x's ranks
//   dsp::hdf5::load("run.h5", "fields/u", y);  // collective over y's ranks
//
// The file holds the global tensor as one dataset of the global extents,
// row-major, of the native element type (h5py, h5dump and ParaView read it
// as an ordinary array); groups on the way are created. Each element is
// written once (a replicated block by its lowest rank). save creates the
// file, or opens it if it exists, and replaces a dataset of the same extents
// and type.
//
// Before any file is touched, the ranks agree (dsp's agreement check, on the
// tensor's world communicator): the operation, the call site, the element
// type, the global extents, the layout, the settings, then the file and
// dataset names. A disagreement raises MismatchError on every rank, naming
// the field, and nothing is written (y is untouched). After that, every
// collective HDF5 step ends with all ranks learning whether any failed, so
// a failure raises on every rank; what makes one rank fail alone inside a
// collective write (a filter this HDF5 lacks) is checked before it. load
// finds every failure but an I/O error during the read itself before it
// writes to y. HDF5 here is not thread-safe: one save or load at a time per
// process (another thread's overlapping call raises UsageError on every
// rank of its communicator).
#pragma once

#include <dsp/error.hpp>
#include <dsp/half.hpp>
#include <dsp/layout.hpp>
#include <dsp/mpi.hpp>
#include <dsp/redistribute.hpp>
#include <dsp/tensor.hpp>

#include <Kokkos_Core.hpp>
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <utility>
#include <vector>

namespace dsp::hdf5 {

namespace detail {

template <class T>
constexpr bool supported_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int8_t> ||
    std::is_same_v<T, std::uint8_t> || std::is_same_v<T, std::int16_t> || std::is_same_v<T, std::uint16_t> ||
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, std::uint64_t> || std::is_same_v<T, dsp::bfloat16> || std::is_same_v<T, dsp::float16>;

/// A 16-bit float type as HDF5 describes one (sign bit 15; `ebits` exponent
/// bits, `mbits` mantissa bits, bias `bias`), made once: IEEE binary16 is what
/// h5py writes for numpy's float16; bfloat16 has no HDF5 name, and this is
/// its layout.
inline hid_t half_type(unsigned ebits, unsigned mbits, unsigned bias) {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, mbits, ebits, 0, mbits);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, bias);
  return t;
}

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int8_t>) return H5T_NATIVE_INT8;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, std::int16_t>) return H5T_NATIVE_INT16;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return H5T_NATIVE_UINT16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, dsp::float16>) {
    static const hid_t t = half_type(5, 10, 15);
    return t;
  } else if constexpr (std::is_same_v<T, dsp::bfloat16>) {
    static const hid_t t = half_type(8, 7, 127);
    return t;
  } else return H5T_NATIVE_UINT64;
}

/// An element type as the messages name it.
template <class T>
constexpr const char* type_text() {
  if constexpr (std::is_same_v<T, float>) return "float32 (float)";
  else if constexpr (std::is_same_v<T, double>) return "float64 (double)";
  else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, std::int16_t>) return "int16";
  else if constexpr (std::is_same_v<T, std::uint16_t>) return "uint16";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, dsp::float16>) return "float16 (dsp::float16)";
  else if constexpr (std::is_same_v<T, dsp::bfloat16>) return "bfloat16 (dsp::bfloat16)";
  else return "uint64";
}

/// A dataset's element type as text: "float32", "int16", "uint8", or its HDF5 class.
inline std::string type_text(hid_t t) {
  const std::string bits = std::to_string(8 * H5Tget_size(t));
  switch (H5Tget_class(t)) {
    case H5T_FLOAT: return H5Tget_size(t) == 2 && H5Tget_ebias(t) == 127 ? "bfloat16" : "float" + bits;
    case H5T_INTEGER: return (H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + bits;
    case H5T_STRING: return "a string type";
    case H5T_COMPOUND: return "a compound type";
    case H5T_ENUM: return "an enum type";
    case H5T_ARRAY: return "an array type";
    default: return "an HDF5 type of class " + std::to_string(int(H5Tget_class(t)));
  }
}

/// Extents as the messages write them: "[7,5,6]".
inline std::string extents_text(std::span<const std::size_t> e) {
  std::string t = "[";
  for (std::size_t d = 0; d < e.size(); ++d) {
    if (d) t += ',';
    t += std::to_string(e[d]);
  }
  return t + "]";
}

/// One save or load at a time per process: HDF5 here is not thread-safe
/// (and a thread-safe parallel HDF5 does not exist), so a second thread's
/// call must not reach it. A flag, not a lock: a thread that waited for
/// another could deadlock against the other ranks, where the two calls may
/// hold the flag the other way round. A thread that finds it taken fails
/// through the agreement, so every rank of its communicator raises.
inline std::atomic<bool>& io_busy() {
  static std::atomic<bool> busy{false};
  return busy;
}
class IoTurn {
 public:
  IoTurn() : held_(!io_busy().exchange(true, std::memory_order_acquire)) {}
  ~IoTurn() {
    if (held_) io_busy().store(false, std::memory_order_release);
  }
  IoTurn(const IoTurn&) = delete;
  IoTurn& operator=(const IoTurn&) = delete;
  bool held() const { return held_; }

 private:
  bool held_;
};

template <class X>
constexpr bool tensor_ok() {
  constexpr bool tensor = is_dist_tensor_v<X>;
  static_assert(tensor, "dsp::hdf5: the tensor must be a dsp::DistTensor.");
  if constexpr (!tensor) {
    return false;
  } else {
    constexpr bool type = supported_v<typename X::value_type>;
    static_assert(type,
                  "dsp::hdf5: the element type must be float, double, dsp::float16, dsp::bfloat16 or a "
                  "fixed-width integer (std::int8_t ... std::uint64_t).");
    using W = std::remove_cvref_t<decltype(dsp::detail::group_traits<typename X::communicator_type>::world(
        std::declval<const typename X::communicator_type&>()))>;
    constexpr bool mpi = requires(const W& w) {
      { w.native() } -> std::convertible_to<MPI_Comm>;
    };
    static_assert(mpi,
                  "dsp::hdf5: the tensor's communicator (a mesh's: the one it was made from) must be an "
                  "MPI communicator (dsp::MpiCommunicator): HDF5 writes through MPI-IO.");
    return type && mpi;
  }
}

/// Closes an HDF5 handle when it goes (negative: none).
struct Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  Handle() = default;
  Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id(o.id), close(o.close) { o.id = -1; }
  Handle& operator=(Handle&& o) noexcept {
    reset();
    id = o.id, close = o.close, o.id = -1;
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (id >= 0 && close) close(id);
    id = -1;
  }
  explicit operator bool() const { return id >= 0; }
};

/// The collective steps of save and load: each ends with every rank knowing
/// whether some rank failed, so all raise together.
class Steps {
 public:
  Steps(MPI_Comm comm, const char* op, std::string file, std::string dataset)
      : comm_(comm), op_(op), file_(std::move(file)), dataset_(std::move(dataset)) {
    MPI_Comm_rank(comm_, &rank_);
    H5Eget_auto2(H5E_DEFAULT, &old_func_, &old_data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors come back as dsp::Error, not printed stacks
  }
  ~Steps() { H5Eset_auto2(H5E_DEFAULT, old_func_, old_data_); }
  /// Every rank: `ok` here; raises on every rank when some rank's is false
  /// (this rank's message when it failed, the lowest failing rank's, named,
  /// otherwise).
  void check(bool ok, const std::string& why) {
    int mine = ok ? -1 : rank_, first = -1;
    int flag = ok ? 0 : 1, any = 0;
    MPI_Allreduce(&flag, &any, 1, MPI_INT, MPI_MAX, comm_);
    if (!any) return;
    if (mine < 0) mine = 1 << 30;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm_);
    char text[512] = {};
    if (rank_ == first) std::memcpy(text, why.data(), std::min(why.size(), sizeof text - 1));
    MPI_Bcast(text, int(sizeof text), MPI_CHAR, first, comm_);
    const std::string where = std::string(op_) + "(\"" + file_ + "\", \"" + dataset_ + "\")";
    if (!ok) throw Error(where + " (rank " + std::to_string(rank_) + "): " + why);
    throw MismatchError(where + ": rank " + std::to_string(first) + " failed: " + text);
  }
  int rank() const { return rank_; }

 private:
  MPI_Comm comm_;
  const char* op_;
  std::string file_, dataset_;
  int rank_ = 0;
  H5E_auto2_t old_func_ = nullptr;
  void* old_data_ = nullptr;
};

/// The world communicator of a tensor's group, as dsp's MPI communicator.
template <class X>
const auto& world_of(const X& x) {
  return dsp::detail::group_traits<typename X::communicator_type>::world(x.communicator());
}

/// Collective over the tensor's world, before any file is touched: dsp's
/// agreement check on `sig` (operation, call site, element type, extents,
/// layout, settings; this rank's own failure `err`), then the file and
/// dataset names. Every rank raises on a disagreement or a failure anywhere;
/// a rank whose `turn` is not held raises UsageError.
template <class Port>
void agree_io(Port& port, dsp::detail::Signature sig, const std::string& file, const std::string& dataset,
              const IoTurn& turn, std::string err) {
  using namespace dsp::detail;
  const Op op = static_cast<Op>(sig.op);
  const char* name = op_name(sig.op);
  const std::string who = std::string(name) + " (rank " + std::to_string(port.rank()) + ")";
  if (!turn.held())
    err = who +
          ": another thread of this process is inside dsp::hdf5::save or load; HDF5 here is not thread-safe, so "
          "dsp::hdf5 runs one call at a time per process: let the threads take turns";
  else if (!err.empty()) err = who + ": " + err;
  if (!err.empty()) sig.status = std::uint32_t(Status::bad_argument);
  try {
    agree(port, sig, err);
  } catch (const InvalidArgument& e) {
    if (!turn.held()) throw UsageError(e.what());
    throw;
  }
  const std::string nothing = op == dsp::detail::Op::hdf5_save ? "; nothing was written" : "; y is unchanged";
  std::uint64_t mine[2] = {fnv1a(file), fnv1a(dataset)};
  const std::size_t n = std::size_t(port.size());
  std::vector<std::uint64_t> all(2 * n);
  port.control_all_gather(mine, all.data(), sizeof mine);
  bool same_file = true, same_dataset = true;
  for (std::size_t r = 0; r < n; ++r)
    same_file = same_file && all[2 * r] == mine[0], same_dataset = same_dataset && all[2 * r + 1] == mine[1];
  if (same_file && same_dataset) return;
  // Every rank saw the difference: the names themselves, to say how they differ.
  struct Text {
    char s[248] = {};
  };
  const std::string& which = !same_file ? file : dataset;
  Text t;
  std::memcpy(t.s, which.data(), std::min(which.size(), sizeof t.s - 1));
  std::vector<Text> texts(n);
  port.control_all_gather(&t, texts.data(), sizeof t);
  std::string list;
  for (std::size_t r = 0; r < n && r < 16; ++r)
    list += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " \"" +
            std::string(texts[r].s, strnlen(texts[r].s, sizeof t.s)) + "\"";
  if (n > 16) list += ", ... (" + std::to_string(n - 16) + " more ranks)";
  throw MismatchError(std::string(name) + ": " + (!same_file ? "file names" : "dataset names") + " disagree: " + list +
                      nothing);
}

/// An open dataset's extents, as text, and whether they are `global`.
inline std::pair<bool, std::string> dataset_extents(hid_t ds, std::span<const std::size_t> global) {
  Handle space(H5Dget_space(ds), H5Sclose);
  const int nd = space ? H5Sget_simple_extent_ndims(space.id) : -1;
  std::vector<hsize_t> dims(nd > 0 ? std::size_t(nd) : 1);
  if (nd > 0) H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  const std::vector<std::size_t> have(dims.begin(), dims.begin() + (nd > 0 ? nd : 0));
  return {std::equal(have.begin(), have.end(), global.begin(), global.end()), extents_text(have)};
}

/// A filter the dataset needs that this HDF5 lacks, as text ("" when none).
/// Checked before a collective write or read: a rank whose chunks need it
/// fails alone there, and the others wait for it inside HDF5.
inline std::string missing_filter(hid_t ds) {
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  if (!dcpl) return "";
  const int n = H5Pget_nfilters(dcpl.id);
  for (int k = 0; k < n; ++k) {
    unsigned flags = 0, config = 0;
    std::size_t nvalues = 0;
    char name[64] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl.id, unsigned(k), &flags, &nvalues, nullptr, sizeof name, name, &config);
    if (id < 0 || H5Zfilter_avail(id) > 0) continue;
    return "the dataset is stored through HDF5 filter " + (name[0] ? "\"" + std::string(name) + "\" " : "") + "(id " +
           std::to_string(id) +
           "), which this HDF5 does not have (h5py's lzf is one; HDF5_PLUGIN_PATH can name a plugin that adds it)";
  }
  return "";
}

/// What an existing path names, when it is not a dataset ("" when it is one).
inline std::string not_a_dataset(hid_t file, const std::string& path) {
  H5L_info_t link{};
  if (H5Lget_info(file, path.c_str(), &link, H5P_DEFAULT) >= 0 && link.type != H5L_TYPE_HARD &&
      H5Oexists_by_name(file, path.c_str(), H5P_DEFAULT) <= 0)
    return "the path is a " + std::string(link.type == H5L_TYPE_SOFT ? "soft" : "external") +
           " link to an object that does not exist";
  const hid_t obj = H5Oopen(file, path.c_str(), H5P_DEFAULT);
  if (obj < 0) return "the path names nothing HDF5 can open";
  const H5I_type_t type = H5Iget_type(obj);
  H5Oclose(obj);
  if (type == H5I_DATASET) return "";
  if (type == H5I_GROUP) return "the path names a group, not a dataset";
  return "the path names a named datatype, not a dataset";
}

/// A file-access property list for MPI-IO on `comm`.
inline Handle mpio_access(MPI_Comm comm) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (fapl) H5Pset_fapl_mpio(fapl.id, comm, MPI_INFO_NULL);
  return fapl;
}

/// A collective transfer property list.
inline Handle collective_transfer() {
  Handle dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  if (dxpl) H5Pset_dxpl_mpio(dxpl.id, H5FD_MPIO_COLLECTIVE);
  return dxpl;
}

/// The hyperslab of this rank's block (or none), in a dataspace of the global extents.
inline Handle block_space(std::span<const std::size_t> global, std::span<const std::size_t> off,
                          std::span<const std::size_t> cnt, bool select, std::size_t split = ~std::size_t(0),
                          std::size_t first = 0, std::size_t second = 0) {
  const std::size_t r = global.size();
  hsize_t g[dsp::kMaxRank], o[dsp::kMaxRank], c[dsp::kMaxRank];
  std::size_t n = 1;
  for (std::size_t d = 0; d < r; ++d) g[d] = global[d], o[d] = off[d], c[d] = cnt[d], n *= cnt[d];
  Handle space(H5Screate_simple(int(r), g, nullptr), H5Sclose);
  if (!space) return space;
  if (!select || n == 0) {
    H5Sselect_none(space.id);
  } else if (split >= r) {
    H5Sselect_hyperslab(space.id, H5S_SELECT_SET, o, nullptr, c, nullptr);
  } else {
    // Two boxes along dim `split` (a Zigzag block): their union, which HDF5
    // walks in the file's row-major order: the first box's rows come first in
    // every line along `split`, as in the block (first < second).
    const hsize_t counts[2] = {hsize_t(first), hsize_t(cnt[split] - first)};
    const hsize_t offsets[2] = {hsize_t(off[split]), hsize_t(second)};
    bool any = false;
    for (int k = 0; k < 2; ++k) {
      if (counts[k] == 0) continue;
      c[split] = counts[k], o[split] = offsets[k];
      H5Sselect_hyperslab(space.id, any ? H5S_SELECT_OR : H5S_SELECT_SET, o, nullptr, c, nullptr);
      any = true;
    }
  }
  return space;
}

/// The memory dataspace of this rank's block, shaped as the block (HDF5
/// then maps it to the file's hyperslab without scattering element by
/// element), all of it selected, or nothing.
inline Handle memory_space(std::span<const std::size_t> cnt, bool select) {
  hsize_t c[dsp::kMaxRank];
  std::size_t n = 1;
  for (std::size_t d = 0; d < cnt.size(); ++d) c[d] = cnt[d], n *= cnt[d];
  if (n == 0) {
    const hsize_t one = 1;
    Handle space(H5Screate_simple(1, &one, nullptr), H5Sclose);
    if (space) H5Sselect_none(space.id);
    return space;
  }
  Handle space(H5Screate_simple(int(cnt.size()), c, nullptr), H5Sclose);
  if (space && !select) H5Sselect_none(space.id);
  return space;
}

/// The parts of a dataset path ("/a/b/c" or "a/b/c": {"a", "b", "c"});
/// false when there is none.
inline bool split_path(const std::string& dataset, std::vector<std::string>& parts) {
  parts.clear();
  std::size_t at = 0;
  while (at <= dataset.size()) {
    const std::size_t slash = std::min(dataset.find('/', at), dataset.size());
    if (slash > at) parts.push_back(dataset.substr(at, slash - at));
    at = slash + 1;
  }
  return !parts.empty();
}

/// "/a/b/c" from {"a", "b", "c"}.
inline std::string join_path(const std::vector<std::string>& parts) {
  std::string p;
  for (const std::string& s : parts) {
    p += '/';
    p += s;
  }
  return p;
}

/// Whether `path` names an existing link in `file`, every group on the way included.
inline bool exists(hid_t file, const std::vector<std::string>& parts, std::size_t upto) {
  std::string path;
  for (std::size_t k = 0; k < upto; ++k) {
    path += "/" + parts[k];
    if (H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

/// This rank's block on the host, reached only once every check has passed
/// (a device block is copied to the host there; a host block is itself).
struct HostBlock {
  void* (*get)(void* self) = nullptr;  // save: the block's elements on the host; load: where to read them
  void (*put)(void* self) = nullptr;   // load: the host elements back into the block (nullptr: nothing to do)
  void* self = nullptr;
};

/// One save or load, on bytes: what a front end (the typed one below, the
/// Python module) describes. `sig` is the agreement signature (operation,
/// element type, extents, layout, call site); `global`, `off`, `cnt` the
/// global extents and this rank's box; `type` the dataset's HDF5 type and
/// `type_text` its name in messages.
struct Io {
  dsp::detail::Signature sig;
  std::span<const std::size_t> global, off, cnt;
  /// A Zigzag<D> block is two boxes along dim `split` (D; ~0: one box): the
  /// first `first` of its cnt[D] rows from off[D], the others from `second`.
  std::size_t split = ~std::size_t(0), first = 0, second = 0;
  hid_t type = -1;
  const char* type_text = "";
  HostBlock host;
};

/// The way into a save or load: this process's turn at HDF5, exclusive use
/// of the world communicator, the dataset path's parts, and the agreement
/// (which raises on every rank before any file is touched); then the
/// collective steps.
template <class World>
struct IoEntry {
  const IoTurn turn;
  dsp::detail::PortOf<World> port;
  const dsp::detail::ExclusiveUse exclusive;
  std::vector<std::string> parts;
  std::optional<Steps> steps;  // only once the agreement passed: Steps touches HDF5's error stack
  IoEntry(const World& world, const Io& io, const char* op, const std::string& file, const std::string& dataset,
          std::string err)
      : port(world), exclusive(port, op) {
    if (err.empty() && !split_path(dataset, parts)) err = "the dataset path is empty";
    agree_io(port, io.sig, file, dataset, turn, std::move(err));
    steps.emplace(world.native(), op, file, dataset);
  }
};

/// dsp::hdf5::save on bytes. Collective over `world` (the tensor's world
/// communicator); `err`: this rank's own failure, found by the front end.
template <class World>
void save_io(const World& world, const Io& io, const std::string& file, const std::string& dataset, std::string err) {
  IoEntry<World> e(world, io, "dsp::hdf5::save", file, dataset, std::move(err));
  const std::vector<std::string>& parts = e.parts;
  Steps& steps = *e.steps;
  const MPI_Comm comm = world.native();
  const std::size_t n = std::size_t(e.port.size()), r = io.global.size();
  // Each distinct block is written by its lowest rank.
  const std::size_t w = 2 * r + 3;  // a rank's boxes: off, cnt, split, first, second
  std::vector<std::size_t> mine(w), all(n * w);
  std::copy(io.off.begin(), io.off.end(), mine.begin());
  std::copy(io.cnt.begin(), io.cnt.end(), mine.begin() + std::ptrdiff_t(r));
  mine[2 * r] = io.split, mine[2 * r + 1] = io.first, mine[2 * r + 2] = io.second;
  e.port.control_all_gather(mine.data(), all.data(), mine.size() * sizeof(std::size_t));
  bool writer = true;
  for (int k = 0; k < steps.rank() && writer; ++k)
    writer = !std::equal(mine.begin(), mine.end(), all.begin() + std::ptrdiff_t(std::size_t(k) * w));
  // The file: created, or opened when rank 0 sees it exists.
  int there = 0;
  if (steps.rank() == 0) there = ::access(file.c_str(), F_OK) == 0;
  MPI_Bcast(&there, 1, MPI_INT, 0, comm);
  Handle fapl = mpio_access(comm);
  Handle f(there ? H5Fopen(file.c_str(), H5F_ACC_RDWR, fapl.id)
                 : H5Fcreate(file.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.id),
           H5Fclose);
  steps.check(bool(f), there ? "cannot open the file for writing (is it an HDF5 file, and writable?)"
                             : "cannot create the file (does its directory exist, and is it writable?)");
  std::size_t total = 1;
  for (std::size_t e : io.global) total *= e;
  Handle fspace = block_space(io.global, io.off, io.cnt, writer, io.split, io.first, io.second);
  const std::string path = join_path(parts);
  Handle ds;
  if (exists(f.id, parts, parts.size())) {
    const std::string what = not_a_dataset(f.id, path);
    steps.check(what.empty(), what + "; save under another name");
    ds = Handle(H5Dopen2(f.id, path.c_str(), H5P_DEFAULT), H5Dclose);
    steps.check(bool(ds), "cannot open the existing dataset");
    Handle type(H5Dget_type(ds.id), H5Tclose);
    const auto [same_ext, have] = dataset_extents(ds.id, io.global);
    steps.check(same_ext, "the dataset exists with extents " + have + ", not the tensor's " + extents_text(io.global) +
                              "; save under another name");
    steps.check(type && H5Tequal(type.id, io.type) > 0,
                "the dataset exists with element type " + (type ? type_text(type.id) : "unknown") +
                    ", not the tensor's " + io.type_text + "; save under another name");
    const std::string filter = missing_filter(ds.id);
    steps.check(filter.empty(), filter + "; nothing was written");
  } else {
    Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    if (lcpl) H5Pset_create_intermediate_group(lcpl.id, 1);
    ds = Handle(H5Dcreate2(f.id, path.c_str(), io.type, fspace.id, lcpl.id, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    steps.check(bool(ds), "cannot create the dataset (is a part of its path a dataset?)");
  }
  if (total > 0) {  // an empty tensor has nothing to write (and HDF5 fails to write nothing)
    const void* host = io.host.get(io.host.self);
    Handle mspace = memory_space(io.cnt, writer);
    Handle dxpl = collective_transfer();
    const herr_t w = H5Dwrite(ds.id, io.type, mspace.id, fspace.id, dxpl.id, host);
    steps.check(w >= 0, "the collective write failed");
  }
  ds.reset();
  const herr_t c = f ? H5Fclose(f.id) : -1;
  f.id = -1;
  steps.check(c >= 0, "closing the file failed");
}

/// dsp::hdf5::load on bytes. Collective over `world`; `err` as for save_io.
template <class World>
void load_io(const World& world, const Io& io, const std::string& file, const std::string& dataset, std::string err) {
  IoEntry<World> e(world, io, "dsp::hdf5::load", file, dataset, std::move(err));
  const std::vector<std::string>& parts = e.parts;
  Steps& steps = *e.steps;
  const MPI_Comm comm = world.native();
  int there = 0;
  if (steps.rank() == 0) there = ::access(file.c_str(), R_OK) == 0;
  MPI_Bcast(&there, 1, MPI_INT, 0, comm);
  steps.check(there, "no such file (or not readable)");
  Handle fapl = mpio_access(comm);
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl.id), H5Fclose);
  steps.check(bool(f), "cannot open the file as HDF5");
  steps.check(exists(f.id, parts, parts.size()), "no such dataset in the file");
  const std::string path = join_path(parts);
  const std::string what = not_a_dataset(f.id, path);
  steps.check(what.empty(), what + "; y is unchanged");
  Handle ds(H5Dopen2(f.id, path.c_str(), H5P_DEFAULT), H5Dclose);
  steps.check(bool(ds), "cannot open the dataset");
  std::size_t total = 1;
  for (std::size_t e : io.global) total *= e;
  {
    Handle type(H5Dget_type(ds.id), H5Tclose);
    const bool same_type = type && H5Tequal(type.id, io.type) > 0;
    const auto [same_ext, have] = dataset_extents(ds.id, io.global);
    steps.check(same_ext, "the dataset's extents " + have + " are not the tensor's " + extents_text(io.global) +
                              "; y is unchanged");
    steps.check(same_type, "the dataset's element type is " + (type ? type_text(type.id) : "unknown") +
                               ", not the tensor's " + io.type_text + " (dsp::hdf5 converts no types); y is unchanged");
  }
  const std::string filter = total > 0 ? missing_filter(ds.id) : "";
  steps.check(filter.empty(), filter + "; y is unchanged");
  if (total == 0) return;  // nothing to read (and HDF5 fails to read nothing from a dataset with no storage)
  // Straight into y's block where the host can reach it (a buffer's first
  // touch costs more than the read on some machines: 103 ms for 32 MiB on
  // the 2-core VM of docs/benchmarks.md), else through a host copy. Every
  // check that can fail on good input is made above, before any reading.
  void* host = io.host.get(io.host.self);
  Handle fspace = block_space(io.global, io.off, io.cnt, true, io.split, io.first, io.second);
  Handle mspace = memory_space(io.cnt, true);
  Handle dxpl = collective_transfer();
  const herr_t r = H5Dread(ds.id, io.type, mspace.id, fspace.id, dxpl.id, host);
  steps.check(r >= 0, "the collective read failed (y may be partly written)");
  if (io.host.put) io.host.put(io.host.self);
}

/// The byte-level description of a typed tensor's save or load.
template <class X>
struct TypedIo {
  using View = std::remove_cvref_t<decltype(std::declval<const X&>().unchecked_local())>;
  using Mirror = decltype(Kokkos::create_mirror_view(Kokkos::HostSpace{}, std::declval<const View&>()));
  static constexpr std::size_t R = X::rank;
  std::array<std::size_t, R> global, off, cnt;
  const View* block;
  Mirror mirror;
  bool copy_in;  // save: the block's elements are needed on the host
  Io io;

  TypedIo(const X& x, dsp::detail::Op op, const std::source_location& loc, bool save)
      : global(x.global_extents()), off(x.local_offsets()), cnt(x.local_extents()), block(&x.unchecked_local()),
        copy_in(save) {
    using T = typename X::value_type;
    io.sig = dsp::detail::make_signature<T>(op, global, 0, 0, loc);
    X::set_layouts(io.sig, x.communicator());
    for (std::size_t a = 0; a < dsp::kMaxAxes; ++a) io.sig.dst_layout[a] = io.sig.src_layout[a];
    io.global = global, io.off = off, io.cnt = cnt;
    if (const dsp::Split sp = x.block_split(); sp.dim != dsp::Split::none)  // two ranges of a dim (Zigzag)
      io.split = sp.dim, io.first = sp.first, io.second = sp.second;
    io.type = native_type<T>();
    io.type_text = type_text<T>();
    io.host = {&TypedIo::get, save ? nullptr : &TypedIo::put, this};
  }
  TypedIo(const TypedIo&) = delete;
  TypedIo& operator=(const TypedIo&) = delete;
  static void* get(void* s) {
    auto& t = *static_cast<TypedIo*>(s);
    Kokkos::fence();
    t.mirror = Kokkos::create_mirror_view(Kokkos::HostSpace{}, *t.block);
    if (t.copy_in && t.mirror.data() != t.block->data()) Kokkos::deep_copy(t.mirror, *t.block);
    return t.mirror.data();
  }
  static void put(void* s) {
    auto& t = *static_cast<TypedIo*>(s);
    if (t.mirror.data() != t.block->data()) Kokkos::deep_copy(*t.block, t.mirror);
    Kokkos::fence();
  }
};

}  // namespace detail

/// Writes the global tensor `x` as dataset `dataset` (a path; groups on the
/// way are created) of `file` (created, or opened when it exists). Collective
/// over x's ranks (for a mesh: every rank of the communicator it was made
/// from). Ranks that disagree (names, extents, type, layout, operation)
/// raise MismatchError before anything is written; other errors raise
/// dsp::Error on every rank.
template <class X>
void save(const X& x, const std::string& file, const std::string& dataset,
          std::source_location loc = std::source_location::current()) {
  if constexpr (detail::tensor_ok<X>()) {
    static_assert(!dsp::detail::has_partial(dsp::detail::codes_v<typename X::layout_type>),
                  "dsp::hdf5::save: a Partial placement holds addends, not the tensor: reduce it first "
                  "(dsp::redistribute to Replicated or Sharded<D>), then save.");
    detail::TypedIo<X> t(x, dsp::detail::Op::hdf5_save, loc, true);
    detail::save_io(detail::world_of(x), t.io, file, dataset, "");
  }
}

/// Reads dataset `dataset` of `file` into `y`, under y's layout, mesh and
/// rank count. Collective over y's ranks. The dataset must have y's global
/// extents and element type. Errors raise dsp::Error on every rank; all but
/// a failure of the read itself (an I/O error) are found before y is
/// touched.
template <class Y>
void load(const std::string& file, const std::string& dataset, Y& y,
          std::source_location loc = std::source_location::current()) {
  if constexpr (detail::tensor_ok<Y>()) {
    static_assert(!dsp::detail::has_partial(dsp::detail::codes_v<typename Y::layout_type>),
                  "dsp::hdf5::load: a Partial placement holds addends, not the tensor: load into Replicated or "
                  "Sharded<D>.");
    detail::TypedIo<Y> t(y, dsp::detail::Op::hdf5_load, loc, false);
    detail::load_io(detail::world_of(y), t.io, file, dataset, "");
  }
}

}  // namespace dsp::hdf5
