// SPDX-License-Identifier: BSD-3-Clause
// dsp's Python module (_dsp; the package python/dsp wraps it): layouts as
// values, arrays as this rank's block. One run-time front end over the
// type-erased engine: a call becomes engine/api.hpp's CallFacts (pointers,
// element sizes, extents, placement codes and a plan computed at run time by
// the same planner the C++ front ends run at compile time), so the module
// compiles the engine once and no (rank, layout, type) pair.
//
// Every local check (dtype, contiguity, device, block shape, layouts) goes
// through the call's agreement check: a bad block on one rank raises on every
// rank, before anything is communicated, and the input is untouched.
#ifndef DSP_PYTHON_CUDA  // 1 where the module is built with a CUDA Kokkos and dsp::nccl (python/CMakeLists.txt)
#define DSP_PYTHON_CUDA 0
#endif
#include <dsp/mpi.hpp>
#include <dsp/wisdom.hpp>
#if DSP_PYTHON_HDF5
#include <dsp/hdf5.hpp>
#endif
#if DSP_PYTHON_CUDA
#include <dsp/nccl.hpp>
#endif

#include <mpi4py/mpi4py.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace py = pybind11;

namespace {

using Space = Kokkos::HostSpace;  // a dsp.Comm made without device=
using Comm = dsp::MpiCommunicator;
#if DSP_PYTHON_CUDA
using DevSpace = Kokkos::CudaSpace;  // a dsp.Comm made with device= (docs/python.md, "CUDA arrays")
using DevComm = dsp::NcclCommunicator;
#endif
using dsp::ElemKind;
using dsp::MeshStep;
using dsp::detail::Op;
constexpr std::size_t kMaxAxes = dsp::kMaxAxes;
constexpr std::size_t kMaxRank = dsp::kMaxRank;
constexpr std::size_t kMaxBatch = dsp::detail::kMaxBatch;
constexpr long kReplicated = dsp::detail::kReplicated;
constexpr long kPartialSum = dsp::detail::kPartialSum;
constexpr long kPartialMax = dsp::detail::kPartialMax;
constexpr long kPartialMin = dsp::detail::kPartialMin;

// ---------------------------------------------------------------- element types

/// What the engine and the agreement check need of one element type.
struct TypeInfo {
  std::size_t size = 0;
  std::string_view name;  // as C++ spells it (the agreement check's text)
  std::uint64_t hash = 0;
  const char* names = "";
  ElemKind kind = ElemKind::other;
  const void* wire = nullptr;  // the wire kernels, or nullptr
  int rtype = -1;              // the reduce type, or -1
  bool complex = false;
  void (*set_type)(dsp::detail::Signature&) = nullptr;  // a signature's element type, as C++ sets it
  const char* py = "";                                  // as numpy and torch name it (Python's messages)
  const void* wire_device = nullptr;                    // the wire kernels on the GPU (a CUDA build), or nullptr
};

/// An element type as numpy and torch name it.
template <class T>
constexpr const char* py_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
  else if constexpr (std::is_same_v<T, std::int16_t>) return "int16";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, std::uint16_t>) return "uint16";
  else if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
  else if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
  else if constexpr (std::is_same_v<T, dsp::float16>) return "float16";
  else if constexpr (std::is_same_v<T, dsp::bfloat16>) return "bfloat16";
  else if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, double>) return "float64";
  else if constexpr (std::is_same_v<T, std::complex<float>>) return "complex64";
  else return "complex128";
}

template <class T>
const TypeInfo* info_of() {
  static const TypeInfo info {
    sizeof(T), dsp::detail::type_name<T>(), dsp::detail::SingleType<T>::value.hash,
        dsp::detail::SingleType<T>::value.names, dsp::elem_kind_v<T>,
        dsp::detail::wire_kernels_of<T, Space::execution_space>(), dsp::detail::reduce_type_code<T>(),
        dsp::detail::is_complex_reduce_v<T>, &dsp::detail::set_type<T>, py_name<T>(),
#if DSP_PYTHON_CUDA
        dsp::detail::wire_kernels_of<T, DevSpace::execution_space>()
#else
        nullptr
#endif
  };
  return &info;
}

/// The element type of kind 'b' (bool), 'i', 'u', 'f', 'c' or 'h' (bfloat16)
/// and `bytes` bytes, or nullptr.
const TypeInfo* type_of(char kind, std::size_t bytes) {
  switch (kind) {
    case 'b': return bytes == 1 ? info_of<bool>() : nullptr;
    case 'i':
      return bytes == 1   ? info_of<std::int8_t>()
             : bytes == 2 ? info_of<std::int16_t>()
             : bytes == 4 ? info_of<std::int32_t>()
             : bytes == 8 ? info_of<std::int64_t>()
                          : nullptr;
    case 'u':
      return bytes == 1   ? info_of<std::uint8_t>()
             : bytes == 2 ? info_of<std::uint16_t>()
             : bytes == 4 ? info_of<std::uint32_t>()
             : bytes == 8 ? info_of<std::uint64_t>()
                          : nullptr;
    case 'f':
      return bytes == 2   ? info_of<dsp::float16>()
             : bytes == 4 ? info_of<float>()
             : bytes == 8 ? info_of<double>()
                          : nullptr;
    case 'h': return bytes == 2 ? info_of<dsp::bfloat16>() : nullptr;
    case 'c':
      return bytes == 8 ? info_of<std::complex<float>>() : bytes == 16 ? info_of<std::complex<double>>() : nullptr;
    default: return nullptr;
  }
}

// ---------------------------------------------------------------- CUDA

bool g_kokkos_ours = false;  // the module initialized Kokkos (and finalizes it at exit)

#if DSP_PYTHON_CUDA
/// A dsp.Comm's CUDA side (dsp.Comm(comm, device=...)): an NCCL communicator
/// over the same ranks, the stream dsp's kernels and collectives run on, and
/// an event recorded after each call, which the caller's stream waits for.
/// Owns all three (a mesh's NCCL communicators share the stream).
struct DeviceComm {
  int device = 0;
  ncclComm_t nccl = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  std::optional<DevComm> comm;
  DeviceComm() = default;
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;
  ~DeviceComm() {  // no throw: an error here has nowhere to go
    comm.reset();  // its Kokkos::Cuda instance on the stream, first
    if (nccl) ncclCommDestroy(nccl);
    if (done) cudaEventDestroy(done);
    if (stream) cudaStreamDestroy(stream);
  }
};

/// Kokkos, initialized on the current CUDA device where it is not yet (a
/// CUDA build initializes it with the first dsp.Comm, so that
/// torch.cuda.set_device before it picks dsp's device as torch's).
void ensure_kokkos() {
  if (Kokkos::is_initialized()) return;
  int d = 0;
  DSP_CHECK_CUDA(cudaGetDevice(&d));
  Kokkos::initialize(Kokkos::InitializationSettings().set_device_id(d));
  g_kokkos_ours = true;
}

/// Raises on every rank of `host` where `failure` is set on any (collective):
/// the failing rank its own exception, the others a BackendError saying so.
/// So that no rank waits in a later collective for one that failed.
void agree_or_raise(const Comm& host, const std::exception_ptr& failure, const char* what) {
  int ok = failure ? 0 : 1, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, host.native());
  if (failure) std::rethrow_exception(failure);
  if (!all) throw dsp::BackendError(std::string(what) + ": another rank failed (its error says why)", 0);
}

/// The CUDA side of a dsp.Comm over `host`'s ranks on CUDA device `device`
/// (-1: the current one); Kokkos starts there where it has not yet. The
/// thread's current device is as before, after (each call sets its own).
/// Collective over `host`: a rank whose device, Kokkos, stream or NCCL id
/// cannot be made raises its reason, the
/// others a BackendError saying so, before NCCL is entered. NCCL's own
/// initialization failing on some ranks only is NCCL's to report.
std::shared_ptr<DeviceComm> make_device_comm(const Comm& host, int device) {
  auto d = std::make_shared<DeviceComm>();
  std::exception_ptr failure;
  ncclUniqueId id{};
  int before = -1;
  try {
    DSP_CHECK_CUDA(cudaGetDevice(&before));
    if (device >= 0) DSP_CHECK_CUDA(cudaSetDevice(device));
    DSP_CHECK_CUDA(cudaGetDevice(&d->device));
    ensure_kokkos();
    const int kokkos = Kokkos::Cuda().cuda_device();
    if (kokkos != d->device)
      throw dsp::InvalidArgument(
          "dsp.Comm(device=" + std::to_string(d->device) + ") (rank " + std::to_string(host.rank()) +
          "): dsp's Kokkos runs on CUDA device " + std::to_string(kokkos) +
          " (chosen by the first dsp.Comm of this process); make every device dsp.Comm of a process on that "
          "device (torch.cuda.set_device(k) before the first dsp.Comm picks k)");
    DSP_CHECK_CUDA(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    DSP_CHECK_CUDA(cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming));
    if (host.rank() == 0) DSP_CHECK_NCCL(nullptr, ncclGetUniqueId(&id));
  } catch (...) {
    failure = std::current_exception();
    if (before >= 0) cudaSetDevice(before);
  }
  agree_or_raise(host, failure, "dsp.Comm(device=...)");
  MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, host.native());
  DSP_CHECK_NCCL(nullptr, ncclCommInitRank(&d->nccl, host.size(), id, host.rank()));  // on d->device
  d->comm.emplace(d->nccl, d->stream);
  if (before != d->device) DSP_CHECK_CUDA(cudaSetDevice(before));  // each call makes its device current
  return d;
}

/// For one call on a CUDA group: its device current on this thread (torch's
/// current stream, whose work dsp's stream waits for and which then waits
/// for dsp's, is that device's), restored after. Nothing for a host group.
class DeviceScope {
 public:
  explicit DeviceScope(const DeviceComm* d) {
    if (!d) return;
    DSP_CHECK_CUDA(cudaGetDevice(&before_));
    if (before_ != d->device) DSP_CHECK_CUDA(cudaSetDevice(d->device));
    else before_ = -1;
  }
  ~DeviceScope() {
    if (before_ >= 0) cudaSetDevice(before_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int before_ = -1;
};
#else
struct DeviceComm {  // a host build has none
  int device = 0;
};
void ensure_kokkos() {
  if (Kokkos::is_initialized()) return;
  Kokkos::initialize();
  g_kokkos_ours = true;
}
struct DeviceScope {
  explicit DeviceScope(const DeviceComm*) {}
};
#endif

/// Where a call's arrays live: host memory (`dev` null; `host_only` says why
/// where the operation never moves device memory) or dev's CUDA device.
struct Want {
  const DeviceComm* dev = nullptr;
  const char* host_only = nullptr;
};

// ---------------------------------------------------------------- blocks

// DLPack's C ABI (dlpack.h, version 0.x/1.0 DLManagedTensor), as the standard
// fixes it: what a producer's __dlpack__() capsule named "dltensor" points to.
struct DLDevice {
  std::int32_t device_type;  // 1: CPU, 2: CUDA, 3: CUDA host (pinned)
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; nullptr: compact row-major
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

/// One array of a call: this rank's block, and what is wrong with it ("" if
/// nothing). `keep` holds the memory (the array, or its DLPack capsule).
struct Block {
  py::object array, keep;
  bool torch_cpu = false;  // a torch tensor in host memory (read through its attributes)
  int device = -1;         // the CUDA device it lives on (DLPack), or -1: host memory
  void* data = nullptr;
  std::vector<std::size_t> shape;
  const TypeInfo* type = nullptr;
  std::string error;
};

std::string shape_text(const std::vector<std::size_t>& s) {
  std::string t = "(";
  for (std::size_t d = 0; d < s.size(); ++d) {
    if (d) t += ", ";
    t += std::to_string(s[d]);
  }
  return t + (s.size() == 1 ? ",)" : ")");
}

Block numpy_block(const py::array& a) {
  Block b;
  b.array = a;
  b.keep = a;
  b.data = const_cast<void*>(a.data());
  for (py::ssize_t d = 0; d < a.ndim(); ++d) b.shape.push_back(std::size_t(a.shape(d)));
  const py::dtype dt = a.dtype();
  b.type = dt.byteorder() == '>' ? nullptr : type_of(dt.kind(), std::size_t(dt.itemsize()));
  if (!b.type)
    b.error = "the array's dtype " + py::str(static_cast<const py::handle&>(dt)).cast<std::string>() +
              " is not one dsp moves";
  else if (!(a.flags() & py::array::c_style))
    b.error =
        "the array is not C-contiguous (dsp takes each rank's block as one row-major array, "
        "without copying: pass numpy.ascontiguousarray(x))";
  return b;
}

bool row_major(const DLTensor& t) {
  if (!t.strides) return true;
  for (std::int32_t d = 0; d < t.ndim; ++d)
    if (t.shape[d] == 0) return true;  // empty: any strides
  std::int64_t want = 1;
  for (std::int32_t d = t.ndim; d-- > 0;) {
    if (t.shape[d] != 1 && t.strides[d] != want) return false;
    want *= t.shape[d];
  }
  return true;
}

/// What is wrong with a block's memory for a call that wants `w`, or "".
std::string device_error(const Block& b, const Want& w) {
  if (b.device < 0 && w.dev)
    return "the array lives in host memory, but this dsp.Comm moves CUDA memory (device " +
           std::to_string(w.dev->device) +
           "); pass the block on that device (x.cuda()), or use a dsp.Comm made "
           "without device=";
  if (b.device < 0) return "";
#if DSP_PYTHON_CUDA
  if (w.host_only) return "the array lives in CUDA memory; " + std::string(w.host_only);
  if (!w.dev)
    return "the array lives in CUDA memory (device " + std::to_string(b.device) +
           "), but this dsp.Comm moves host memory; make it with dsp.Comm(comm, device=\"cuda\") for CUDA arrays";
  if (b.device != w.dev->device)
    return "the array lives on CUDA device " + std::to_string(b.device) + ", but this dsp.Comm moves device " +
           std::to_string(w.dev->device);
  return "";
#else
  return "the array lives in device memory (CUDA device " + std::to_string(b.device) +
         "); this build of dsp moves host memory (a CUDA build of the module moves device arrays: docs/python.md)";
#endif
}

Block dlpack_block(py::object x, const Want& w) {
  Block b;
  b.array = x;
  if (py::hasattr(x, "requires_grad") && x.attr("requires_grad").cast<bool>()) x = x.attr("detach")();
  // The device first (DLPack's __dlpack_device__): a CUDA producer is asked to make the data ready on
  // dsp's stream (__dlpack__(stream=...): torch makes that stream wait for its current one).
  std::int32_t type = 1, id = 0;
  if (py::hasattr(x, "__dlpack_device__")) {
    const py::tuple d = x.attr("__dlpack_device__")();
    type = d[0].cast<std::int32_t>(), id = d[1].cast<std::int32_t>();
  }
  const bool cuda = type == 2 || type == 13;  // kDLCUDA, kDLCUDAManaged
  if (!cuda && type != 1 && type != 3) {
    b.error = "the array lives in device memory (DLPack device type " + std::to_string(type) +
              "); dsp moves host memory and, in a CUDA build, CUDA memory (docs/python.md)";
    return b;
  }
  if (cuda) b.device = id;
  if (b.error = device_error(b, w); !b.error.empty()) return b;  // before asking for the data
  py::object cap;
#if DSP_PYTHON_CUDA
  if (cuda) cap = x.attr("__dlpack__")(py::arg("stream") = reinterpret_cast<std::intptr_t>(w.dev->stream));
  else
#endif
    cap = x.attr("__dlpack__")();
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (!m) throw py::error_already_set();
  b.keep = cap;  // not consumed: the capsule's destructor releases the tensor
  const DLTensor& t = m->dl_tensor;
  b.data = static_cast<unsigned char*>(t.data) + t.byte_offset;
  for (std::int32_t d = 0; d < t.ndim; ++d) b.shape.push_back(std::size_t(t.shape[d]));
  static constexpr char kinds[] = {'i', 'u', 'f', '?', 'h', 'c', 'b'};
  if (t.dtype.lanes == 1 && t.dtype.code < sizeof kinds) b.type = type_of(kinds[t.dtype.code], t.dtype.bits / 8u);
  if (t.device.device_type != type && !(cuda && (t.device.device_type == 2 || t.device.device_type == 13)))
    b.error = "the array's __dlpack__ names another device type (" + std::to_string(t.device.device_type) +
              ") than its __dlpack_device__ (" + std::to_string(type) + ")";
  else if (!b.type)
    b.error = "the array's element type (DLPack code " + std::to_string(t.dtype.code) + ", " +
              std::to_string(t.dtype.bits) + " bits, " + std::to_string(t.dtype.lanes) + " lanes) is not one dsp moves";
  else if (!row_major(t))
    b.error =
        "the array is not contiguous (dsp takes each rank's block as one row-major array, without copying: "
        "pass x.contiguous())";
  return b;
}

/// torch's Tensor type and its dtypes, where torch is imported (looked up
/// once, then kept: a torch tensor is read through its attributes, which
/// costs about a fifth of a DLPack export).
struct TorchTypes {
  PyObject* tensor = nullptr;      // torch.Tensor, or nullptr: torch not imported yet
  PyObject* from_numpy = nullptr;  // torch.from_numpy
  std::vector<std::pair<PyObject*, const TypeInfo*>> dtypes;
};
const TorchTypes& torch_types() {
  static TorchTypes* t = nullptr;
  if (t) return *t;
  static const TorchTypes none;
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return none;  // no torch tensor can exist yet
  py::module_ torch = modules["torch"];
  auto* n = new TorchTypes;  // kept for the process: holds Python objects, never destroyed as a static
  n->tensor = py::object(torch.attr("Tensor")).release().ptr();
  n->from_numpy = py::object(torch.attr("from_numpy")).release().ptr();
  const std::pair<const char*, const TypeInfo*> names[] = {
      {"bool", type_of('b', 1)},    {"int8", type_of('i', 1)},      {"int16", type_of('i', 2)},
      {"int32", type_of('i', 4)},   {"int64", type_of('i', 8)},     {"uint8", type_of('u', 1)},
      {"float16", type_of('f', 2)}, {"bfloat16", type_of('h', 2)},  {"float32", type_of('f', 4)},
      {"float64", type_of('f', 8)}, {"complex64", type_of('c', 8)}, {"complex128", type_of('c', 16)}};
  for (const auto& [name, info] : names)
    if (py::hasattr(torch, name)) n->dtypes.emplace_back(py::object(torch.attr(name)).release().ptr(), info);
  t = n;
  return *t;
}

/// A CPU torch tensor's block, from its attributes (data_ptr includes the
/// storage offset); other devices, or a dtype not in the table, through DLPack.
std::optional<Block> torch_block(py::handle x, const TorchTypes& tt) {
  if (!x.attr("is_cpu").cast<bool>()) return std::nullopt;
  PyObject* dt = x.attr("dtype").ptr();
  const TypeInfo* type = nullptr;
  for (const auto& [d, info] : tt.dtypes)
    if (d == dt) type = info;
  if (!type) return std::nullopt;
  Block b;
  b.array = b.keep = py::reinterpret_borrow<py::object>(x);
  b.torch_cpu = true;
  b.type = type;
  for (py::handle e : x.attr("shape")) b.shape.push_back(e.cast<std::size_t>());
  b.data = reinterpret_cast<void*>(x.attr("data_ptr")().cast<std::uintptr_t>());
  std::size_t n = 1;
  for (std::size_t e : b.shape) n *= e;
  if (n > 1 && !x.attr("is_contiguous")().cast<bool>())
    b.error =
        "the array is not contiguous (dsp takes each rank's block as one row-major array, without copying: "
        "pass x.contiguous())";
  return b;
}

/// Block `x` of a call whose arrays live as `w` says (a block elsewhere
/// says so in its error).
Block block_of(py::handle x, const Want& w = {}) {
  auto host = [&](Block b) {
    if (b.error.empty()) b.error = device_error(b, w);
    return b;
  };
  if (py::isinstance<py::array>(x)) return host(numpy_block(py::reinterpret_borrow<py::array>(x)));
  if (const TorchTypes& tt = torch_types(); tt.tensor && PyObject_TypeCheck(x.ptr(), (PyTypeObject*)tt.tensor))
    if (std::optional<Block> b = torch_block(x, tt)) return host(std::move(*b));
  if (py::hasattr(x, "__dlpack__")) return dlpack_block(py::reinterpret_borrow<py::object>(x), w);
  throw dsp::InvalidArgument("dsp: a block is a numpy array or an object with __dlpack__ (a torch tensor), not " +
                             std::string(py::str(py::type::of(x).attr("__name__"))));
}

/// numpy outputs, recycled as the C++ allocating calls recycle theirs
/// (core/buffers.hpp, OutputPool): the pool keeps a reference to each array
/// it hands out, and an array only the pool still references (the caller
/// dropped it; a view or an exported buffer would hold a reference too) is
/// handed out again for the next request of its dtype and shape. A steady
/// loop then page-faults nothing. At most kKeep arrays; emptied by
/// dsp.release_workspaces() and at exit. Never destroyed as a static (it
/// holds Python objects): allocated once, cleared by clear_outputs.
struct NumpyPool {
  static constexpr std::size_t kKeep = 4;
  std::vector<py::array> arrays;
};
NumpyPool& numpy_pool() {
  static NumpyPool* p = new NumpyPool;
  return *p;
}
void clear_outputs() { numpy_pool().arrays.clear(); }

bool idle_match(const py::array& a, const py::dtype& dt, const std::vector<std::size_t>& shape) {
  if (Py_REFCNT(a.ptr()) != 1 || !a.dtype().equal(dt) || std::size_t(a.ndim()) != shape.size()) return false;
  if (!a.writeable() || !(a.flags() & py::array::c_style)) return false;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (std::size_t(a.shape(py::ssize_t(d))) != shape[d]) return false;
  return true;
}

py::array numpy_output(const py::dtype& dt, const std::vector<std::size_t>& shape) {
  NumpyPool& p = numpy_pool();
  for (const py::array& a : p.arrays)
    if (idle_match(a, dt, shape)) return a;
  py::array a(dt, shape);
  if (p.arrays.size() >= NumpyPool::kKeep)  // drop an idle array, else keep the new one untracked
    for (auto it = p.arrays.begin(); it != p.arrays.end(); ++it)
      if (Py_REFCNT(it->ptr()) == 1) {
        p.arrays.erase(it);
        break;
      }
  if (p.arrays.size() < NumpyPool::kKeep) p.arrays.push_back(a);
  return a;
}

/// numpy's dtype of an element type dsp moves (looked up once per type),
/// or nullptr where numpy has none (bfloat16).
const py::dtype* numpy_dtype_of(const TypeInfo* t) {
  static std::map<const TypeInfo*, py::dtype*> known;  // kept for the process: holds Python objects
  if (auto it = known.find(t); it != known.end()) return it->second;
  py::dtype* d = std::string_view(t->py) == "bfloat16" ? nullptr : new py::dtype(std::string(t->py));
  known.emplace(t, d);
  return d;
}

/// A new array of `shape` like `x` (same kind, element type and device).
/// A host torch tensor's output is a recycled numpy array seen through
/// torch.from_numpy: the tensor's storage holds a reference to the array
/// until the storage itself goes (every view, and autograd's saved tensors,
/// keep it), so the pool's rule (an array only the pool references is idle)
/// holds for it too, and a steady loop page-faults nothing.
py::object empty_like(const Block& x, const std::vector<std::size_t>& shape) {
  py::tuple s(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) s[d] = py::int_(shape[d]);
  if (py::isinstance<py::array>(x.array))
    return numpy_output(py::reinterpret_borrow<py::array>(x.array).dtype(), shape);
  if (x.torch_cpu)
    if (const py::dtype* d = numpy_dtype_of(x.type))
      return py::reinterpret_borrow<py::object>(torch_types().from_numpy)(numpy_output(*d, shape));
  if (py::hasattr(x.array, "new_empty")) return x.array.attr("new_empty")(s);
  if (py::hasattr(x.array, "__array_namespace__"))
    return x.array.attr("__array_namespace__")().attr("empty")(s, py::arg("dtype") = x.array.attr("dtype"));
  throw dsp::InvalidArgument("dsp: cannot make an output like a " +
                             std::string(py::str(py::type::of(x.array).attr("__name__"))) +
                             " (it has neither new_empty nor __array_namespace__)");
}

// ---------------------------------------------------------------- groups

template <std::size_t K>
using MeshK = dsp::Mesh<K, Comm>;

struct PyComm {
  Comm comm;                        // MPI (a duplicate of the mpi4py communicator)
  std::shared_ptr<DeviceComm> dev;  // made with device=: NCCL over the same ranks, for CUDA arrays
};

#if DSP_PYTHON_CUDA
template <std::size_t K>
using DevMeshK = dsp::Mesh<K, DevComm>;
using DevMeshes = std::variant<DevMeshK<1>, DevMeshK<2>, DevMeshK<3>, DevMeshK<4>>;
#endif

struct PyMesh {
  PyComm world;  // first: destroyed after the meshes over it
  std::variant<MeshK<1>, MeshK<2>, MeshK<3>, MeshK<4>> mesh;
#if DSP_PYTHON_CUDA
  std::optional<DevMeshes> dev;  // world.dev's mesh of the same shape (its calls run here)
#endif
};

Comm comm_from(py::handle o) {
  if (!PyObject_TypeCheck(o.ptr(), &PyMPIComm_Type))
    throw dsp::InvalidArgument("dsp.Comm: takes an mpi4py communicator (mpi4py.MPI.Comm), not " +
                               std::string(py::str(py::type::of(o).attr("__name__"))));
  MPI_Comm c = *PyMPIComm_Get(o.ptr());
  if (c == MPI_COMM_NULL)
    throw dsp::InvalidArgument("dsp.Comm: the mpi4py communicator is MPI.COMM_NULL (freed, or never created)");
  return Comm(c);  // dsp duplicates it: freeing the mpi4py one later does not affect dsp's
}

template <std::size_t... K>
PyMesh make_mesh(const PyComm& c, const std::vector<int>& shape, std::index_sequence<K...>) {
  std::optional<PyMesh> m;
  auto one = [&](auto k) {
    constexpr std::size_t n = decltype(k)::value;
    if (shape.size() != n) return;
    std::array<int, n> s{};
    std::copy(shape.begin(), shape.end(), s.begin());
#if DSP_PYTHON_CUDA
    m.emplace(PyMesh{c, MeshK<n>(c.comm, s), std::nullopt});
    if (c.dev) m->dev.emplace(DevMeshK<n>(*c.dev->comm, s));
#else
    m.emplace(PyMesh{c, MeshK<n>(c.comm, s)});
#endif
  };
  (one(std::integral_constant<std::size_t, K + 1>{}), ...);
  if (!m)
    throw dsp::InvalidArgument("dsp.Mesh: a mesh has 1 to " + std::to_string(kMaxAxes) + " axes, not " +
                               std::to_string(shape.size()));
  return std::move(*m);
}

/// Calls f(group) with the group as its C++ type over MPI: the communicator,
/// or the mesh (its shape and coordinates are its CUDA side's too).
template <class F>
decltype(auto) with_group(py::handle g, F&& f) {
  if (py::isinstance<PyComm>(g)) return f(g.cast<PyComm&>().comm);
  if (py::isinstance<PyMesh>(g)) return std::visit(f, g.cast<PyMesh&>().mesh);
  throw dsp::InvalidArgument("dsp: the group is a dsp.Comm or a dsp.Mesh, not " +
                             std::string(py::str(py::type::of(g).attr("__name__"))));
}

/// The group's CUDA side, owned, or null (a host group, or not a group).
std::shared_ptr<DeviceComm> device_owner(py::handle g) {
  if (py::isinstance<PyComm>(g)) return g.cast<PyComm&>().dev;
  if (py::isinstance<PyMesh>(g)) return g.cast<PyMesh&>().world.dev;
  return nullptr;
}
/// The same, not owned: the group holds it.
const DeviceComm* device_of(py::handle g) { return device_owner(g).get(); }

/// The memory space a group's calls move: a CUDA group's device memory.
template <class G>
struct space_of {
  using type = Space;
};
#if DSP_PYTHON_CUDA
template <>
struct space_of<DevComm> {
  using type = DevSpace;
};
template <std::size_t K>
struct space_of<DevMeshK<K>> {
  using type = DevSpace;
};
#endif
template <class G>
using SpaceOf = typename space_of<G>::type;

/// Calls f(group) with the group its calls run on: with_group's, or on a
/// dsp.Comm made with device=, its NCCL communicator (or mesh).
template <class F>
decltype(auto) with_engine_group(py::handle g, F&& f) {
#if DSP_PYTHON_CUDA
  if (py::isinstance<PyComm>(g))
    if (const PyComm& c = g.cast<PyComm&>(); c.dev) return f(*c.dev->comm);
  if (py::isinstance<PyMesh>(g))
    if (PyMesh& m = g.cast<PyMesh&>(); m.dev) return std::visit(f, *m.dev);
#endif
  return with_group(g, std::forward<F>(f));
}

/// After a call on a CUDA group (`in` and `out` its blocks): the caller's
/// stream waits for dsp's (no host wait), so that what the caller runs next
/// sees the outputs, and every torch tensor of the call is recorded as used
/// by dsp's stream (record_stream), so that torch's caching allocator hands
/// its memory out again only once dsp is done with it, whichever stream it
/// was allocated on. Outputs that are not all torch tensors (an array type
/// dsp knows no current stream of): the host waits for dsp's stream instead.
void order_after(const DeviceComm* d, const std::vector<Block>& in, const std::vector<Block>& out) {
#if DSP_PYTHON_CUDA
  if (!d) return;
  DSP_CHECK_CUDA(cudaEventRecord(d->done, d->stream));
  const TorchTypes& tt = torch_types();
  auto is_torch = [&](const Block& b) {
    return tt.tensor && PyObject_TypeCheck(b.array.ptr(), (PyTypeObject*)tt.tensor);
  };
  bool torch = !out.empty();
  for (const Block& b : out) torch = torch && is_torch(b);
  if (!torch) {
    DSP_CHECK_CUDA(cudaEventSynchronize(d->done));
    return;
  }
  const py::object cuda = py::module_::import("torch").attr("cuda");
  const py::object ours =
      cuda.attr("ExternalStream")(reinterpret_cast<std::intptr_t>(d->stream), py::arg("device") = d->device);
  for (const std::vector<Block>* blocks : {&in, &out})
    for (const Block& b : *blocks)
      if (b.device >= 0 && is_torch(b)) b.array.attr("record_stream")(ours);
  const py::object caller = cuda.attr("current_stream")(d->device);
  DSP_CHECK_CUDA(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(caller.attr("cuda_stream").cast<std::intptr_t>()),
                                     d->done, 0));
#else
  (void)d, (void)in, (void)out;
#endif
}

/// A call on a CUDA group that fails after queuing work on dsp's stream: the
/// host waits for that stream before the call's blocks go (torch could hand
/// their memory out at once). Disarmed once order_after has run.
class SettleOnThrow {
 public:
  explicit SettleOnThrow(const DeviceComm* d) : d_(d) {}
  ~SettleOnThrow() {
#if DSP_PYTHON_CUDA
    if (d_ && armed_) cudaStreamSynchronize(d_->stream);  // no throw: the call's own error is on its way
#endif
  }
  SettleOnThrow(const SettleOnThrow&) = delete;
  SettleOnThrow& operator=(const SettleOnThrow&) = delete;
  void disarm() { armed_ = false; }

 private:
  const DeviceComm* d_;
  bool armed_ = true;
};

// ---------------------------------------------------------------- plans

using Codes = std::array<long, kMaxAxes>;

template <std::size_t K, std::size_t N>
std::vector<MeshStep> steps_of(const std::array<long, K>& f, const std::array<long, K>& t, std::size_t rank) {
  const dsp::MeshPlan<K> p = dsp::detail::plan_mesh<K, N>(f, t, rank);
  if (!p.found) throw dsp::InvalidArgument("dsp: no plan found (a bug: every placement reaches every other)");
  return std::vector<MeshStep>(p.steps.begin(), p.steps.begin() + p.size);
}

template <std::size_t K>
std::vector<MeshStep> plan_k(const Codes& from, const Codes& to, std::size_t rank) {
  std::array<long, K> f{}, t{};
  std::copy_n(from.begin(), K, f.begin());
  std::copy_n(to.begin(), K, t.begin());
  const std::size_t n = dsp::detail::plan_states(f, t, rank);
  if (n <= 64) return steps_of<K, 64>(f, t, rank);
  if (n <= 1024) return steps_of<K, 1024>(f, t, rank);
  if (n <= 16384) return steps_of<K, 16384>(f, t, rank);
  throw dsp::InvalidArgument("dsp: this redistribution's plan space (" + std::to_string(n) +
                             " states) is past the run-time planner's 16384; use fewer distinct placements");
}

/// The plan from `from` to `to` (one code per axis) for a tensor of `rank`
/// dims: computed once per key, then cached.
const std::vector<MeshStep>& plan_of(const Codes& from, const Codes& to, std::size_t axes, std::size_t rank) {
  static std::mutex mutex;
  static std::map<std::tuple<Codes, Codes, std::size_t, std::size_t>, std::vector<MeshStep>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(from, to, axes, rank);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  std::vector<MeshStep> s = axes == 1   ? plan_k<1>(from, to, rank)
                            : axes == 2 ? plan_k<2>(from, to, rank)
                            : axes == 3 ? plan_k<3>(from, to, rank)
                                        : plan_k<4>(from, to, rank);
  return cache.emplace(key, std::move(s)).first->second;
}

// ---------------------------------------------------------------- calls

/// One call, as the Python front end describes it.
struct Request {
  std::string name = "dsp::redistribute";  // the C++ call it stands for, in messages
  std::vector<Block> in;
  std::vector<std::size_t> global;
  std::vector<std::vector<std::size_t>> globals;  // a batch of different extents: one per block (else empty)
  Codes from{}, to{};
  std::size_t axes = 1;    // the group's axes (1: a communicator)
  bool given_axes = true;  // from and to named one placement per axis
  dsp::Wire wire = dsp::Wire::exact;
  Want want;          // where the group's calls move memory (host, or its CUDA device)
  std::string error;  // the first local failure
  // A mesh layout's dsp.Blocks: its sizes and their prefix offsets (empty: none on that side).
  std::vector<std::size_t> src_sizes, dst_sizes, src_starts, dst_starts;
  dsp::detail::CutSizes in_sizes() const { return {src_starts.empty() ? nullptr : src_starts.data(), nullptr}; }
  dsp::detail::CutSizes out_sizes() const { return {dst_starts.empty() ? nullptr : dst_starts.data(), nullptr}; }
};

/// Block k's global extents (a batch of different extents has one per block).
const std::vector<std::size_t>& global_of(const Request& r, std::size_t k) {
  return r.globals.empty() ? r.global : r.globals[k];
}

/// Why a batch's list of global shapes does not fit its blocks, or "".
std::string globals_error(const Request& r, bool list) {
  if (r.globals.empty()) return "";
  if (!list || r.globals.size() != r.in.size())
    return r.name + ": global_shape is a list of " + std::to_string(r.globals.size()) + " shapes, for " +
           (list ? std::to_string(r.in.size()) + " blocks" : "one block") + "; pass one shape per block of a batch";
  for (std::size_t k = 0; k < r.globals.size(); ++k)
    if (r.globals[k].size() != r.global.size())
      return r.name + ": shape " + std::to_string(k) + " of global_shape, " + shape_text(r.globals[k]) +
             ", has another number of dims than shape 0, " + shape_text(r.global) + "; a batch has one tensor rank";
  return "";
}

bool fits(const Codes& c, std::size_t axes, std::size_t rank) {
  for (std::size_t a = 0; a < axes; ++a)
    if (dsp::detail::code_dim(c[a]) >= long(rank)) return false;
  return true;
}
bool has(const Codes& c, std::size_t axes, bool (*p)(long)) {
  for (std::size_t a = 0; a < axes; ++a)
    if (p(c[a])) return true;
  return false;
}
bool is_partial(long c) { return dsp::detail::is_partial_code(c); }
bool is_max_min(long c) { return c == kPartialMax || c == kPartialMin; }

/// A mesh layout's cut rules (C++ layout_for_group's sentences): at most one
/// Blocks, on the first axis that cuts its dim; at most one Zigzag. "" or why not.
std::string mesh_cut_error(const Codes& c, std::size_t axes) {
  std::size_t zigzags = 0, blocks = 0;
  for (std::size_t a = 0; a < axes; ++a) {
    zigzags += dsp::detail::is_zigzag_code(c[a]) ? 1 : 0;
    if (!dsp::detail::is_blocks_code(c[a])) continue;
    if (++blocks > 1)
      return "dsp::DistTensor: a layout on a mesh has at most one Blocks<D> (its sizes are one per rank of its "
             "axis); cut the other dims with Sharded.";
    for (std::size_t b = 0; b < a; ++b)
      if (dsp::detail::code_dim(c[b]) == dsp::detail::code_dim(c[a]))
        return "dsp::DistTensor: a Blocks<D> on a mesh stands on the first axis that cuts dim D (its sizes cut the "
               "whole extent); a later axis may cut each block further with Sharded<D> or Zigzag<D>.";
  }
  if (zigzags > 1)
    return "dsp::DistTensor: a layout on a mesh has at most one Zigzag<D> (a rank's block then holds at most two "
           "ranges of dim D); cut the other dims with Sharded.";
  return "";
}

/// The prefix offsets of a mesh layout's Blocks sizes into `starts` (none
/// when the layout has no Blocks), checked against its axis (`shape`) and
/// extent: "" or what is wrong (`what` names the argument).
std::string mesh_starts(const Codes& c, std::size_t axes, const std::vector<std::size_t>& global,
                        std::span<const int> shape, const std::vector<std::size_t>& sizes, const std::string& what,
                        std::vector<std::size_t>& starts) {
  starts.clear();
  for (std::size_t a = 0; a < axes; ++a) {
    if (!dsp::detail::is_blocks_code(c[a])) continue;
    const std::size_t d = std::size_t(dsp::detail::code_dim(c[a]));
    if (d >= global.size()) return "";  // the layout's own check says so
    if (std::string why = dsp::detail::block_sizes_error(sizes, global[d], std::size_t(shape[a]), int(a)); !why.empty())
      return "dsp.Blocks: " + why + " (the " + what + " argument)";
    starts.assign(1, 0);
    for (std::size_t v : sizes) starts.push_back(starts.back() + v);
  }
  return "";
}

/// The layout rules of the C++ front ends, with their sentences, and the
/// blocks' own: the first failure, or "".
std::string layout_error(const Request& r, bool mesh) {
  if (!r.given_axes)
    return mesh ? "dsp::redistribute<To>: on a dsp::Mesh, To must be dsp::Axes<...> with exactly one placement per "
                  "mesh axis. (From Python: src and dst are tuples of " +
                      std::to_string(r.axes) + " placements, one per axis of the mesh.)"
                : std::string(
                      "dsp::redistribute<To>: on a communicator, To is one placement: dsp::Replicated, "
                      "dsp::Sharded<D> or dsp::Partial<Op>. (From Python: src and dst are one placement "
                      "each, not tuples.)");
  const std::size_t rank = r.global.size();
  if (rank == 0 || rank > kMaxRank)
    return r.name + ": a tensor has 1 to " + std::to_string(kMaxRank) + " dims; global_shape has " +
           std::to_string(rank);
  const std::string here = " (Here: a tensor of " + std::to_string(rank) + " dims.)";
  if (!fits(r.from, r.axes, rank))
    return "dsp::DistTensor: a Sharded<D> in the layout names a dim D that is not less than the tensor's rank." + here;
  if (mesh)
    for (const Codes* c : {&r.from, &r.to})
      if (std::string why = mesh_cut_error(*c, r.axes); !why.empty()) return why;
  if (!fits(r.to, r.axes, rank))
    return "dsp::redistribute<To>: a Sharded<D> in To names a dim D that is not less than the tensor's rank." + here;
  if (has(r.from, r.axes, is_partial) || has(r.to, r.axes, is_partial)) {
    for (const Block& b : r.in) {
      if (!b.type) continue;
      if (b.type->rtype < 0)
        return "dsp::redistribute: a Partial placement reduces elements, so the element type must be float, double, "
               "a 32- or 64-bit integer, or a complex of float or double.";
      if (b.type->complex && (has(r.from, r.axes, is_max_min) || has(r.to, r.axes, is_max_min)))
        return "dsp::redistribute: Partial<Max> and Partial<Min> need ordered values; complex values can only be "
               "summed (Partial<Sum>).";
    }
  }
  return "";
}

/// What is wrong with the blocks, or "": each must be this rank's block of
/// the input layout, of one element type per block.
template <class G>
std::string block_error(const Request& r, const G& g) {
  using traits = dsp::detail::group_traits<G>;
  const auto shape = traits::shape(g);
  const auto coords = traits::coords(g);
  const int rank = traits::world(g).rank();
  for (std::size_t k = 0; k < r.in.size(); ++k) {
    const std::vector<std::size_t>& e = global_of(r, k);
    const auto want =
        dsp::detail::nested_counts(e, std::span<const long>(r.from.data(), r.axes), std::span<const int>(shape),
                                   std::span<const int>(coords), r.in_sizes());
    const std::vector<std::size_t> w(want.begin(), want.begin() + e.size());
    const Block& b = r.in[k];
    const std::string which = r.in.size() > 1 ? "block " + std::to_string(k) + " of the batch" : "the block";
    const std::string who = r.name + " (rank " + std::to_string(rank) + "): " + which + ": ";
    if (!b.error.empty()) return who + b.error;
    if (b.shape != w)
      return who + "its shape is " + shape_text(b.shape) + ", but this rank's block of global shape " + shape_text(e) +
             " under the input layout is " + shape_text(w);
  }
  return "";
}

/// Output block k's shape: this rank's block of the target layout.
template <class G>
std::vector<std::size_t> out_shape(const Request& r, const G& g, std::size_t k = 0) {
  using traits = dsp::detail::group_traits<G>;
  const auto shape = traits::shape(g);
  const auto coords = traits::coords(g);
  const std::vector<std::size_t>& e = global_of(r, k);
  const auto c = dsp::detail::nested_counts(e, std::span<const long>(r.to.data(), r.axes), std::span<const int>(shape),
                                            std::span<const int>(coords), r.out_sizes());
  return std::vector<std::size_t>(c.begin(), c.begin() + e.size());
}

/// The plan steps of a request, and its op: on a plain communicator the
/// paper's primitives are those calls, as in C++.
struct Planned {
  std::vector<MeshStep> own;                      // a primitive's plan (or none, on error)
  const std::vector<MeshStep>* cached = nullptr;  // or the planner's, cached
  const std::vector<MeshStep>& steps() const { return cached ? *cached : own; }
  Op op = Op::redistribute;
  long dst = 0;
  long arg = 0;
  bool dst_codes = true;
};

Planned plan_request(const Request& r, bool mesh, bool split_phase) {
  Planned p;
  const long f = r.from[0], t = r.to[0];
  if (!mesh && f >= 0 && (t >= 0 || t == kReplicated)) {
    const auto plan =
        t >= 0 ? dsp::detail::switch_plan(std::size_t(f), std::size_t(t)) : dsp::detail::gather_plan(std::size_t(f));
    p.own.assign(plan.steps.begin(), plan.steps.begin() + plan.size);
    p.op =
        t >= 0 ? (split_phase ? Op::start_switch : Op::dynamic_switch) : (split_phase ? Op::start_gather : Op::gather);
    p.dst = t, p.dst_codes = false;
    if (r.in.size() > 1 && !split_phase && t >= 0) p.op = Op::batch_switch, p.arg = long(r.in.size());
    return p;
  }
  // The output's Blocks is a code of its own in the plan (C++ redistribute_plan::to), but where both sides
  // hold the same Blocks on one axis with equal sizes, it stays (kept_plan).
  Codes to = r.to;
  bool kept = false;
  for (std::size_t a = 0; a < r.axes; ++a)
    kept = kept || (dsp::detail::is_blocks_code(r.from[a]) && r.from[a] == r.to[a] && r.src_sizes == r.dst_sizes);
  if (!kept) to = dsp::detail::plan_codes(to);
  p.cached = &plan_of(r.from, to, r.axes, r.global.size());
  p.op = split_phase ? Op::start_redistribute : Op::redistribute;
  p.arg = long(dsp::switch_algorithm());
  return p;
}

bool plan_reduces(const std::vector<MeshStep>& s) {
  for (const MeshStep& st : s)
    if (st.kind == dsp::StepKind::all_reduce || st.kind == dsp::StepKind::reduce_scatter) return true;
  return false;
}

/// The facts of a request (storage for what CallFacts points to).
struct Facts {
  dsp::detail::CallFacts f;
  std::array<dsp::detail::TensorFacts, kMaxBatch> t{};
  std::array<std::size_t, kMaxRank> global{};
  std::array<std::array<std::size_t, kMaxRank>, kMaxBatch> globals{};  // a batch of different extents: each block's
  dsp::detail::BatchTypeText types;  // a batch's type names (CallFacts::type_name points here)
  Planned plan;
  std::string error;
};

/// The outputs of request `r` on this rank (`rank`): arrays like its
/// inputs, output k of shape `shape(k)`, into `out`. "" or why one could not
/// be made (out of memory, an array type that makes them elsewhere), and then
/// none: a call with an agreement check makes that this rank's error (raised
/// here it would leave the other ranks waiting in the collective).
template <class Shape>
std::string make_outputs(const Request& r, int rank, Shape&& shape, std::vector<Block>& out) {
  out.clear();
  std::string why;
  try {
    for (std::size_t k = 0; k < r.in.size() && why.empty(); ++k) {
      out.push_back(block_of(empty_like(r.in[k], shape(k)), r.want));
      if (!out.back().error.empty()) why = r.name + ": the output: " + out.back().error;
    }
  } catch (const std::exception& e) {
    why = r.name + " (rank " + std::to_string(rank) + "): the output could not be made: " + e.what();
  }
  if (!why.empty()) out.clear();
  return why;
}

/// The facts of request `r` on group `g` (its local checks first: a failure
/// goes into the facts, for the agreement check) and its outputs.
template <class G>
std::vector<Block> fill_facts(Facts& x, const Request& r, const G& g, bool split_phase) {
  using traits = dsp::detail::group_traits<G>;
  constexpr bool mesh = dsp::is_mesh_v<G>;
  dsp::detail::CallFacts& f = x.f;
  std::copy_n(r.global.begin(), std::min(r.global.size(), kMaxRank), x.global.begin());
  x.error = r.error;
  if (x.error.empty()) x.error = layout_error(r, mesh);
  if (x.error.empty()) x.error = block_error(r, g);
  std::vector<Block> out;  // none when the call already failed: the agreement check raises first
  if (x.error.empty())
    x.error = make_outputs(
        r, traits::world(g).rank(), [&](std::size_t k) { return out_shape(r, g, k); }, out);
  if (x.error.empty()) x.plan = plan_request(r, mesh, split_phase);
  else x.plan.op = split_phase ? Op::start_redistribute : Op::redistribute;
  if (x.error.empty() && r.wire != dsp::Wire::exact && plan_reduces(x.plan.steps()))
    x.error =
        "dsp::redistribute(x, wire): the plan has a reduction (a Partial placement); a reduction's sum cannot "
        "travel on a low-precision wire (its error would grow with the number of ranks), so reduce first with "
        "an exact redistribute.";
  f.op = x.plan.op, f.dst = x.plan.dst, f.arg = x.plan.arg, f.wire = r.wire;
  f.dst_codes = x.plan.dst_codes ? r.to.data() : nullptr;
  f.n = std::clamp<std::size_t>(r.in.size(), 1, kMaxBatch);  // past kMaxBatch: r.error says so
  f.tensor_rank = std::min(r.global.size(), kMaxRank);
  f.rank = traits::world(g).rank();
  dsp::detail::BatchTypeText& types = x.types;
  std::uint64_t bytes = 0;
  for (const Block& b : r.in)
    if (b.type) types.add(b.type->py, b.type->size), bytes += b.type->size;  // numpy's names in messages
  const bool batch = r.in.size() > 1;
  const TypeInfo* t0 = r.in.empty() ? nullptr : r.in[0].type;
  f.type_hash = batch ? types.hash : t0 ? t0->hash : 0;
  f.type_name = batch ? types.names : t0 ? t0->py : "";
  f.elem_bytes = bytes;
  f.src_codes = r.from.data();
  f.mesh_axes = mesh ? std::uint32_t(r.axes) : 0;
  const auto shape = traits::shape(g);
  for (std::size_t a = 0; a < shape.size(); ++a) f.mesh_shape[a] = shape[a];
  for (std::size_t k = 0; k < f.n; ++k) x.t[k].extents = x.t[k].out_extents = x.global.data();
  for (std::size_t k = 0; k < r.in.size() && k < kMaxBatch; ++k) {
    dsp::detail::TensorFacts& t = x.t[k];
    const Block& b = r.in[k];
    const std::size_t size = b.type ? b.type->size : 0;
    std::size_t n_in = 1, n_out = 1;
    for (std::size_t e : b.shape) n_in *= e;
    t.in = b.data;
    t.elem_bytes = size;
    if (!r.globals.empty() && r.globals[k].size() == r.global.size()) {  // else globals_error says so
      std::copy_n(r.globals[k].begin(), std::min(r.global.size(), kMaxRank), x.globals[k].begin());
      t.extents = t.out_extents = x.globals[k].data();
    } else {
      t.extents = t.out_extents = x.global.data();
    }
    t.kind = b.type ? b.type->kind : ElemKind::other;
    if (b.type && r.wire != dsp::Wire::exact)
      t.wire = std::is_same_v<SpaceOf<G>, Space> ? b.type->wire : b.type->wire_device;
    t.mesh_shape = f.mesh_shape;
    const auto* in = static_cast<const unsigned char*>(b.data);
    t.in_range = {in, in + n_in * size};
    if (k < out.size()) {
      for (std::size_t e : out[k].shape) n_out *= e;
      t.out = out[k].data;
      const auto* o = static_cast<const unsigned char*>(out[k].data);
      t.out_range = {o, o + n_out * size};
    }
  }
  f.t = x.t.data();
  const int rt = t0 ? t0->rtype : -1;
  f.rtype = static_cast<dsp::ReduceType>(rt < 0 ? 0 : rt);
  f.steps = x.plan.steps().data(), f.n_steps = x.plan.steps().size();
  f.from = r.from.data(), f.axes = r.axes;
  f.error = x.error.empty() ? nullptr : x.error.c_str();
  f.recut = dsp::detail::recut_hooks<SpaceOf<G>>();  // a plan with Zigzag on a mesh axis has recut steps
  f.sizes = dsp::detail::CutSizes{r.in_sizes().in, r.out_sizes().in};
  if (!r.src_starts.empty() || !r.dst_starts.empty()) {
    std::uint64_t h = r.src_starts.empty() ? 0 : dsp::detail::block_sizes_hash(r.src_sizes);
    if (!r.dst_starts.empty()) h ^= dsp::detail::block_sizes_hash(r.dst_sizes) * 31;
    for (std::size_t k = 0; k < f.n; ++k) x.t[k].sizes_hash = h;
  }
  return out;
}

py::object result_of(const std::vector<Block>& out, bool list) {
  if (!list) return out.at(0).array;
  py::list l;
  for (const Block& b : out) l.append(b.array);
  return l;
}

/// A local split (Replicated -> Sharded<d> on a communicator): no
/// communication and no agreement check, as in C++.
template <class C>
py::object run_split(Request& r, const C& c, bool list) {
  r.error = layout_error(r, false);
  if (r.error.empty()) r.error = block_error(r, c);
  if (!r.error.empty()) throw dsp::InvalidArgument(r.error);
  std::vector<Block> out;
  if (std::string why = make_outputs(
          r, c.rank(), [&](std::size_t k) { return out_shape(r, c, k); }, out);
      !why.empty())
    throw dsp::InvalidArgument(why);
  SettleOnThrow settle(r.want.dev);
  dsp::detail::PortOf<C, SpaceOf<C>> port(c);
  for (std::size_t k = 0; k < r.in.size(); ++k)
    dsp::detail::execute_split<SpaceOf<C>>(port, r.global, std::size_t(r.to[0]), r.in[k].data, out[k].data,
                                           r.in[k].type->size);
  order_after(r.want.dev, r.in, out);
  settle.disarm();
  return result_of(out, list);
}

/// Whether a request on a plain communicator is a local split.
bool is_split(const Request& r, bool mesh) {
  return !mesh && r.given_axes && r.from[0] == kReplicated && r.to[0] >= 0 && r.wire == dsp::Wire::exact &&
         r.to[0] < long(r.global.size());
}

py::object run(Request& r, py::handle group, bool list) {
  return with_engine_group(group, [&](const auto& g) -> py::object {
    using G = std::remove_cvref_t<decltype(g)>;
    constexpr bool mesh = dsp::is_mesh_v<G>;
    if constexpr (!mesh)
      if (is_split(r, mesh)) return run_split(r, g, list);
    Facts x;
    std::vector<Block> out = fill_facts(x, r, g, false);
    SettleOnThrow settle(r.want.dev);
    dsp::detail::GroupPorts<G, SpaceOf<G>> ports(g);
    {
      py::gil_scoped_release release;
      dsp::detail::run_call<SpaceOf<G>>(ports.group(), x.f);
    }
    order_after(r.want.dev, r.in, out);
    settle.disarm();
    return result_of(out, list);
  });
}

// ---------------------------------------------------------------- Zigzag and Blocks

void set_type(dsp::detail::Signature& s, const TypeInfo& t);  // below, with reshard's

/// Whether a request names dsp.Zigzag or dsp.Blocks on either side.
bool involves_cut(const Request& r) {
  for (std::size_t a = 0; a < r.axes; ++a)
    if (dsp::detail::is_cut_code(r.from[a]) || dsp::detail::is_cut_code(r.to[a])) return true;
  return false;
}

/// One side of a redistribution with a cut (C++ cut_side): the dim and how
/// it is cut over n ranks; `starts` owns a Blocks side's prefix offsets.
struct PySide {
  dsp::detail::CutSide side;
  std::vector<std::size_t> starts;
};

/// The side of placement `code` (Blocks: `sizes`, checked) for a tensor of
/// `global` extents on n ranks; returns why not ("" if fine).
std::string make_side(long code, const std::vector<std::size_t>& sizes, const std::vector<std::size_t>& global,
                      std::size_t n, PySide& out) {
  using dsp::detail::Cut;
  const std::size_t rank = global.size();
  if (code >= 0) {
    out.side = {std::size_t(code), Cut{Cut::Kind::even, global[std::size_t(code)], n, nullptr}};
    return "";
  }
  if (!dsp::detail::is_cut_code(code)) {
    out.side = {0, Cut{Cut::Kind::whole, global[0], n, nullptr}};
    return "";
  }
  const bool blocks = code <= dsp::detail::kBlocks;
  const std::size_t d = std::size_t(blocks ? dsp::detail::kBlocks - code : dsp::detail::kZigzag - code);
  if (d >= rank)
    return std::string("dsp::DistTensor: a ") + (blocks ? "Blocks<D>" : "Zigzag<D>") +
           " in the layout names a dim D that is not less than the tensor's rank. (Here: a tensor of " +
           std::to_string(rank) + " dims.)";
  if (!blocks) {
    out.side = {d, Cut{Cut::Kind::zigzag, global[d], n, nullptr}};
    return "";
  }
  if (std::string why = dsp::detail::block_sizes_error(sizes, global[d], n); !why.empty()) return "dsp.Blocks: " + why;
  out.starts.assign(1, 0);
  for (std::size_t v : sizes) out.starts.push_back(out.starts.back() + v);
  out.side = {d, Cut{Cut::Kind::blocks, global[d], n, nullptr}};
  return "";
}

/// This rank's block shape under a side.
std::vector<std::size_t> side_shape(const PySide& s, const std::vector<std::size_t>& global, std::size_t me) {
  std::vector<std::size_t> shape = global;
  dsp::detail::Cut c = s.side.cut;
  c.starts = s.starts.empty() ? nullptr : s.starts.data();
  if (c.kind != dsp::detail::Cut::Kind::whole) shape[s.side.dim] = c.count(me);
  return shape;
}

/// A request's dsp.Blocks sizes, as the mesh engine takes them (a mesh
/// axis's, or a communicator's on its one axis), into r: checked (r.error
/// says what is wrong) where the layouts themselves are sound.
void set_sizes(Request& r, py::handle group, const std::vector<std::size_t>& src_sizes,
               const std::vector<std::size_t>& dst_sizes) {
  r.src_sizes = src_sizes, r.dst_sizes = dst_sizes;
  if (!r.given_axes || !mesh_cut_error(r.from, r.axes).empty() || !mesh_cut_error(r.to, r.axes).empty())
    return;  // layout_error says why
  with_group(group, [&](const auto& g) {
    const auto shape = dsp::detail::group_traits<std::remove_cvref_t<decltype(g)>>::shape(g);
    for (const auto& [codes, sizes, starts, what] : {std::tuple{&r.from, &r.src_sizes, &r.src_starts, "src"},
                                                     std::tuple{&r.to, &r.dst_sizes, &r.dst_starts, "dst"}})
      if (std::string why = mesh_starts(*codes, r.axes, r.global, std::span<const int>(shape), *sizes, what, *starts);
          r.error.empty() && !why.empty())
        r.error = why;
  });
}

/// f() (request r's call), a MismatchError naming this rank's Blocks sizes
/// (the agreement compares a hash).
template <class F>
auto naming_sizes(const Request& r, py::handle group, F&& f) -> decltype(f()) {
  if (r.src_starts.empty() && r.dst_starts.empty()) return f();
  try {
    return f();
  } catch (const dsp::MismatchError& e) {
    std::string mine;
    if (!r.src_starts.empty())
      mine += " src Blocks sizes " + dsp::detail::text(std::span<const std::size_t>(r.src_sizes));
    if (!r.dst_starts.empty())
      mine += std::string(mine.empty() ? "" : ",") + " dst Blocks sizes " +
              dsp::detail::text(std::span<const std::size_t>(r.dst_sizes));
    const int rank = with_group(group, [](const auto& g) {
      return dsp::detail::group_traits<std::remove_cvref_t<decltype(g)>>::world(g).rank();
    });
    throw dsp::MismatchError(std::string(e.what()) + " (rank " + std::to_string(rank) + ":" + mine + ")");
  }
}

/// On a mesh, why a batch of different extents cannot share its layouts'
/// Blocks sizes (they cut the dim they name in every tensor: its extent must
/// be shape 0's), or "".
std::string mesh_blocks_extents_error(const Request& r) {
  for (std::size_t k = 1; k < r.globals.size(); ++k)
    for (const Codes* c : {&r.from, &r.to})
      for (std::size_t a = 0; a < r.axes; ++a) {
        if (!dsp::detail::is_blocks_code((*c)[a])) continue;
        const std::size_t d = std::size_t(dsp::detail::code_dim((*c)[a]));
        if (d < r.global.size() && r.globals[k][d] != r.global[d])
          return r.name + ": shape " + std::to_string(k) + " of global_shape, " + shape_text(r.globals[k]) +
                 ", has another extent along dim " + std::to_string(d) + " than shape 0, " + shape_text(r.global) +
                 ", which dsp.Blocks cuts; on a mesh, the tensors of a batch share their Blocks sizes";
      }
  return "";
}

/// A redistribution on a plain communicator where a side is dsp.Zigzag or
/// dsp.Blocks, or of a batch of different extents (C++ recut_into and
/// recut_batch_into): the checks of the C++ front end with its sentences,
/// then the engine's run_recut: one agreement, one exchange. On a mesh, the
/// engine's plan (its steps are exchanges between cuts); with a Partial
/// side, every rank raises.
py::object run_cut(Request& r, py::handle group, bool list, const std::vector<std::size_t>& src_sizes,
                   const std::vector<std::size_t>& dst_sizes) {
  if (!py::isinstance<PyComm>(group)) {  // a mesh: Zigzag on an axis, or a batch of different extents, runs
                                         // as any mesh plan (recut steps)
    std::string why = globals_error(r, list);
    if (why.empty()) why = mesh_blocks_extents_error(r);
    if (!why.empty()) {
      if (r.error.empty()) r.error = why;
      r.globals.clear();
    }
    set_sizes(r, group, src_sizes, dst_sizes);
    return naming_sizes(r, group, [&] { return run(r, group, list); });
  }
  const PyComm& pc = group.cast<PyComm&>();
  const Comm& comm = pc.comm;
  const std::size_t n = std::size_t(comm.size()), me = std::size_t(comm.rank());
  std::string err = r.error;
  auto fail = [&](const std::string& why) {
    if (err.empty()) err = why;
  };
  const std::size_t rank = r.global.size();
  if (!r.given_axes)
    fail(
        "dsp::redistribute<To>: on a communicator, To is one placement (from Python: src and dst are one placement "
        "each, not tuples).");
  if (rank == 0 || rank > kMaxRank)
    fail(r.name + ": a tensor has 1 to " + std::to_string(kMaxRank) + " dims; global_shape has " +
         std::to_string(rank));
  auto partial = [](long c) { return c <= kPartialSum && c >= kPartialMin; };  // cut codes lie below
  if (partial(r.from[0]) || partial(r.to[0]))
    fail(
        "dsp::redistribute: between Partial and Zigzag or Blocks there is no one exchange; reduce first "
        "(redistribute to Replicated or Sharded<D>), then move to Zigzag or Blocks.");
  if (err.empty() && (r.from[0] >= long(rank) || r.to[0] >= long(rank)))
    fail("dsp::DistTensor: a Sharded<D> in the layout names a dim D that is not less than the tensor's rank.");
  // A batch of different extents: one global shape per block, each of the same rank.
  if (err.empty()) fail(globals_error(r, list));
  if (!err.empty()) r.globals.clear();
  auto global_of = [&](std::size_t k) -> const std::vector<std::size_t>& { return ::global_of(r, k); };
  // Each block's sides (the tensors' extents may differ) and the blocks' shapes under the input layout.
  std::vector<PySide> from(std::max<std::size_t>(1, r.in.size())), to(from.size());
  for (std::size_t k = 0; k < r.in.size() && err.empty(); ++k) {
    fail(make_side(r.from[0], src_sizes, global_of(k), n, from[k]));
    if (err.empty()) fail(make_side(r.to[0], dst_sizes, global_of(k), n, to[k]));
  }
  std::vector<std::vector<std::size_t>> out_shapes;
  if (err.empty()) {
    for (std::size_t k = 0; k < r.in.size() && err.empty(); ++k) {
      const Block& b = r.in[k];
      const std::vector<std::size_t> in_shape = side_shape(from[k], global_of(k), me);
      out_shapes.push_back(side_shape(to[k], global_of(k), me));
      const std::string who = r.name + " (rank " + std::to_string(me) +
                              "): " + (r.in.size() > 1 ? "block " + std::to_string(k) + " of the batch" : "the block") +
                              ": ";
      if (!b.error.empty()) fail(who + b.error);
      else if (b.shape != in_shape)
        fail(who + "its shape is " + shape_text(b.shape) + ", but this rank's block of global shape " +
             shape_text(global_of(k)) + " under the input layout is " + shape_text(in_shape));
    }
  }
  std::vector<Block> out;
  if (err.empty())
    fail(make_outputs(
        r, int(me), [&](std::size_t k) { return out_shapes[k]; }, out));
  // The signature: element types, extents, layouts, the Blocks sizes (hashed), the call site.
  dsp::detail::Signature sig;
  sig.op = static_cast<std::uint32_t>(Op::redistribute);
  dsp::detail::BatchTypeText types;
  for (const Block& b : r.in)
    if (b.type) types.add(b.type->py, b.type->size);
  if (r.in.size() == 1 && r.in[0].type) {
    set_type(sig, *r.in[0].type);
  } else {
    sig.type_hash = types.hash;
    for (const Block& b : r.in) sig.elem_bytes += b.type ? b.type->size : 0;
    std::memset(sig.type, 0, sizeof sig.type);
    std::memcpy(sig.type, types.names, std::min(sizeof sig.type - 1, std::strlen(types.names)));
  }
  dsp::detail::set_extents(sig, std::span<const std::size_t>(r.global.data(), std::min(rank, kMaxRank)));
  sig.src_layout[0] = r.from[0], sig.dst_layout[0] = r.to[0];
  dsp::detail::set_site(sig, std::source_location::current());
  auto sizes_hash = [](const std::vector<std::size_t>& v) { return v.empty() ? 0 : dsp::detail::block_sizes_hash(v); };
  const std::uint64_t blocks_hash = (r.from[0] <= dsp::detail::kBlocks ? sizes_hash(src_sizes) : 0) ^
                                    (r.to[0] <= dsp::detail::kBlocks ? sizes_hash(dst_sizes) * 31 : 0);
  sig.arg = static_cast<std::int64_t>(blocks_hash);
  if (r.in.size() > 1 && err.empty()) {  // a batch: every tensor's extents, hashed (ranks whose batches differ raise)
    dsp::detail::ShapeHash h;
    for (std::size_t k = 0; k < r.in.size(); ++k) h.add(std::span<const std::size_t>(global_of(k)));
    sig.shapes = h.h;
  }
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(dsp::detail::Status::bad_argument);
  // One item per block (one empty item where the call already failed: the agreement raises first).
  std::vector<dsp::detail::RecutArgs> items(std::max<std::size_t>(1, err.empty() ? r.in.size() : 1));
  for (std::size_t k = 0; k < items.size(); ++k) {
    PySide& f = from[err.empty() ? k : 0];
    PySide& t = to[err.empty() ? k : 0];
    f.side.cut.starts = f.starts.empty() ? nullptr : f.starts.data();
    t.side.cut.starts = t.starts.empty() ? nullptr : t.starts.data();
    items[k].global = std::span<const std::size_t>(err.empty() ? global_of(k) : r.global);
    items[k].from = f.side, items[k].to = t.side;
    items[k].wire = r.wire;  // the agreement compares it, a failed call's too
    if (err.empty()) {
      items[k].src = r.in[k].data, items[k].dst = out[k].data, items[k].elem_bytes = r.in[k].type->size;
      items[k].kind = r.in[k].type->kind;
      if (r.wire != dsp::Wire::exact) items[k].wire_kernels = pc.dev ? r.in[k].type->wire_device : r.in[k].type->wire;
    }
  }
  SettleOnThrow settle(r.want.dev);
  auto exchange = [&](const auto& c) {  // on MPI, or on a device dsp.Comm's NCCL communicator
    using C = std::remove_cvref_t<decltype(c)>;
    dsp::detail::PortOf<C, SpaceOf<C>> port(c);
    py::gil_scoped_release release;
    dsp::detail::run_recut<SpaceOf<C>>(port, sig, std::move(err), std::span<const dsp::detail::RecutArgs>(items));
  };
  try {
#if DSP_PYTHON_CUDA
    if (pc.dev) exchange(*pc.dev->comm);
    else
#endif
      exchange(comm);
  } catch (const dsp::MismatchError& e) {
    if (blocks_hash == 0) throw;
    std::string mine;  // this rank's sizes: the agreement compares a hash
    if (r.from[0] <= dsp::detail::kBlocks)
      mine += " src Blocks sizes " + dsp::detail::text(std::span<const std::size_t>(src_sizes));
    if (r.to[0] <= dsp::detail::kBlocks)
      mine += std::string(mine.empty() ? "" : ",") + " dst Blocks sizes " +
              dsp::detail::text(std::span<const std::size_t>(dst_sizes));
    throw dsp::MismatchError(std::string(e.what()) + " (rank " + std::to_string(me) + ":" + mine + ")");
  }
  order_after(r.want.dev, r.in, out);
  settle.disarm();
  return result_of(out, list);
}

// ---------------------------------------------------------------- split-phase

/// A split-phase flight in either memory space, behind one interface.
struct AnyFlight {
  virtual ~AnyFlight() = default;
  virtual bool test() = 0;
  virtual void finish() = 0;  // completes the messages, then the status agreement
};
template <class M>
struct FlightIn final : AnyFlight {
  explicit FlightIn(std::unique_ptr<dsp::detail::Flight<M>> x) : f(std::move(x)) {}
  bool test() override { return f->test(); }
  void finish() override {
    f->complete([](int, std::size_t, std::size_t) {}, [] {});
    f->settle();
  }
  std::unique_ptr<dsp::detail::Flight<M>> f;
};

/// A split-phase call in flight: test(), wait(), result().
class Handle {
 public:
  Handle(std::unique_ptr<AnyFlight> f, std::vector<Block> in, std::vector<Block> out, bool list,
         std::shared_ptr<DeviceComm> dev)
      : dev_(std::move(dev)), flight_(std::move(f)), in_(std::move(in)), out_(std::move(out)), list_(list) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (!flight_) return;
    if (!Kokkos::is_initialized()) {  // collected at exit, after dsp finalized Kokkos: nothing can complete
      if (!done_) std::fprintf(stderr, "dsp: a split-phase handle was never waited for (collected at exit)\n");
      (void)flight_.release();  // its buffers went with Kokkos; do not touch them
      return;
    }
    if (done_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dsp: a split-phase handle dropped before wait() failed: %s\n", e.what());
    }
  }
  bool test() {
    if (failure_) std::rethrow_exception(failure_);
    return done_ || !flight_ || flight_->test();
  }
  void wait() {
    if (failure_) std::rethrow_exception(failure_);
    if (done_ || !flight_) return;
    DeviceScope scope(dev_.get());
    SettleOnThrow settle(dev_.get());  // before in_ and out_ can go
    try {
      {
        py::gil_scoped_release release;
        flight_->finish();
      }
      done_ = true;
      flight_.reset();  // its buffers (Kokkos views) now, not when Python collects the handle: maybe after exit
      order_after(dev_.get(), in_, out_);
      settle.disarm();
    } catch (...) {
      failure_ = std::current_exception();
      done_ = true;
      throw;
    }
  }
  py::object result() {
    wait();
    return result_of(out_, list_);
  }

 private:
  std::shared_ptr<DeviceComm> dev_;  // a CUDA group's (first: it outlives the flight's ports on its stream)
  std::unique_ptr<AnyFlight> flight_;
  std::vector<Block> in_, out_;  // held until the call completes
  bool list_ = false, done_ = false;
  std::exception_ptr failure_;
};

std::unique_ptr<Handle> start(Request& r, py::handle group, bool list) {
  return with_engine_group(group, [&](const auto& g) -> std::unique_ptr<Handle> {
    using G = std::remove_cvref_t<decltype(g)>;
    using M = SpaceOf<G>;
    Facts x;
    std::vector<Block> out = fill_facts(x, r, g, true);
    SettleOnThrow settle(r.want.dev);  // the Handle takes over once made
    auto ports = std::make_shared<dsp::detail::GroupPorts<G, M>>(g);
    const auto& og = ports->group();
    std::unique_ptr<dsp::detail::Flight<M>> f;
    {
      py::gil_scoped_release release;
      f = dsp::detail::start_call<M>(og, std::move(ports), x.f);
    }
    auto h = std::make_unique<Handle>(std::make_unique<FlightIn<M>>(std::move(f)), std::move(r.in), std::move(out),
                                      list, device_owner(group));
    settle.disarm();
    return h;
  });
}

// ---------------------------------------------------------------- arguments

std::size_t group_axes(py::handle g) {
  if (py::isinstance<PyMesh>(g)) return std::visit([](const auto& m) { return m.axes; }, g.cast<PyMesh&>().mesh);
  return 1;
}

/// A request from Python's arguments: x a block or a list of blocks; src and
/// dst lists of placement codes (one per axis, as the package makes them).
Request request(py::handle x, const std::vector<std::size_t>& global, const std::vector<long>& src,
                const std::vector<long>& dst, py::handle group, int wire, std::string name, bool& list) {
  Request r;
  r.name = std::move(name);
  r.global = global;
  r.wire = static_cast<dsp::Wire>(wire);
  r.axes = group_axes(group);
  r.want = Want{device_of(group)};
  r.given_axes = src.size() == r.axes && dst.size() == r.axes;
  for (std::size_t a = 0; a < r.axes; ++a) {
    r.from[a] = a < src.size() ? src[a] : kReplicated;
    r.to[a] = a < dst.size() ? dst[a] : kReplicated;
  }
  list = py::isinstance<py::list>(x) || py::isinstance<py::tuple>(x);
  // A block dsp cannot take is this rank's fault, found before the collective:
  // recorded, so that every rank raises at the agreement check.
  auto take = [&](py::handle b, std::size_t k) {
    try {
      r.in.push_back(block_of(b, r.want));
    } catch (const std::exception& e) {  // dsp::InvalidArgument, or a Python error from __dlpack__
      if (r.error.empty())
        r.error = r.name + ": " + (list ? "block " + std::to_string(k) + " of the batch: " : "") + e.what();
    }
  };
  if (list) {
    std::size_t k = 0;
    for (py::handle b : x) take(b, k++);
    if (r.error.empty() && (r.in.empty() || r.in.size() > kMaxBatch))
      r.error =
          r.name + ": a batch has 1 to " + std::to_string(kMaxBatch) + " blocks, not " + std::to_string(r.in.size());
  } else {
    take(x, 0);
  }
  return r;
}

void check_wire(int wire) {
  if (wire < 0 || wire > int(dsp::Wire::fp32)) throw dsp::InvalidArgument("dsp: unknown wire code");
}

// ---------------------------------------------------------------- reshard and hdf5

/// A signature's element type as C++ sets it, named as numpy names it (the
/// agreement check's messages quote it).
void set_type(dsp::detail::Signature& s, const TypeInfo& t) {
  t.set_type(s);
  std::memset(s.type, 0, sizeof s.type);
  std::memcpy(s.type, t.py, std::min(std::strlen(t.py), sizeof s.type - 1));
}

/// An element type named by a dtype (numpy's, or torch's), and how to make
/// an array of it.
struct DType {
  const TypeInfo* type = nullptr;
  py::object torch;  // the torch dtype, or null: numpy
  py::dtype numpy;
};

DType dtype_of(py::handle d) {
  DType r;
  if (const TorchTypes& tt = torch_types(); tt.tensor)
    for (const auto& [t, info] : tt.dtypes)
      if (t == d.ptr()) {
        r.type = info;
        r.torch = py::reinterpret_borrow<py::object>(d);
        return r;
      }
  try {
    r.numpy = py::dtype::from_args(py::reinterpret_borrow<py::object>(d));
  } catch (const py::error_already_set&) {
    throw dsp::InvalidArgument("dtype is a numpy or torch dtype, not " + std::string(py::repr(d)));
  }
  r.type = r.numpy.byteorder() == '>' ? nullptr : type_of(r.numpy.kind(), std::size_t(r.numpy.itemsize()));
  if (!r.type) throw dsp::InvalidArgument("the dtype " + std::string(py::str(d)) + " is not one dsp moves");
  return r;
}

/// A new array of `shape` and element type `d`.
py::object new_array(const DType& d, const std::vector<std::size_t>& shape) {
  if (!d.torch) return numpy_output(d.numpy, shape);
  py::tuple s(shape.size());
  for (std::size_t k = 0; k < shape.size(); ++k) s[k] = py::int_(shape[k]);
  return py::module_::import("torch").attr("empty")(s, py::arg("dtype") = d.torch);
}

// The C++ static_asserts' sentences for a Partial layout.
constexpr const char* kReshardPartial =
    "dsp::reshard: a Partial placement holds addends, not the tensor: reduce it first (dsp::redistribute to "
    "Replicated or Sharded<D>), then reshard.";
constexpr const char* kSavePartial =
    "dsp::hdf5::save: a Partial placement holds addends, not the tensor: reduce it first (dsp::redistribute to "
    "Replicated or Sharded<D>), then save.";
constexpr const char* kLoadPartial =
    "dsp::hdf5::load: a Partial placement holds addends, not the tensor: load into Replicated or Sharded<D>.";

/// This rank's box of a tensor under a placement on a group, and the group.
struct GroupBox {
  std::array<std::size_t, kMaxRank> off{}, cnt{};
  dsp::Split split;                // where a block with a Zigzag on a mesh axis jumps (DistTensor::block_split)
  std::vector<std::size_t> shape;  // cnt, as the block's shape
  std::uint64_t group_size = 0;
  std::uint32_t mesh_axes = 0;  // 0: a communicator
  std::array<int, kMaxAxes> mesh_shape{};
};

/// The box of a tensor of extents `global` under `codes` (one per axis of
/// group `g`) into `b`; "" or the sentence that says what is wrong (`what`
/// names the layout argument; `partial`, the sentence refusing a Partial
/// placement, or nullptr: Partial taken, cutting nothing).
template <class G>
std::string group_box(const G& g, const std::vector<std::size_t>& global, const std::vector<long>& codes,
                      const std::string& what, GroupBox& b, const char* partial,
                      const std::vector<std::size_t>& sizes = {}) {
  using traits = dsp::detail::group_traits<G>;
  constexpr bool mesh = dsp::is_mesh_v<G>;
  const std::size_t axes = traits::axes;
  if (global.empty() || global.size() > kMaxRank)
    return "a tensor has 1 to " + std::to_string(kMaxRank) + " dims; global_shape has " + std::to_string(global.size());
  if (codes.size() != axes)
    return what + " has " + std::to_string(codes.size()) + " placements, but its group takes " + std::to_string(axes) +
           (mesh ? " (one per mesh axis)" : " (a communicator takes one placement)");
  Codes cs{};
  for (std::size_t a = 0; a < codes.size(); ++a) {
    const long c = codes[a];
    cs[a] = c;
    if (dsp::detail::code_dim(c) >= long(global.size()))
      return "dsp::DistTensor: a Sharded<D> in the layout names a dim D that is not less than the tensor's rank. "
             "(Here: the " +
             what + " argument, on a tensor of " + std::to_string(global.size()) + " dims.)";
    if (is_partial(c) && partial) return std::string(partial) + " (Here: the " + what + " argument.)";
    if (!mesh && dsp::detail::is_cut_code(c) && !dsp::detail::is_zigzag_code(c))
      return "a dsp.Blocks layout is passed as dsp.Blocks(d, sizes) itself, not in a tuple (Here: the " + what +
             " argument.)";
  }
  if (std::string why = mesh_cut_error(cs, axes); mesh && !why.empty())
    return why + " (Here: the " + what + " argument.)";
  std::array<std::size_t, kMaxRank> e{};
  e.fill(1);
  std::copy(global.begin(), global.end(), e.begin());
  const auto shape = traits::shape(g);
  const auto coords = traits::coords(g);
  std::vector<std::size_t> starts;  // a mesh's dsp.Blocks
  if (std::string why = mesh_starts(cs, axes, global, std::span<const int>(shape), sizes, what, starts); !why.empty())
    return why;
  const auto block = dsp::detail::nested_block(e, std::span<const long>(codes), std::span<const int>(shape),
                                               std::span<const int>(coords),
                                               dsp::detail::CutSizes{starts.empty() ? nullptr : starts.data()});
  const auto& box = block.box;
  b.off = box.offset, b.cnt = box.count, b.split = block.split;
  b.shape.assign(box.count.begin(), box.count.begin() + std::ptrdiff_t(global.size()));
  b.group_size = std::uint64_t(traits::world(g).size());
  b.mesh_axes = mesh ? std::uint32_t(axes) : 0;
  for (std::size_t a = 0; a < axes; ++a) b.mesh_shape[a] = shape[a];
  return "";
}

/// The box of this rank's block of a tensor of extents `global` under a cut
/// layout (`codes`: dsp.Zigzag or dsp.Blocks, `sizes` a Blocks' sizes) on
/// group `g` (a dsp.Comm), into `b`; a Zigzag block's box spans its two
/// chunks, and `split`, `first` and `second` say where the second starts (as
/// C++ reshard and dsp::hdf5 take it). "" or what is wrong.
std::string cut_box(py::handle g, const std::vector<std::size_t>& global, const std::vector<long>& codes,
                    const std::vector<std::size_t>& sizes, const char* what, GroupBox& b, std::uint64_t& split,
                    std::uint64_t& first, std::uint64_t& second) {
  if (!py::isinstance<PyComm>(g))
    return std::string(what) + ": dsp.Zigzag and dsp.Blocks are placements of a dsp.Comm, not of mesh axes";
  if (codes.size() != 1) return std::string(what) + ": on a dsp.Comm, one placement";
  if (global.empty() || global.size() > kMaxRank)
    return "a tensor has 1 to " + std::to_string(kMaxRank) + " dims; global_shape has " + std::to_string(global.size());
  const Comm& c = g.cast<PyComm&>().comm;
  const std::size_t n = std::size_t(c.size()), me = std::size_t(c.rank());
  PySide side;
  if (std::string why = make_side(codes[0], sizes, global, n, side); !why.empty()) return why;
  dsp::detail::Cut cut = side.side.cut;
  cut.starts = side.starts.empty() ? nullptr : side.starts.data();
  dsp::detail::Piece p[2];
  const std::size_t k = cut.pieces(me, p), dim = side.side.dim;
  b = GroupBox{};
  for (std::size_t a = 0; a < global.size(); ++a) b.cnt[a] = global[a];
  b.off[dim] = p[0].offset, b.cnt[dim] = p[0].count + (k > 1 ? p[1].count : 0);
  if (k > 1) split = dim, first = p[0].count, second = p[1].offset;
  b.shape.assign(b.cnt.begin(), b.cnt.begin() + std::ptrdiff_t(global.size()));
  b.group_size = n;
  return "";
}

/// The block `x` of the box `b`: "" or what is wrong with it.
std::string block_fits(const Block& x, const GroupBox& b, const std::vector<std::size_t>& global,
                       const std::string& what) {
  if (!x.error.empty()) return x.error;
  if (x.shape != b.shape)
    return what + "'s shape is " + shape_text(x.shape) + ", but this rank's block of global shape " +
           shape_text(global) + " under its layout is " + shape_text(b.shape);
  return "";
}

/// dsp.reshard: the tensor `x` (this rank's block under `src` on `src_group`;
/// None where this rank is outside that group) onto `dst_group` under `dst`
/// (None outside it), both groups inside `parent`. Returns this rank's new
/// block, or None. `dtype` names the element type where x is None.
py::object reshard(py::handle x, const std::vector<std::size_t>& global, const std::vector<long>& src,
                   py::handle src_group, const std::vector<long>& dst, py::handle dst_group, const PyComm& parent,
                   py::handle dtype, const std::vector<std::size_t>& src_sizes,
                   const std::vector<std::size_t>& dst_sizes) {
  const Comm& comm = parent.comm;
  std::string err;
  auto fail = [&](const std::string& why) {
    if (err.empty()) err = "dsp::reshard (rank " + std::to_string(comm.rank()) + "): " + why;
  };
  const bool has_x = !x.is_none(), has_y = !dst_group.is_none();
  if (has_x != !src_group.is_none())
    fail(has_x ? "x is given but src_group is None (a rank outside the source group passes x=None)"
               : "src_group is given but x is None (a rank of the source group passes its block)");
  std::optional<Block> xb;
  DType dt;
  const TypeInfo* type = nullptr;
  try {
    if (has_x) xb = block_of(x, Want{nullptr, "dsp.reshard moves host memory (pass x.cpu())"}), type = xb->type;
    if (!dtype.is_none()) {
      dt = dtype_of(dtype);
      if (type && type != dt.type)
        fail("x's element type is " + std::string(type->py) + ", but dtype names " + std::string(dt.type->py));
      type = dt.type;
    }
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (!type && !has_x)
    fail("dtype is needed where this rank holds no x (the tensor's element type: a numpy or torch dtype)");
  dsp::detail::ReshardDesc d;
  d.rank = global.size();
  for (std::size_t k = 0; k < global.size() && k < kMaxRank; ++k) d.extents[k] = global[k];
  GroupBox xbox, ybox;
  auto boxes = [&](py::handle g, const std::vector<long>& codes, const std::vector<std::size_t>& sizes,
                   const char* what, GroupBox& b, std::uint64_t& split, std::uint64_t& first, std::uint64_t& second) {
    try {
      if (!codes.empty() && dsp::detail::is_cut_code(codes[0]) && py::isinstance<PyComm>(g))  // a Comm's cut
        return cut_box(g, global, codes, sizes, what, b, split, first, second);
      return with_group(g, [&](const auto& gg) {
        std::string why = group_box(gg, global, codes, what, b, kReshardPartial, sizes);
        if (why.empty() && b.split.dim != dsp::Split::none)
          split = b.split.dim, first = b.split.first, second = b.split.second;
        return why;
      });
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };
  if (has_x && !src_group.is_none()) {
    if (std::string why = boxes(src_group, src, src_sizes, "src", xbox, d.x_split, d.x_first, d.x_second); !why.empty())
      fail(why);
    else if (xb && (why = block_fits(*xb, xbox, global, "x"), !why.empty())) fail(why);
    d.has_x = 1, d.x_group = xbox.group_size;
    for (std::size_t k = 0; k < kMaxRank; ++k) d.x.off[k] = xbox.off[k], d.x.cnt[k] = xbox.cnt[k];
  }
  std::optional<Block> yb;
  if (has_y) {
    if (std::string why = boxes(dst_group, dst, dst_sizes, "dst", ybox, d.y_split, d.y_first, d.y_second); !why.empty())
      fail(why);
    d.has_y = 1, d.y_group = ybox.group_size;
    for (std::size_t k = 0; k < kMaxRank; ++k) d.y.off[k] = ybox.off[k], d.y.cnt[k] = ybox.cnt[k];
    if (err.empty()) yb = block_of(xb ? empty_like(*xb, ybox.shape) : new_array(dt, ybox.shape));
  }
  dsp::detail::Signature sig;
  sig.op = static_cast<std::uint32_t>(Op::reshard);
  if (type) set_type(sig, *type);
  sig.src_layout[0] = sig.dst_layout[0] = -1;
  sig.tensor_rank = global.size();
  dsp::detail::set_site(sig, std::source_location::current());
  if (!err.empty()) sig.status = static_cast<std::uint32_t>(dsp::detail::Status::bad_argument);
  const void* xp = xb && err.empty() ? xb->data : nullptr;
  void* yp = yb ? yb->data : nullptr;
  dsp::detail::PortOf<Comm, Space> port(comm);
  {
    py::gil_scoped_release release;
    dsp::detail::run_reshard<Space>(port, sig, std::move(err), d, xp, yp, type ? type->size : 0);
  }
  return yb ? yb->array : py::none();
}

#if DSP_PYTHON_HDF5
template <class T>
bool h5_is(const TypeInfo* t, hid_t& h, const char*& text) {
  if (t != info_of<T>()) return false;
  h = dsp::hdf5::detail::native_type<T>();
  text = dsp::hdf5::detail::type_text<T>();
  return true;
}
/// The HDF5 type of an element type dsp::hdf5 writes (false: none).
bool h5_type(const TypeInfo* t, hid_t& h, const char*& text) {
  return h5_is<float>(t, h, text) || h5_is<double>(t, h, text) || h5_is<std::int8_t>(t, h, text) ||
         h5_is<std::uint8_t>(t, h, text) || h5_is<std::int16_t>(t, h, text) || h5_is<std::uint16_t>(t, h, text) ||
         h5_is<std::int32_t>(t, h, text) || h5_is<std::uint32_t>(t, h, text) || h5_is<std::int64_t>(t, h, text) ||
         h5_is<std::uint64_t>(t, h, text) || h5_is<dsp::float16>(t, h, text) || h5_is<dsp::bfloat16>(t, h, text);
}

void* block_data(void* self) { return static_cast<Block*>(self)->data; }

/// dsp.hdf5.save (save) or load: `x` this rank's block under `codes` on
/// `group` (load: None, and `dtype` names the type); the block loaded, or None.
py::object h5_io(bool save, py::handle x, const std::vector<std::size_t>& global, const std::vector<long>& codes,
                 py::handle group, const std::string& file, const std::string& dataset, py::handle dtype,
                 const std::vector<std::size_t>& sizes) {
  return with_group(group, [&](const auto& g) -> py::object {
    std::string err;
    auto fail = [&](const std::string& why) {
      if (err.empty()) err = why;
    };
    GroupBox box;
    std::uint64_t split = ~std::uint64_t(0), first = 0, second = 0;  // a Zigzag block's two boxes
    const bool cut = !codes.empty() && dsp::detail::is_cut_code(codes[0]) && py::isinstance<PyComm>(group);
    if (std::string why = cut ? cut_box(group, global, codes, sizes, "layout", box, split, first, second)
                              : group_box(g, global, codes, "layout", box, save ? kSavePartial : kLoadPartial, sizes);
        !why.empty())
      fail(why);
    else if (!cut && box.split.dim != dsp::Split::none)  // a Zigzag on a mesh axis
      split = box.split.dim, first = box.split.first, second = box.split.second;
    Block b;
    try {
      if (save) {
        b = block_of(x, Want{nullptr, "dsp.hdf5 saves host memory (pass x.cpu())"});
        if (std::string why = block_fits(b, box, global, "x"); err.empty() && !why.empty()) fail(why);
      } else if (dtype.is_none()) {
        fail("dtype is needed: the tensor's element type (a numpy or torch dtype)");
      } else {
        const DType dt = dtype_of(dtype);
        b.type = dt.type;
        if (err.empty()) b = block_of(new_array(dt, box.shape));
      }
    } catch (const std::exception& e) {
      fail(e.what());
    }
    dsp::hdf5::detail::Io io;
    const char* text = "";
    if (b.type && !h5_type(b.type, io.type, text))
      fail(
          "dsp::hdf5: the element type must be float, double, dsp::float16, dsp::bfloat16 or a fixed-width "
          "integer (std::int8_t ... std::uint64_t). (From Python: float32, float64, float16, bfloat16, int8 ... "
          "uint64; not " +
          std::string(b.type->py) + ".)");
    io.type_text = text;
    dsp::detail::Signature& sig = io.sig;
    sig.op = static_cast<std::uint32_t>(save ? Op::hdf5_save : Op::hdf5_load);
    if (b.type) set_type(sig, *b.type);
    dsp::detail::set_extents(sig, std::span<const std::size_t>(global.data(), std::min(global.size(), kMaxRank)));
    sig.mesh_axes = box.mesh_axes;
    for (std::size_t a = 0; a < codes.size() && a < kMaxAxes; ++a)
      sig.src_layout[a] = sig.dst_layout[a] = codes[a], sig.mesh_shape[a] = box.mesh_axes ? box.mesh_shape[a] : 0;
    dsp::detail::set_site(sig, std::source_location::current());
    if (!sizes.empty())  // dsp.Blocks: ranks whose sizes differ raise (the agreement compares a hash)
      sig.arg = static_cast<std::int64_t>(dsp::detail::block_sizes_hash(sizes));
    const std::size_t r = err.empty() ? global.size() : 0;  // nothing is read or written on error
    io.global = std::span<const std::size_t>(global.data(), r);
    io.off = std::span<const std::size_t>(box.off.data(), r);
    io.cnt = std::span<const std::size_t>(box.cnt.data(), r);
    if (split != ~std::uint64_t(0)) io.split = std::size_t(split), io.first = first, io.second = second;
    io.host = {&block_data, nullptr, &b};
    const auto& world = dsp::detail::group_traits<std::remove_cvref_t<decltype(g)>>::world(g);
    try {
      py::gil_scoped_release release;
      if (save) dsp::hdf5::detail::save_io(world, io, file, dataset, std::move(err));
      else dsp::hdf5::detail::load_io(world, io, file, dataset, std::move(err));
    } catch (const dsp::MismatchError& e) {
      if (sizes.empty()) throw;  // name this rank's Blocks sizes: the agreement compares a hash
      throw dsp::MismatchError(std::string(e.what()) + " (rank " + std::to_string(world.rank()) + ": Blocks sizes " +
                               dsp::detail::text(std::span<const std::size_t>(sizes)) + ")");
    }
    return save ? py::none() : b.array;
  });
}
#endif

// ---------------------------------------------------------------- errors

/// The Python classes of dsp's errors, one per C++ class: every dsp::Error
/// arrives as one of these (deriving from dsp.Error).
struct Errors {
  py::object base, invalid, mismatch, resource, usage, timeout, backend;
};

py::object new_error(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string full = std::string("dsp.") + name;
  py::object cls =
      py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr));
  if (!cls) throw py::error_already_set();
  m.attr(name) = cls;
  return cls;
}

void register_errors(py::module_& m) {
  static Errors e;
  e.base = new_error(m, "Error", py::make_tuple(py::handle(PyExc_RuntimeError)), "Every error dsp raises.");
  e.invalid = new_error(m, "InvalidArgument", py::make_tuple(e.base, py::handle(PyExc_ValueError)),
                        "A bad argument on some rank (shape, dtype, layout, block): raised on every rank.");
  e.mismatch = new_error(m, "MismatchError", py::make_tuple(e.base),
                         "The ranks disagree on a collective call (or another rank failed).");
  e.resource = new_error(m, "ResourceError", py::make_tuple(e.base), "Memory could not be allocated.");
  e.usage = new_error(m, "UsageError", py::make_tuple(e.base), "dsp used out of order (Kokkos not initialized, ...).");
  e.timeout = new_error(m, "TimeoutError", py::make_tuple(e.base, py::handle(PyExc_TimeoutError)),
                        "A collective did not complete within the deadline.");
  e.backend = new_error(m, "BackendError", py::make_tuple(e.base), "The communication library failed.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const dsp::InvalidArgument& x) {
      PyErr_SetString(e.invalid.ptr(), x.what());
    } catch (const dsp::MismatchError& x) {
      PyErr_SetString(e.mismatch.ptr(), x.what());
    } catch (const dsp::ResourceError& x) {
      PyErr_SetString(e.resource.ptr(), x.what());
    } catch (const dsp::UsageError& x) {
      PyErr_SetString(e.usage.ptr(), x.what());
    } catch (const dsp::TimeoutError& x) {
      PyErr_SetString(e.timeout.ptr(), x.what());
    } catch (const dsp::BackendError& x) {
      PyErr_SetString(e.backend.ptr(), x.what());
    } catch (const dsp::Error& x) {
      PyErr_SetString(e.base.ptr(), x.what());
    }
  });
}

/// The benchmark's C++ side (bench/python_switch.py): `reps` calls of the
/// typed C++ `y = dsp::dynamic_switch<2>(x)` on a float [B, T, S, C] tensor
/// Sharded<1>, the call dsp.switch(x, G, 1, 2, comm) makes from Python; the
/// seconds per call, the slowest rank's. Collective.
double cxx_switch_seconds(const PyComm& c, const std::vector<std::size_t>& g, int reps) {
  if (g.size() != 4 || reps < 1) throw dsp::InvalidArgument("dsp._cxx_switch_seconds: a 4-D shape and reps >= 1");
  py::gil_scoped_release release;
  dsp::DistTensor<float, 4, dsp::Sharded<1>, Comm> x(c.comm, {g[0], g[1], g[2], g[3]});
  auto y = dsp::dynamic_switch<2>(x);  // warm: plans, workspaces, the recycled output
  MPI_Barrier(c.comm.native());
  const double t0 = MPI_Wtime();
  for (int k = 0; k < reps; ++k) y = dsp::dynamic_switch<2>(x);
  double t = (MPI_Wtime() - t0) / reps;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, c.comm.native());
  return t;
}

/// dsp.Comm's device argument: -2 (None: host memory), -1 ("cuda": the
/// current CUDA device), or a device index ("cuda:k", k, or a torch.device).
int device_index(py::handle d) {
  if (d.is_none()) return -2;
  std::string t;
  if (py::isinstance<py::int_>(d) && !py::isinstance<py::bool_>(d)) t = "cuda:" + py::str(d).cast<std::string>();
  else if (py::isinstance<py::str>(d) || std::string(py::str(py::type::of(d).attr("__name__"))) == "device")
    t = py::str(d).cast<std::string>();  // a torch.device prints as "cuda:0" or "cuda"
  int k = -1;
  bool ok = t == "cuda";
  if (!ok && t.rfind("cuda:", 0) == 0 && t.size() > 5 && t.size() < 9 &&
      t.find_first_not_of("0123456789", 5) == std::string::npos)
    ok = true, k = std::stoi(t.substr(5));
  if (!ok)
    throw dsp::InvalidArgument(
        "dsp.Comm: device is None (host memory), \"cuda\", \"cuda:k\", k or a torch.device of "
        "type cuda, not " +
        std::string(py::repr(d)));
#if !DSP_PYTHON_CUDA
  throw dsp::InvalidArgument(
      "dsp.Comm(device=" + t +
      "): this build of dsp moves host memory only; CUDA arrays need the module built with a CUDA Kokkos and "
      "NCCL (docs/python.md, \"CUDA arrays\")");
#endif
  return k;
}

}  // namespace

PYBIND11_MODULE(_dsp, m) {
  m.doc() = "dsp's C++ core (the dsp package wraps it; see docs/python.md)";
  if (import_mpi4py() < 0) throw py::error_already_set();
  register_errors(m);
#if !DSP_PYTHON_CUDA  // a CUDA build initializes Kokkos with its first dsp.Comm, on the device current then
  ensure_kokkos();
#endif
  m.def("_finalize", [] {
    clear_outputs();
    if (g_kokkos_ours && Kokkos::is_initialized()) Kokkos::finalize(), g_kokkos_ours = false;
  });
  m.attr("kReplicated") = kReplicated;
  m.attr("kZigzag") = dsp::detail::kZigzag;
  m.attr("kBlocks") = dsp::detail::kBlocks;
  m.attr("kPartialSum") = kPartialSum;
  m.attr("kPartialMax") = kPartialMax;
  m.attr("kPartialMin") = kPartialMin;
  m.attr("version") = DSP_VERSION_STRING;

  m.attr("has_cuda") = bool(DSP_PYTHON_CUDA);
  py::class_<PyComm>(m, "Comm")
      .def(py::init([](py::handle c, py::handle device) {
             [[maybe_unused]] const int d = device_index(device);  // -2: host
             PyComm r{comm_from(c), nullptr};
#if DSP_PYTHON_CUDA
             // Kokkos starts with the first dsp.Comm (on its device, or the current one), under an
             // agreement: a rank where it cannot raises, and so do the others, instead of waiting.
             if (d != -2) {
               r.dev = make_device_comm(r.comm, d);
             } else {
               std::exception_ptr failure;
               try {
                 ensure_kokkos();
               } catch (...) {
                 failure = std::current_exception();
               }
               agree_or_raise(r.comm, failure, "dsp.Comm");
             }
#endif
             return r;
           }),
           py::arg("comm"), py::arg("device") = py::none())
      .def_property_readonly("rank", [](const PyComm& c) { return c.comm.rank(); })
      .def_property_readonly("size", [](const PyComm& c) { return c.comm.size(); })
      .def_property_readonly("device",
                             [](const PyComm& c) -> py::object {
                               if (!c.dev) return py::none();
                               return py::str("cuda:" + std::to_string(c.dev->device));
                             })
      .def("__repr__", [](const PyComm& c) {
        return "dsp.Comm(rank " + std::to_string(c.comm.rank()) + " of " + std::to_string(c.comm.size()) +
               (c.dev ? ", device cuda:" + std::to_string(c.dev->device) : std::string()) + ")";
      });

  py::class_<PyMesh>(m, "Mesh")
      .def(py::init([](const PyComm& c, const std::vector<int>& shape) {
             return make_mesh(c, shape, std::make_index_sequence<kMaxAxes>{});
           }),
           py::arg("comm"), py::arg("shape"))
      .def_property_readonly(
          "shape",
          [](const PyMesh& m) {
    return std::visit([](const auto& x) { return std::vector<int>(x.shape().begin(), x.shape().end()); }, m.mesh);
          })
      .def_property_readonly(
          "coords",
          [](const PyMesh& m) {
    return std::visit([](const auto& x) { return std::vector<int>(x.coords().begin(), x.coords().end()); }, m.mesh);
          })
      .def_property_readonly("comm", [](const PyMesh& m) { return m.world; })
      .def_property_readonly("rank", [](const PyMesh& m) { return m.world.comm.rank(); })
      .def_property_readonly("size", [](const PyMesh& m) { return m.world.comm.size(); });

  m.def(
      "mesh_shape",
      [](int k, int n) {
    if (n < 1) throw dsp::InvalidArgument("dsp.mesh_shape(k, n): n must be at least 1");
    switch (k) {
      case 1: return std::vector<int>{n};
      case 2: {
        auto s = dsp::mesh_shape<2>(n);
        return std::vector<int>(s.begin(), s.end());
      }
      case 3: {
        auto s = dsp::mesh_shape<3>(n);
        return std::vector<int>(s.begin(), s.end());
      }
      case 4: {
        auto s = dsp::mesh_shape<4>(n);
        return std::vector<int>(s.begin(), s.end());
      }
      default: throw dsp::InvalidArgument("dsp.mesh_shape(k, n): a mesh has 1 to 4 axes, not " + std::to_string(k));
    }
      },
      py::arg("k"), py::arg("n"));

  m.def(
      "gqa_mesh_shape", [](int n, int h_kv) { return dsp::gqa_mesh_shape(n, h_kv); }, py::arg("n"), py::arg("h_kv"));

  py::class_<Handle>(m, "Handle").def("test", &Handle::test).def("wait", &Handle::wait).def("result", &Handle::result);

  // name: the C++ call it stands for, in messages (dsp::redistribute,
  // dsp::dynamic_switch, dsp::gather, dsp::split).
  m.def(
      "redistribute",
      [](py::handle x, const std::vector<std::size_t>& global, const std::vector<long>& src,
         const std::vector<long>& dst, py::handle group, int wire, const std::string& name,
         const std::vector<std::size_t>& src_sizes, const std::vector<std::size_t>& dst_sizes,
         const std::vector<std::vector<std::size_t>>& globals) {
    check_wire(wire);
    DeviceScope scope(device_of(group));
    bool list = false;
    Request r = request(x, global, src, dst, group, wire, name, list);
    r.globals = globals;
    if (involves_cut(r) || !r.globals.empty()) return run_cut(r, group, list, src_sizes, dst_sizes);
    return run(r, group, list);
      },
      py::arg("x"), py::arg("global_shape"), py::arg("src"), py::arg("dst"), py::arg("group"), py::arg("wire"),
      py::arg("name"), py::arg("src_sizes") = std::vector<std::size_t>{},
      py::arg("dst_sizes") = std::vector<std::size_t>{}, py::arg("globals") = std::vector<std::vector<std::size_t>>{});
  // A front-end argument error found in Python (a shape, layout or wire the
  // package could not read), raised on every rank of the group through the
  // agreement check: the other ranks are already in (or entering) the call.
  m.def("fail", [](py::handle group, const std::string& name, const std::string& text) {
    DeviceScope scope(device_of(group));
    Request r;
    r.name = "dsp";
    r.error = name + ": " + text;
    r.axes = group_axes(group);
    run(r, group, false);
  });
  m.def(
      "start",
      [](py::handle x, const std::vector<std::size_t>& global, const std::vector<long>& src,
         const std::vector<long>& dst, py::handle group, int wire, const std::vector<std::size_t>& src_sizes,
         const std::vector<std::size_t>& dst_sizes) {
    check_wire(wire);
    DeviceScope scope(device_of(group));
    bool list = false;
    Request r = request(x, global, src, dst, group, wire, "dsp::start_redistribute", list);
    if (r.error.empty() && py::isinstance<PyComm>(group) && involves_cut(r) &&
        (is_partial(r.from[0]) || is_partial(r.to[0])))
      r.error =
          "dsp::redistribute: between Partial and Zigzag or Blocks there is no one exchange; reduce first "
          "(redistribute to Replicated or Sharded<D>), then move to Zigzag or Blocks.";
    set_sizes(r, group, src_sizes, dst_sizes);  // Blocks: the recut steps run at the start, as Zigzag's
    return naming_sizes(r, group, [&] { return start(r, group, list); });
      },
      py::arg("x"), py::arg("global_shape"), py::arg("src"), py::arg("dst"), py::arg("group"), py::arg("wire"),
      py::arg("src_sizes") = std::vector<std::size_t>{}, py::arg("dst_sizes") = std::vector<std::size_t>{});
  m.def(
      "local_shape",
      [](const std::vector<std::size_t>& global, const std::vector<long>& codes, py::handle group,
         const std::vector<std::size_t>& sizes) {
    return with_group(group, [&](const auto& g) {
      using traits = dsp::detail::group_traits<std::remove_cvref_t<decltype(g)>>;
      if (codes.size() != traits::axes || global.empty() || global.size() > kMaxRank)
        throw dsp::InvalidArgument("dsp.local_shape: one placement per mesh axis, and 1 to 8 dims");
      Request r;
      r.global = global;
      r.axes = traits::axes;
      std::copy(codes.begin(), codes.end(), r.to.begin());
      if (!fits(r.to, r.axes, global.size()))
        throw dsp::InvalidArgument(
            "dsp::DistTensor: a Sharded<D> in the layout names a dim D that is not less than the tensor's rank.");
      // A Blocks code's sizes are not in the codes (dsp.local_shape of a bare dsp.Blocks is the package's).
      constexpr bool mesh = dsp::is_mesh_v<std::remove_cvref_t<decltype(g)>>;
      std::string why = mesh
                            ? mesh_cut_error(r.to, r.axes)
                            : (dsp::detail::is_blocks_code(r.to[0]) ? std::string("a dsp.Blocks layout takes its sizes")
                                                                    : std::string());
      if (why.empty() && mesh) {
        r.dst_sizes = sizes;
        why = mesh_starts(r.to, r.axes, global, std::span<const int>(traits::shape(g)), sizes, "layout", r.dst_starts);
      }
      if (!why.empty()) throw dsp::InvalidArgument("dsp.local_shape: " + why);
      return out_shape(r, g);
    });
      },
      py::arg("global_shape"), py::arg("layout"), py::arg("group"), py::arg("sizes") = std::vector<std::size_t>{});

  m.def(
      "local_offsets",
      [](const std::vector<std::size_t>& global, const std::vector<long>& codes, py::handle group,
         const std::vector<std::size_t>& sizes) {
    return with_group(group, [&](const auto& g) {
      GroupBox b;  // a Partial axis cuts nothing: its terms are full-size
      if (std::string why = group_box(g, global, codes, "layout", b, nullptr, sizes); !why.empty())
        throw dsp::InvalidArgument("dsp.local_offsets: " + why);
      return std::vector<std::size_t>(b.off.begin(), b.off.begin() + std::ptrdiff_t(global.size()));
    });
      },
      py::arg("global_shape"), py::arg("layout"), py::arg("group"), py::arg("sizes") = std::vector<std::size_t>{});

  // Where this rank's block jumps along a dim (C++ DistTensor::block_split): None, or (dim, first, second).
  m.def(
      "block_split",
      [](const std::vector<std::size_t>& global, const std::vector<long>& codes, py::handle group,
         const std::vector<std::size_t>& sizes) -> py::object {
        return with_group(group, [&](const auto& g) -> py::object {
          GroupBox b;
          if (std::string why = group_box(g, global, codes, "layout", b, nullptr, sizes); !why.empty())
            throw dsp::InvalidArgument("dsp.block_split: " + why);
          if (b.split.dim == dsp::Split::none) return py::none();
          return py::make_tuple(b.split.dim, b.split.first, b.split.second);
        });
      },
      py::arg("global_shape"), py::arg("layout"), py::arg("group"), py::arg("sizes") = std::vector<std::size_t>{});

  // Settings, planning and wisdom (dsp/settings.hpp, dsp/wisdom.hpp).
  m.def("set_agreement_checks", &dsp::set_agreement_checks);
  m.def("agreement_checks", &dsp::agreement_checks);
  m.def("set_call_site_checks", &dsp::set_call_site_checks);
  m.def("set_planning", [](const std::string& p) {
    if (p != "measure" && p != "heuristic")
      throw dsp::InvalidArgument("dsp.set_planning: \"measure\" or \"heuristic\", not \"" + p + "\"");
    dsp::set_planning(p == "measure" ? dsp::Planning::measure : dsp::Planning::heuristic);
  });
  m.def("planning", [] { return std::string(dsp::to_string(dsp::planning())); });
  m.def("export_wisdom", [] { return dsp::export_wisdom(); });
  m.def("import_wisdom", [](const std::string& text) { dsp::import_wisdom(text); });
  m.def("forget_wisdom", &dsp::forget_wisdom);
  m.def("workspace_bytes", [](const PyComm& c) {
#if DSP_PYTHON_CUDA
    if (c.dev) return dsp::workspace_bytes(*c.dev->comm);
#endif
    return dsp::workspace_bytes(c.comm);
  });
  m.def("release_workspaces", [] {
    clear_outputs();
    dsp::release_workspaces();
  });
  m.def("reshard", &reshard, py::arg("x"), py::arg("global_shape"), py::arg("src"), py::arg("src_group"),
        py::arg("dst"), py::arg("dst_group"), py::arg("parent"), py::arg("dtype"),
        py::arg("src_sizes") = std::vector<std::size_t>{}, py::arg("dst_sizes") = std::vector<std::size_t>{});
#if DSP_PYTHON_HDF5
  m.attr("has_hdf5") = true;
  m.def(
      "hdf5_save",
      [](py::handle x, const std::vector<std::size_t>& global, const std::vector<long>& codes, py::handle group,
         const std::string& file, const std::string& dataset, const std::vector<std::size_t>& sizes) {
    h5_io(true, x, global, codes, group, file, dataset, py::none(), sizes);
      },
      py::arg("x"), py::arg("global_shape"), py::arg("codes"), py::arg("group"), py::arg("file"), py::arg("dataset"),
      py::arg("sizes") = std::vector<std::size_t>{});
  m.def(
      "hdf5_load",
      [](const std::string& file, const std::string& dataset, const std::vector<std::size_t>& global,
         const std::vector<long>& codes, py::handle group, py::handle dtype, const std::vector<std::size_t>& sizes) {
    return h5_io(false, py::none(), global, codes, group, file, dataset, dtype, sizes);
      },
      py::arg("file"), py::arg("dataset"), py::arg("global_shape"), py::arg("codes"), py::arg("group"),
      py::arg("dtype"), py::arg("sizes") = std::vector<std::size_t>{});
#else
  m.attr("has_hdf5") = false;
#endif
  m.def("_cxx_switch_seconds", &cxx_switch_seconds);
}
