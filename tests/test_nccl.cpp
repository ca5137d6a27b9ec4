// SPDX-License-Identifier: BSD-3-Clause
// The NCCL communicator. Everywhere: it compiles and links against the CUDA
// and NCCL found (every member is instantiated below). On a machine with an
// NVIDIA GPU: each collective on one rank, checked on device buffers, and NCCL
// errors surfacing as dsp::BackendError with NCCL's text; with a CUDA-enabled
// Kokkos also every primitive and pipelines on CudaSpace tensors. Without a
// GPU the test reports itself skipped (exit code 77, CTest's SKIP_RETURN_CODE;
// with a CUDA Kokkos dsp_cuda_launcher does, as the binary cannot load without
// the driver).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <dsp/nccl.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <dsp/pipeline.hpp>

#include "device_check.hpp"
#include "device_modifiers.hpp"
#include "device_wire.hpp"
#endif

#include <array>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <type_traits>
#include <vector>

template class dsp::BasicNcclCommunicator<Kokkos::HostSpace>;  // compile every member
static_assert(dsp::Communicator<dsp::BasicNcclCommunicator<Kokkos::HostSpace>>);

namespace {

struct OneRankNccl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  OneRankNccl() {
    int dev = 0;
    DSP_CHECK_CUDA(cudaSetDevice(dev));
    DSP_CHECK_CUDA(cudaStreamCreate(&stream));
    if (ncclCommInitAll(&comm, 1, &dev) != ncclSuccess) throw std::runtime_error("ncclCommInitAll failed");
  }
  ~OneRankNccl() {
    ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }
};

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  std::size_t n = 0;
  explicit DeviceBuffer(std::size_t count) : n(count) { DSP_CHECK_CUDA(cudaMalloc(&p, count * sizeof(T) + 1)); }
  ~DeviceBuffer() { cudaFree(p); }
  void put(const std::vector<T>& v) {
    DSP_CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> get() const {
    std::vector<T> v(n);
    DSP_CHECK_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

}  // namespace

TEST_CASE("NCCL communicator on one GPU: every collective") {
  OneRankNccl nccl;
  dsp::BasicNcclCommunicator<Kokkos::HostSpace> c(nccl.comm, nccl.stream);
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  std::vector<float> h(1000);
  std::iota(h.begin(), h.end(), 1.0f);
  DeviceBuffer<float> a(h.size()), b(h.size());
  a.put(h);

  c.all_to_all(a.p, b.p, h.size(), sizeof(float));
  DSP_CHECK_CUDA(cudaStreamSynchronize(nccl.stream));
  CHECK(b.get() == h);

  std::vector<std::size_t> cnt{600}, sd{100}, rd{300};
  DeviceBuffer<float> v(1000);
  v.put(std::vector<float>(1000, 0.0f));
  c.all_to_all_v(a.p, cnt, sd, v.p, cnt, rd, sizeof(float), 1000);
  DSP_CHECK_CUDA(cudaStreamSynchronize(nccl.stream));
  auto got = v.get();
  CHECK(got[300] == h[100]);
  CHECK(got[899] == h[699]);
  CHECK(got[299] == 0.0f);

  c.all_gather(a.p, b.p, h.size(), sizeof(float));
  c.broadcast(b.p, h.size(), sizeof(float), 0);
  DSP_CHECK_CUDA(cudaStreamSynchronize(nccl.stream));
  CHECK(b.get() == h);

  double mine = 2.5, all = 0;
  c.control_all_gather(&mine, &all, sizeof mine);
  CHECK(all == 2.5);
}

TEST_CASE("NCCL errors raise dsp::BackendError with NCCL's text") {
  OneRankNccl nccl;
  dsp::BasicNcclCommunicator<Kokkos::HostSpace> c(nccl.comm, nccl.stream);
  DeviceBuffer<float> a(16);
  try {
    c.broadcast(a.p, 16, sizeof(float), 7);  // no rank 7
    FAIL("an invalid root was accepted");
  } catch (const dsp::BackendError& e) {
    const std::string w = e.what();
    CHECK(w.find("ncclBroadcast") != std::string::npos);
    CHECK(w.find("invalid") != std::string::npos);
  }
}

#if defined(KOKKOS_ENABLE_CUDA)
TEST_CASE("one Kokkos::Cuda instance per communicator, on its stream, shared by its copies") {
  // Not one per call: making and destroying a Kokkos::Cuda allocates and frees
  // device scratch memory, and cudaFree waits for the whole device.
  OneRankNccl nccl;
  dsp::NcclCommunicator c(nccl.comm, nccl.stream);
  const Kokkos::Cuda a = c.execution_space();
  CHECK(a.cuda_stream() == nccl.stream);
  CHECK(c.execution_space() == a);
  const dsp::NcclCommunicator copy = c;
  CHECK(copy.execution_space() == a);
  dsp::CountingCommunicator<dsp::NcclCommunicator> counted(c);
  CHECK(dsp::detail::execution_space_for<Kokkos::CudaSpace>(counted) == a);
  dsp::NcclCommunicator other(nccl.comm, nccl.stream);  // another communicator: its own instance
  CHECK(!(other.execution_space() == a));
}

TEST_CASE("DistTensor in CudaSpace through NCCL: split, switch, gather on one GPU") {
  OneRankNccl nccl;
  dsp::NcclCommunicator c(nccl.comm, nccl.stream);
  dsp::DistTensor<float, 3, dsp::Replicated, dsp::NcclCommunicator> r{c, {5, 6, 7}};
  auto host = Kokkos::create_mirror_view(r.local());
  for (std::size_t k = 0; k < host.size(); ++k) host.data()[k] = float(k);
  Kokkos::deep_copy(r.local(), host);
  auto x = dsp::split<0>(r);
  auto y = dsp::dynamic_switch<2>(x);
  auto g = dsp::gather(y);
  auto back = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, g.local());
  for (std::size_t k = 0; k < back.size(); ++k) CHECK(back.data()[k] == float(k));
}

// Every primitive, both forms (allocating and into an existing output), and
// pipelines, on device tensors through NCCL; element types of 1, 8 and 12
// bytes (the copy kernel's word sizes).
namespace {

struct Triple {  // a 12-byte element: 4-byte words
  float a, b, c;
  Triple() = default;
  explicit Triple(std::size_t v) : a(float(v)), b(float(v) + 0.5f), c(-float(v)) {}
  friend bool operator==(const Triple& x, const Triple& y) { return x.a == y.a && x.b == y.b && x.c == y.c; }
};
template <class T>
void every_primitive(dsp::NcclCommunicator& c) {
  using Comm = dsp::NcclCommunicator;
  using dsp::Replicated;
  using dsp::Sharded;
  using dsp_device_test::count_wrong;
  const std::array<std::size_t, 3> e{7, 5, 3};
  // distribute from a device view: a broadcast (Replicated) and a scatter (Sharded<1>)
  Kokkos::View<T***, Kokkos::LayoutRight, Kokkos::CudaSpace> whole("whole", e[0], e[1], e[2]);
  {
    auto h = Kokkos::create_mirror_view(whole);
    for (std::size_t k = 0; k < h.size(); ++k) h.data()[k] = dsp_device_test::value_at<T>(k);
    Kokkos::deep_copy(whole, h);
  }
  auto r = dsp::distribute<Replicated>(c, whole);
  auto s1 = dsp::distribute<Sharded<1>>(c, whole);
  CHECK(count_wrong(r) == 0);
  CHECK(count_wrong(s1) == 0);
  // split, switch (every pair of dims), gather; allocating and into outputs
  auto s0 = dsp::split<0>(r);
  dsp::DistTensor<T, 3, Sharded<2>, Comm> s2{c, e};
  dsp::split<2>(r, s2);
  CHECK(count_wrong(s0) == 0);
  CHECK(count_wrong(s2) == 0);
  CHECK(count_wrong(dsp::dynamic_switch<1>(s0)) == 0);
  CHECK(count_wrong(dsp::dynamic_switch<2>(s0)) == 0);
  CHECK(count_wrong(dsp::dynamic_switch<0>(s1)) == 0);
  CHECK(count_wrong(dsp::dynamic_switch<2>(s1)) == 0);
  CHECK(count_wrong(dsp::dynamic_switch<0>(s2)) == 0);
  dsp::dynamic_switch<1>(s2, s1);
  CHECK(count_wrong(s1) == 0);
  dsp::DistTensor<T, 3, Replicated, Comm> g{c, e};
  dsp::gather(s1, g);
  CHECK(count_wrong(g) == 0);
  CHECK(count_wrong(dsp::gather(s2)) == 0);
  // pipelines and their adjoints
  namespace st = dsp::steps;
  constexpr auto p = st::split<1> | st::switch_to<2> | st::switch_to<0>;
  auto y = p(r);
  CHECK(count_wrong(y) == 0);
  CHECK(count_wrong(p.adjoint()(y)) == 0);
  CHECK(count_wrong((st::switch_to<2> | st::gather)(s0)) == 0);
}

}  // namespace

TEST_CASE("every primitive and pipeline on CudaSpace tensors through NCCL") {
  OneRankNccl nccl;
  dsp::NcclCommunicator c(nccl.comm, nccl.stream);
  every_primitive<std::int8_t>(c);
  every_primitive<double>(c);
  every_primitive<Triple>(c);
  dsp::set_agreement_checks(false);  // no host wait at all: results still ordered on the stream
  every_primitive<float>(c);
  dsp::set_agreement_checks(true);
}

TEST_CASE("every modifier on CudaSpace tensors through NCCL: batches, bf16 wire, Partial, split-phase, meshes") {
  OneRankNccl nccl;
  dsp::NcclCommunicator c(nccl.comm, nccl.stream);
  dsp_device_test::every_modifier_everywhere(c);
}

namespace {
struct FirstCall {
  FirstCall() { dsp::set_agreement_mode(dsp::AgreementMode::first_call); }
  ~FirstCall() { dsp::set_agreement_mode(dsp::AgreementMode::every_call); }
};
}  // namespace

TEST_CASE("first_call on NCCL: a warm switch and batch make no control collective (no host wait)") {
  FirstCall mode;
  OneRankNccl nccl;
  using C = dsp::CountingCommunicator<dsp::NcclCommunicator>;
  C c{dsp::NcclCommunicator(nccl.comm, nccl.stream)};
  const std::array<std::size_t, 3> e{6, 5, 4};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, C> x{c, e}, k{c, e};
  dsp::DistTensor<float, 3, dsp::Sharded<1>, C> y{c, e}, k1{c, e};
  dsp_device_test::fill(x);
  dsp_device_test::fill(k);
  for (int round = 0; round < 3; ++round) {
    c.reset();
    dsp::dynamic_switch<1>(x, y);
    dsp::dynamic_switch<1>(dsp::batch(x, k), dsp::batch(y, k1));
    CHECK(c.counts().control == (round == 0 ? 2u : 0u));
  }
  CHECK(dsp_device_test::count_wrong(y) == 0);
  CHECK(dsp_device_test::count_wrong(k1) == 0);
}

TEST_CASE("first_call on NCCL: a switch and a batch captured in a CUDA graph, replayed 100 times") {
  FirstCall mode;
  OneRankNccl nccl;
  dsp::NcclCommunicator c(nccl.comm, nccl.stream);
  const std::array<std::size_t, 3> e{8, 6, 5};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::NcclCommunicator> x{c, e}, q{c, e}, k{c, e};
  dsp::DistTensor<float, 3, dsp::Sharded<2>, dsp::NcclCommunicator> y{c, e}, q1{c, e}, k1{c, e};
  dsp_device_test::fill(x), dsp_device_test::fill(q), dsp_device_test::fill(k);
  auto calls = [&] {
    dsp::dynamic_switch<2>(x, y);
    dsp::dynamic_switch<2>(dsp::batch(q, k), dsp::batch(q1, k1));
  };
  calls();  // the first calls: agreed, planned, tables and workspaces in place
  Kokkos::fence();
  cudaGraph_t graph = nullptr;
  DSP_CHECK_CUDA(cudaStreamBeginCapture(nccl.stream, cudaStreamCaptureModeRelaxed));
  calls();
  DSP_CHECK_CUDA(cudaStreamEndCapture(nccl.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  DSP_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  std::size_t wrong = 0;
  for (int r = 0; r < 100; ++r) {
    for (auto* t : {&y, &q1, &k1})
      DSP_CHECK_CUDA(cudaMemsetAsync(t->local().data(), 0xff, t->local().span() * sizeof(float), nccl.stream));
    DSP_CHECK_CUDA(cudaGraphLaunch(exec, nccl.stream));
    DSP_CHECK_CUDA(cudaStreamSynchronize(nccl.stream));
    wrong += dsp_device_test::count_wrong(y) + dsp_device_test::count_wrong(q1) + dsp_device_test::count_wrong(k1);
  }
  CHECK(wrong == 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif

#if defined(KOKKOS_ENABLE_CUDA)
TEST_CASE("the device's conversion instructions give the software conversions' bits (every 257th float)") {
  CHECK(dsp_test::device_cvt_mismatches(0) == 0);  // bf16
  CHECK(dsp_test::device_cvt_mismatches(1) == 0);  // fp16
  CHECK(dsp_test::device_cvt_mismatches(2) == 0);  // fp8 e4m3, pairs
}

TEST_CASE("the device's wire kernels write the bytes of the host's block loop, every kind, wire and layout") {
  auto& tuning = dsp::detail::device_tuning();
  const dsp::detail::DeviceTuning saved = tuning;
  for (std::size_t groups : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(4)})
    for (bool hw : {true, false}) {
      tuning.groups = groups, tuning.hardware_convert = hw;  // groups per thread of the group kernels
      int cases = 0;
      INFO("groups per thread ", groups, ", hardware conversions ", hw);
      CHECK(dsp_test::device_wire_mismatches(cases) == 0);
      CHECK(cases == 7 * 6 * 3);  // kind-wire pairs (float 3, double 1, bf16 1, fp16 2) x lengths x layouts
    }
  tuning = saved;
}
#endif

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  std::printf("dsp NCCL backend: compiled against NCCL %d.%d.%d, runtime NCCL code %d\n", NCCL_MAJOR, NCCL_MINOR,
              NCCL_PATCH, dsp::detail::nccl_runtime_version());
  if (rc != cudaSuccess || devices == 0) {
    std::printf(
        "SKIPPED: no CUDA device here (%s); the NCCL backend compiled and linked, and its GPU tests "
        "need an NVIDIA GPU\n",
        rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    return 77;
  }
  Kokkos::initialize(argc, argv);
  int result = 0;
  {
    doctest::Context ctx(argc, argv);
    result = ctx.run();
  }
  Kokkos::finalize();
  return result;
}
