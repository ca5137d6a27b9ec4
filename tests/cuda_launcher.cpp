// SPDX-License-Identifier: BSD-3-Clause
// dsp_cuda_launcher: CTest puts it in front of every test command when Kokkos
// has CUDA enabled (tests/CMakeLists.txt). Binaries linked against a CUDA
// Kokkos need the NVIDIA driver's libcuda.so.1 just to load, so on a machine
// without a driver they would exit 127 before running a single check. This
// program asks the driver itself (dlopen, cuInit, cuDeviceGetCount):
//   - libcuda.so.1 does not load, is the toolkit's stub library, or the
//     driver sees no GPU: it prints
//     "SKIPPED: <why>" and exits 77 (the tests' SKIP_RETURN_CODE: CTest
//     reports the test as Skipped);
//   - otherwise it runs the command in its place (execvp), exit code and all.
// A driver that loads but fails otherwise (cuInit errors other than "no
// device") is not a reason to skip: the command runs, and fails with the
// runtime's own error. It links neither CUDA nor Kokkos, so it loads anywhere.
//
//   dsp_cuda_launcher <command> [arguments...]
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

constexpr int kSkip = 77;
constexpr int kCudaErrorStubLibrary = 34;  // CUDA_ERROR_STUB_LIBRARY in cuda.h
constexpr int kCudaErrorNoDevice = 100;    // CUDA_ERROR_NO_DEVICE

template <class F>
F symbol(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  F f = nullptr;
  static_assert(sizeof f == sizeof p);
  std::memcpy(&f, &p, sizeof f);  // object pointer to function pointer (POSIX guarantees this works)
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <command> [arguments...]\n", argv[0]);
    return 2;
  }
  std::string command = argv[1];  // for the messages
  for (int k = 2; k < argc; ++k) command += std::string(" ") + argv[k];
  const char* cmd = command.c_str();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    std::printf(
        "SKIPPED: no NVIDIA driver here: libcuda.so.1 cannot be loaded (%s). Binaries built against a "
        "CUDA-enabled Kokkos cannot even load without it; this test (%s) needs a machine with an NVIDIA "
        "GPU and driver.\n",
        why ? why : "not found", cmd);
    return kSkip;
  }
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  using Name = int (*)(int, const char**);
  const auto init = symbol<Init>(lib, "cuInit");
  const auto count = symbol<Count>(lib, "cuDeviceGetCount");
  const auto name = symbol<Name>(lib, "cuGetErrorName");
  auto error_name = [&](int rc) {
    const char* s = nullptr;
    if (name == nullptr || name(rc, &s) != 0 || s == nullptr) return "unknown error";
    return s;
  };
  if (init == nullptr || count == nullptr) {
    std::printf("dsp_cuda_launcher: libcuda.so.1 lacks cuInit or cuDeviceGetCount; running %s anyway\n", cmd);
  } else {
    const int rc = init(0);
    int devices = 0;
    if (rc == kCudaErrorStubLibrary) {
      std::printf(
          "SKIPPED: no NVIDIA driver here: the libcuda.so.1 found is the CUDA toolkit's stub library "
          "(lib64/stubs on the library path?), not a driver. This test (%s) needs an NVIDIA GPU and "
          "driver.\n",
          cmd);
      return kSkip;
    }
    if (rc == kCudaErrorNoDevice || (rc == 0 && count(&devices) == 0 && devices == 0)) {
      std::printf(
          "SKIPPED: the NVIDIA driver is installed but sees no GPU (%s). This test (%s) needs one; check "
          "CUDA_VISIBLE_DEVICES and the container's device access.\n",
          rc ? error_name(rc) : "0 devices", cmd);
      return kSkip;
    }
    if (rc != 0)
      std::printf("dsp_cuda_launcher: cuInit failed with %s (%d); running %s anyway, to report it\n", error_name(rc),
                  rc, cmd);
  }
  std::fflush(stdout);
  execvp(argv[1], argv + 1);
  std::fprintf(stderr, "dsp_cuda_launcher: cannot run %s: %s\n", argv[1], std::strerror(errno));
  return 127;
}
