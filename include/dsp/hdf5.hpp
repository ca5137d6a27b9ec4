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
// and type. Any failure (a file that cannot be made or opened, a missing
// dataset, other extents or element type) raises dsp::Error on every rank of
// the tensor's communicator; load finds all of them but an I/O error during
// the read itself before it writes to y.
#pragma once

#include <dsp/error.hpp>
#include <dsp/layout.hpp>
#include <dsp/mpi.hpp>
#include <dsp/redistribute.hpp>
#include <dsp/tensor.hpp>

#include <Kokkos_Core.hpp>
#include <hdf5.h>
#include <mpi.h>

#include <array>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

namespace dsp::hdf5 {

namespace detail {

template <class T>
constexpr bool supported_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int8_t> ||
    std::is_same_v<T, std::uint8_t> || std::is_same_v<T, std::int16_t> || std::is_same_v<T, std::uint16_t> ||
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, std::uint64_t>;

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
  else return H5T_NATIVE_UINT64;
}

template <class X>
constexpr bool tensor_ok() {
  constexpr bool tensor = is_dist_tensor_v<X>;
  static_assert(tensor, "dsp::hdf5: the tensor must be a dsp::DistTensor.");
  if constexpr (!tensor) {
    return false;
  } else {
    constexpr bool type = supported_v<typename X::value_type>;
    static_assert(type,
                  "dsp::hdf5: the element type must be float, double or a fixed-width integer "
                  "(std::int8_t ... std::uint64_t).");
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
  /// (this rank's message when it failed, the lowest failing rank's otherwise).
  void check(bool ok, const std::string& why) {
    int mine = ok ? -1 : rank_, first = -1;
    int flag = ok ? 0 : 1, any = 0;
    MPI_Allreduce(&flag, &any, 1, MPI_INT, MPI_MAX, comm_);
    if (!any) return;
    if (mine < 0) mine = 1 << 30;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm_);
    const std::string where = std::string(op_) + "(\"" + file_ + "\", \"" + dataset_ + "\")";
    if (!ok) throw Error(where + " (rank " + std::to_string(rank_) + "): " + why);
    throw MismatchError(where + ": rank " + std::to_string(first) + " failed; see its error");
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

/// The MPI communicator of a tensor's group (a mesh: the one it was made from).
template <class X>
MPI_Comm mpi_comm_of(const X& x) {
  using G = typename X::communicator_type;
  return dsp::detail::group_traits<G>::world(x.communicator()).native();
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
template <std::size_t R>
Handle block_space(const std::array<std::size_t, R>& global, const std::array<std::size_t, R>& off,
                   const std::array<std::size_t, R>& cnt, bool select) {
  hsize_t g[R > 0 ? R : 1], o[R > 0 ? R : 1], c[R > 0 ? R : 1];
  for (std::size_t d = 0; d < R; ++d) g[d] = global[d], o[d] = off[d], c[d] = cnt[d];
  Handle space(H5Screate_simple(int(R), g, nullptr), H5Sclose);
  if (!space) return space;
  std::size_t n = 1;
  for (std::size_t d = 0; d < R; ++d) n *= cnt[d];
  if (select && n > 0) H5Sselect_hyperslab(space.id, H5S_SELECT_SET, o, nullptr, c, nullptr);
  else H5Sselect_none(space.id);
  return space;
}

/// The memory dataspace of this rank's block, shaped as the block (HDF5
/// then maps it to the file's hyperslab without scattering element by
/// element), all of it selected, or nothing.
template <std::size_t R>
Handle memory_space(const std::array<std::size_t, R>& cnt, bool select) {
  hsize_t c[R > 0 ? R : 1];
  std::size_t n = 1;
  for (std::size_t d = 0; d < R; ++d) c[d] = cnt[d], n *= cnt[d];
  if (n == 0) {
    const hsize_t one = 1;
    Handle space(H5Screate_simple(1, &one, nullptr), H5Sclose);
    if (space) H5Sselect_none(space.id);
    return space;
  }
  Handle space(H5Screate_simple(int(R), c, nullptr), H5Sclose);
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

}  // namespace detail

/// Writes the global tensor `x` as dataset `dataset` (a path; groups on the
/// way are created) of `file` (created, or opened when it exists). Collective
/// over x's ranks (for a mesh: every rank of the communicator it was made
/// from). Errors raise dsp::Error on every rank.
template <class X>
void save(const X& x, const std::string& file, const std::string& dataset) {
  if constexpr (detail::tensor_ok<X>()) {
    static_assert(!dsp::detail::has_partial(dsp::detail::codes_v<typename X::layout_type>),
                  "dsp::hdf5::save: a Partial placement holds addends, not the tensor: reduce it first "
                  "(dsp::redistribute to Replicated or Sharded<D>), then save.");
    using T = typename X::value_type;
    constexpr std::size_t R = X::rank;
    const MPI_Comm comm = detail::mpi_comm_of(x);
    detail::Steps steps(comm, "dsp::hdf5::save", file, dataset);
    int n = 1;
    MPI_Comm_size(comm, &n);
    std::vector<std::string> parts;
    steps.check(detail::split_path(dataset, parts), "the dataset path is empty");
    // Each distinct block is written by its lowest rank.
    const auto off = x.local_offsets(), cnt = x.local_extents();
    std::array<std::size_t, 2 * R> mine{};
    for (std::size_t d = 0; d < R; ++d) mine[d] = off[d], mine[R + d] = cnt[d];
    std::vector<std::size_t> all(std::size_t(n) * 2 * R);
    MPI_Allgather(mine.data(), int(mine.size() * sizeof(std::size_t)), MPI_BYTE, all.data(),
                  int(mine.size() * sizeof(std::size_t)), MPI_BYTE, comm);
    bool writer = true;
    for (int r = 0; r < steps.rank() && writer; ++r)
      writer = !std::equal(mine.begin(), mine.end(), all.begin() + std::ptrdiff_t(std::size_t(r) * 2 * R));
    // The file: created, or opened when rank 0 sees it exists.
    int there = 0;
    if (steps.rank() == 0) there = ::access(file.c_str(), F_OK) == 0;
    MPI_Bcast(&there, 1, MPI_INT, 0, comm);
    detail::Handle fapl = detail::mpio_access(comm);
    detail::Handle f(there ? H5Fopen(file.c_str(), H5F_ACC_RDWR, fapl.id)
                           : H5Fcreate(file.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.id),
                     H5Fclose);
    steps.check(bool(f), there ? "cannot open the file for writing (is it an HDF5 file, and writable?)"
                               : "cannot create the file (does its directory exist, and is it writable?)");
    const std::array<std::size_t, R> global = x.global_extents();
    detail::Handle fspace = detail::block_space<R>(global, off, cnt, writer);
    const std::string path = detail::join_path(parts);
    detail::Handle ds;
    if (detail::exists(f.id, parts, parts.size())) {
      ds = detail::Handle(H5Dopen2(f.id, path.c_str(), H5P_DEFAULT), H5Dclose);
      bool same = bool(ds);
      if (same) {
        detail::Handle type(H5Dget_type(ds.id), H5Tclose), space(H5Dget_space(ds.id), H5Sclose);
        hsize_t dims[R > 0 ? R : 1] = {};
        same = type && space && H5Tequal(type.id, detail::native_type<T>()) > 0 &&
               H5Sget_simple_extent_ndims(space.id) == int(R) &&
               H5Sget_simple_extent_dims(space.id, dims, nullptr) >= 0;
        for (std::size_t d = 0; same && d < R; ++d) same = dims[d] == global[d];
      }
      steps.check(same, "the dataset exists with other extents or another element type; save under another name");
    } else {
      detail::Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
      if (lcpl) H5Pset_create_intermediate_group(lcpl.id, 1);
      ds = detail::Handle(
          H5Dcreate2(f.id, path.c_str(), detail::native_type<T>(), fspace.id, lcpl.id, H5P_DEFAULT, H5P_DEFAULT),
          H5Dclose);
      steps.check(bool(ds), "cannot create the dataset (is a part of its path a dataset?)");
    }
    // The block on the host (a device block through a copy).
    Kokkos::fence();
    const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x.unchecked_local());
    detail::Handle mspace = detail::memory_space<R>(cnt, writer);
    detail::Handle dxpl = detail::collective_transfer();
    const herr_t w = H5Dwrite(ds.id, detail::native_type<T>(), mspace.id, fspace.id, dxpl.id, host.data());
    steps.check(w >= 0, "the collective write failed");
    ds.reset();
    const herr_t c = f ? H5Fclose(f.id) : -1;
    f.id = -1;
    steps.check(c >= 0, "closing the file failed");
  }
}

/// Reads dataset `dataset` of `file` into `y`, under y's layout, mesh and
/// rank count. Collective over y's ranks. The dataset must have y's global
/// extents and element type. Errors raise dsp::Error on every rank; all but
/// a failure of the read itself (an I/O error) are found before y is
/// touched.
template <class Y>
void load(const std::string& file, const std::string& dataset, Y& y) {
  if constexpr (detail::tensor_ok<Y>()) {
    static_assert(!dsp::detail::has_partial(dsp::detail::codes_v<typename Y::layout_type>),
                  "dsp::hdf5::load: a Partial placement holds addends, not the tensor: load into Replicated or "
                  "Sharded<D>.");
    using T = typename Y::value_type;
    constexpr std::size_t R = Y::rank;
    const MPI_Comm comm = detail::mpi_comm_of(y);
    detail::Steps steps(comm, "dsp::hdf5::load", file, dataset);
    std::vector<std::string> parts;
    steps.check(detail::split_path(dataset, parts), "the dataset path is empty");
    int there = 0;
    if (steps.rank() == 0) there = ::access(file.c_str(), R_OK) == 0;
    MPI_Bcast(&there, 1, MPI_INT, 0, comm);
    steps.check(there, "no such file (or not readable)");
    detail::Handle fapl = detail::mpio_access(comm);
    detail::Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl.id), H5Fclose);
    steps.check(bool(f), "cannot open the file as HDF5");
    steps.check(detail::exists(f.id, parts, parts.size()), "no such dataset in the file");
    const std::string path = detail::join_path(parts);
    detail::Handle ds(H5Dopen2(f.id, path.c_str(), H5P_DEFAULT), H5Dclose);
    steps.check(bool(ds), "the path does not name a dataset");
    const std::array<std::size_t, R> global = y.global_extents();
    {
      detail::Handle type(H5Dget_type(ds.id), H5Tclose), space(H5Dget_space(ds.id), H5Sclose);
      const bool same_type = type && H5Tequal(type.id, detail::native_type<T>()) > 0;
      const int nd = space ? H5Sget_simple_extent_ndims(space.id) : -1;
      std::vector<hsize_t> dims(nd > 0 ? std::size_t(nd) : 1);
      if (nd > 0) H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
      bool same_ext = nd == int(R);
      for (std::size_t d = 0; same_ext && d < R; ++d) same_ext = dims[d] == global[d];
      std::string have = "[";
      for (int d = 0; d < nd; ++d) {
        if (d) have += ',';
        have += std::to_string(dims[std::size_t(d)]);
      }
      std::string want = "[";
      for (std::size_t d = 0; d < R; ++d) {
        if (d) want += ',';
        want += std::to_string(global[d]);
      }
      steps.check(same_ext, "the dataset's extents " + have + "] are not the tensor's " + want + "]");
      steps.check(same_type, "the dataset's element type is not the tensor's");
    }
    const auto off = y.local_offsets(), cnt = y.local_extents();
    // Straight into y's block where the host can reach it (a buffer's first
    // touch costs more than the read on some machines: 103 ms for 32 MiB on
    // the 2-core VM of docs/benchmarks.md), else through a host copy. Every
    // check that can fail on good input is made above, before any reading.
    const auto& block = y.unchecked_local();
    auto host = Kokkos::create_mirror_view(Kokkos::HostSpace{}, block);
    detail::Handle fspace = detail::block_space<R>(global, off, cnt, true);
    detail::Handle mspace = detail::memory_space<R>(cnt, true);
    detail::Handle dxpl = detail::collective_transfer();
    const herr_t r = H5Dread(ds.id, detail::native_type<T>(), mspace.id, fspace.id, dxpl.id, host.data());
    steps.check(r >= 0, "the collective read failed (y may be partly written)");
    if (host.data() != block.data()) Kokkos::deep_copy(block, host);
    Kokkos::fence();
  }
}

}  // namespace dsp::hdf5
