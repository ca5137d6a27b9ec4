// SPDX-License-Identifier: BSD-3-Clause
// dsp-bench: a microbenchmark of collectives through dsp, after nccl-tests.
//
//   mpirun -np 2 dsp-bench --op switch --dims 0,1 -b 8 -e 128M -f 2 -n 20 -w 5 -c 1 -d float
//
// Sizes (-b/-e, suffixes K M G) are bytes per rank: the send buffer for
// alltoall and switch, the receive buffer for allgather (nccl-tests' choice).
// Columns: size (B), count (elements), type, time (us: the median over
// iterations of the slowest rank's time), algbw = size / time (GB/s),
// busbw = algbw * (n-1)/n (what crosses the links), #wrong (elements that
// differ from the reference, summed over ranks; -1 when not checked: with
// -c 0, and always for the unchecked references mpi-alltoall and memcpy),
// shape (the global tensor [A, B, C] a switch and its references move,
// as AxBxC; "-" for alltoall and allgather, which move flat buffers). The
// text table ends with nccl-tests' "# Avg bus bandwidth" line: the mean busbw
// over the sizes run. -o takes a comma-separated list: one table per op.
//
// -B nccl (built when dsp::nccl exists and Kokkos has CUDA: DSP_BENCH_WITH_NCCL)
// runs the same operations on dsp::NcclCommunicator with tensors and buffers
// in Kokkos::CudaSpace, one GPU per rank (local rank modulo the GPUs seen).
// Each timed iteration ends with a stream synchronization, then the slowest
// rank's MPI_Wtime counts. alltoall is the communicator's all-to-all, i.e.
// one ncclAlltoAll (NCCL 2.28 or newer) or grouped ncclSend/ncclRecv (the
// table's header says which); nccl-alltoall is the same call on the switch's
// bytes (the reference for the switch, as mpi-alltoall is for MPI), memcpy a
// device-to-device cudaMemcpyAsync of the local block:
//
//   mpirun -np 8 dsp-bench -B nccl -o switch,nccl-alltoall,memcpy -b 1M -e 1G -c 1
//
// -d bf16 and fp16 are dsp::bfloat16 and dsp::float16. --wire W switches on
// a low-precision wire (any pair dsp::wire_carries accepts), each element
// checked against the wire's bound in wire.hpp; with -o pack or unpack it
// times that wire's conversion kernel alone, its size the bytes read plus
// written. -a first_call runs the switches under AgreementMode::first_call;
// with it, --graph (-B nccl) captures the call once in a CUDA graph and
// times the replays (scripts/gpu-checks.sh runs all of these).
#include "common.hpp"

#include <dsp/half.hpp>
#include <dsp/kernels/convert.hpp>
#include <dsp/plan/switch.hpp>
#include <dsp/wire.hpp>

#include <CLI/CLI.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif
#if defined(DSP_BENCH_WITH_NCCL)
#if !defined(KOKKOS_ENABLE_CUDA)
#error "DSP_BENCH_WITH_NCCL needs a CUDA-enabled Kokkos (tensors in Kokkos::CudaSpace)"
#endif
#include <dsp/nccl.hpp>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <ranges>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// Bounds on what one run may ask for (the help explains them): the sizes one
// op steps through, -f's factor, and --peers (pack and unpack's tensor has
// extents A and B that are multiples of the peers, so rank 0's block holds at
// least peers x C elements, and the plan has a chunk per peer).
constexpr std::size_t max_sizes = 1000;
constexpr double max_factor = 4294967296.0;  // 2^32
constexpr int max_peers = 65536;

struct Options {
  std::size_t min_bytes = 32, max_bytes = 32 << 20;
  double factor = 2;
  std::size_t step = 0;            // -i: additive step instead of -f
  std::vector<std::size_t> sizes;  // from -b to -e by -f or -i (step_sizes)
  int iters = 20, warmup = 5;
  bool check = true;
  std::string type = "float", op = "switch", backend = "mpi", format = "text", out;
  std::vector<std::string> ops;  // -o, split at commas; `op` is the one being run
  int dim_from = 0, dim_to = 1;
  std::size_t inner = 32;      // switch: extent of the last dim
  int peers = 0;               // pack, unpack: the rank count of the plan (0: this run's)
  int batch = 1;               // switch: tensors switched in one dsp::batch (1 or 3)
  std::string wire = "exact";  // switch, pack, unpack: a wire (wire.hpp) that carries -d's type, or exact
  bool agreement = true;       // -a 0: no agreement check
  bool first_call = false;     // -a first_call: AgreementMode::first_call around the timed calls
  bool graph = false;          // --graph (-B nccl): time replays of the call captured in a CUDA graph
};

// -d's element types: the built-in ones and dsp's half types (half.hpp).
const std::vector<std::string> known_types{"float", "double", "int32", "int64", "int8", "uint8", "bf16", "fp16"};

// The ElemKind of -d's type (which wires carry it: dsp::wire_carries).
dsp::ElemKind kind_of(const std::string& type) {
  if (type == "float") return dsp::ElemKind::f32;
  if (type == "double") return dsp::ElemKind::f64;
  if (type == "bf16") return dsp::ElemKind::bf16;
  if (type == "fp16") return dsp::ElemKind::f16;
  return dsp::ElemKind::other;
}

// --wire's value as a dsp::Wire (every name dsp::wire_name gives).
std::vector<std::string> wire_names() {
  std::vector<std::string> v;
  for (const dsp::Wire w : dsp::kWires) v.emplace_back(dsp::wire_name(w));
  return v;
}
dsp::Wire wire_of(const std::string& name) {
  for (const dsp::Wire w : dsp::kWires)
    if (name == dsp::wire_name(w)) return w;
  throw std::runtime_error("dsp-bench: unknown wire " + name);
}

// -a's value: an integer (0 off, any other on, as it always was), or an
// agreement mode by name. False when it is none of these.
bool parse_agreement(const std::string& v, bool& on, bool& first_call) {
  if (v == "first_call" || v == "every_call") {
    on = true;
    first_call = v == "first_call";
    return true;
  }
  long long x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc{} || end != v.data() + v.size()) return false;
  on = x != 0;
  first_call = false;
  return true;
}

// The ops -o knows: the collectives, the switch's references and its kernels.
const std::vector<std::string> known_ops{"switch", "alltoall",      "allgather", "mpi-alltoall", "mpi-alltoallw",
                                         "memcpy", "nccl-alltoall", "pack",      "unpack"};

// -o's comma-separated list, item by item (empty items included, so that the
// check below can refuse them).
std::vector<std::string> split_ops(const std::string& list) {
  std::vector<std::string> ops;
  for (const auto op : list | std::views::split(',')) ops.emplace_back(op.begin(), op.end());
  return ops;
}

// A size of -b, -e, -i or --inner: a whole number, optionally with a binary
// suffix K, M or G (1K = 1024; "1.5M" is a size too). A CLI11 transform: it
// rewrites the value to the plain number that the option then reads, and
// refuses, naming the value, what strtod used to read a prefix of ("12X",
// "-5", "", "abc" passed as 12, -5 wrapped around, 0 and 0) and what is
// below `min`.
CLI::Validator size_value(std::size_t min) {
  return CLI::Validator(
      [min](std::string& s) -> std::string {
        const std::string given = "'" + s + "'";
        // from_chars takes a '-' that the check below refuses; its fixed
        // format keeps out hex, exponents, inf and nan.
        double v = 0;
        const char* const last = s.data() + s.size();
        const auto [end, ec] = std::from_chars(s.data(), last, v, std::chars_format::fixed);
        if (s.empty() || s[0] == '-' || ec != std::errc{} || last - end > 1)
          return given + " is not a size (a number, optionally with suffix K, M or G; 1K = 1024)";
        switch (end == last ? '\0' : *end) {  // '\0': no suffix (no argv string holds one)
          case 'G':
          case 'g': v *= 1024; [[fallthrough]];
          case 'M':
          case 'm': v *= 1024; [[fallthrough]];
          case 'K':
          case 'k': v *= 1024; break;
          case '\0': break;
          default: return given + " has an unknown suffix (K, M or G; 1K = 1024)";
        }
        if (v != std::floor(v)) return given + " is not a whole number";
        if (v >= 0x1p64) return given + " is too large";
        if (v < double(min)) return given + " is below the minimum " + std::to_string(min);
        s = std::to_string(static_cast<std::uint64_t>(v));
        return {};
      },
      "");
}

// The sizes from -b to -e: times -f (at least one byte more each step, so
// they always grow) or plus -i, never past -e and never through a conversion
// or sum that could wrap. Stops after `limit` + 1 sizes: more than `limit`
// means the range has too many.
std::vector<std::size_t> step_sizes(const Options& o, std::size_t limit) {
  std::vector<std::size_t> v;
  for (std::size_t b = o.min_bytes; v.size() <= limit;) {
    v.push_back(b);
    std::size_t next = 0;
    if (o.step > 0) {
      if (o.step > o.max_bytes - b) break;
      next = b + o.step;
    } else {
      const double x = double(b) * o.factor;
      if (!(x < 0x1p64)) break;  // past any -e; a size_t could not hold it
      next = std::max(b + 1, static_cast<std::size_t>(x));
    }
    if (next > o.max_bytes) break;
    b = next;
  }
  return v;
}

// Every rank parses the same argv and so reaches the same verdict; rank 0
// alone prints it (the help on stdout, exit code 0; a one-line error on
// stderr, exit code 2), and every rank finalizes MPI before it exits.
Options parse(int argc, char** argv, int rank) {
  Options o;
  CLI::App app{
      "dsp-bench: a microbenchmark of collectives through dsp, after nccl-tests; one table per op.\n"
      "Sizes (-b, -e) are bytes per rank: the send buffer for alltoall and switch, the receive\n"
      "buffer for allgather (nccl-tests' choice).\n",
      "dsp-bench"};
  app.footer(
      "Columns: size (B), count (elements), type, time (us: the median over iterations of the slowest\n"
      "rank's time), algbw = size / time and busbw = algbw * (n-1)/n (GB/s), #wrong (elements that differ\n"
      "from the reference, summed over ranks; -1: not checked, with -c 0 and always for the unchecked\n"
      "references mpi-alltoall and memcpy), shape (the global tensor AxBxC of a switch and its\n"
      "references, - otherwise). The text table ends with '# Avg bus bandwidth : X' (GB/s, mean busbw\n"
      "over the sizes); with csv or json on stdout that line goes to stderr, with -O to stdout; json\n"
      "also has avg_busbw.\n"
      "\n"
      "-B nccl (builds with dsp::nccl and a CUDA Kokkos) runs the same ops on dsp::NcclCommunicator with\n"
      "tensors and buffers in Kokkos::CudaSpace, one GPU per rank (local rank modulo the GPUs seen); each\n"
      "timed iteration ends with a stream synchronization. alltoall is then one ncclAlltoAll (NCCL 2.28\n"
      "or newer) or grouped ncclSend/ncclRecv (the header says which), nccl-alltoall the same call on\n"
      "the switch's bytes, memcpy a device-to-device cudaMemcpyAsync of the local block:\n"
      "  mpirun -np 8 dsp-bench -B nccl -o switch,nccl-alltoall,memcpy -b 1M -e 1G -c 1");
  app.get_formatter()->column_width(32);
  // A repeated option takes its last value, as it always did here (CLI11
  // refuses repeats by default).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // --help wins over whatever else the line holds, as it did: raised as it
  // is read, before the other options are converted and checked.
  app.set_help_flag();
  app.add_flag_callback(
         "-h,--help", [] { throw CLI::CallForHelp(); }, "print this help and exit")
      ->trigger_on_parse();

  // Range's own description ("INT in [1 - 2147483647]") would crowd the help.
  const auto at_least = [](int min) { return CLI::Range(min, std::numeric_limits<int>::max()).description(""); };
  int check = o.check;  // 0|1, read as an integer: non-zero is on
  std::string agreement = "1";
  std::pair<int, int> dims{o.dim_from, o.dim_to};
  app.add_option("-b,--minbytes", o.min_bytes, "smallest size in bytes per rank (K, M, G suffixes)")
      ->transform(size_value(1))
      ->type_name("N")
      ->default_str("32");
  app.add_option("-e,--maxbytes", o.max_bytes, "largest size")
      ->transform(size_value(1))
      ->type_name("N")
      ->default_str("32M");
  app.add_option("-f,--stepfactor", o.factor,
                 "multiply the size by F each step: F above 1 that grows -b by\n"
                 "at least one byte (F >= 1 + 1/b), at most 2^32; from -b to -e\n"
                 "at most 1000 sizes")
      ->type_name("F")
      ->capture_default_str();
  app.add_option("-i,--stepbytes", o.step, "add N bytes each step instead (at most 1000 sizes)")
      ->transform(size_value(0))
      ->type_name("N");
  app.add_option("-n,--iters", o.iters, "timed iterations per size")
      ->check(at_least(1))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup, "untimed iterations first")
      ->check(at_least(0))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("-c,--check", check,
                 "check every element against the reference\n"
                 "(0: no check, and #wrong is reported as -1)")
      ->type_name("0|1")
      ->capture_default_str();
  app.add_option("-d,--datatype", o.type, "element type (bf16, fp16: dsp::bfloat16, dsp::float16)")
      ->check(CLI::IsMember(known_types))
      ->type_name("T")
      ->capture_default_str();
  app.add_option("-o,--op", o.op,
                 "alltoall | allgather | switch, one table each; references for the\n"
                 "switch's shape: mpi-alltoall (raw MPI_Alltoall of the same bytes),\n"
                 "mpi-alltoallw (subarray datatypes, dims 0,1, float), memcpy (of the\n"
                 "local block); with -B nccl: nccl-alltoall (ncclAlltoAll of the same\n"
                 "bytes) and memcpy (device to device). pack, unpack: the switch's pack\n"
                 "or unpack kernel alone, on the backend's memory and execution space:\n"
                 "rank 0's alltoallv plan among --peers ranks, size about rank 0's block\n"
                 "(compare with memcpy at 1 rank)")
      ->check(CLI::Validator(
          [](std::string& list) -> std::string {
            const CLI::IsMember known(known_ops);
            for (const std::string& op : split_ops(list))
              if (const std::string why = op.empty() ? "an empty op" : known(op); !why.empty())
                return "'" + list + "': " + why;
            return list.empty() ? "no op given" : "";
          },
          ""))
      ->type_name("OP[,OP...]")
      ->capture_default_str();
  // Refuses a third number rather than keeping the last two (and so a
  // repeated --dims too).
  app.add_option("--dims", dims, "switch: Sharded<I> -> Sharded<J> of a rank-3 tensor")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw)
      ->check(CLI::Range(0, 2).description(""))
      ->type_name("I,J")
      ->default_str("0,1");
  app.add_option("--inner", o.inner, "switch: extent of the last dim (K, M, G suffixes)")
      ->transform(size_value(1))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--peers", o.peers,
                 "pack, unpack: ranks of the plan (0: this run's), at most 65536:\n"
                 "the tensor's A and B are multiples of P, so rank 0's block holds\n"
                 "at least P x --inner elements whatever -b says, and the plan P chunks")
      ->check(at_least(0))
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            long long p = 0;  // what is no number is at_least's to refuse
            try {
              p = std::stoll(v);
            } catch (const std::exception&) {
              return "";
            }
            return p <= max_peers ? ""
                                  : "must be at most " + std::to_string(max_peers) + ", not " + v +
                                        " (rank 0's block and the plan grow with the peers; see --help)";
          },
          ""))
      ->type_name("P")
      ->capture_default_str();
  app.add_option("--batch", o.batch,
                 "switch: N tensors of that shape in one dsp::batch\n"
                 "(size, count: per tensor; algbw counts all N)")
      ->check(CLI::IsMember({1, 3}))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--wire", o.wire,
                 "switch: the elements travel on wire W (dsp::Wire), each checked\n"
                 "against its bound in wire.hpp; pack, unpack: W's pack or unpack\n"
                 "kernel alone (size: bytes read plus written). W carries -d's type:\n"
                 "float bf16|fp16|fp8_e4m3, bf16 fp8_e4m3, fp16 fp8_e4m3|bf16,\n"
                 "double fp32 (dsp::wire_carries)")
      ->check(CLI::IsMember(wire_names()))
      ->type_name("W")
      ->capture_default_str();
  app.add_option("-a,--agreement", agreement,
                 "dsp's cross-rank agreement check: 1 before every call, 0 off,\n"
                 "first_call (AgreementMode::first_call: a call's first time only)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            bool on = false, first = false;
            return parse_agreement(v, on, first) ? "" : "'" + v + "' is not 0, 1 or first_call";
          },
          ""))
      ->type_name("0|1|first_call")
      ->default_str("1");
  app.add_flag("--graph", o.graph,
               "-B nccl with -a first_call: capture the call once in a CUDA graph\n"
               "(after the warm-up) and time its replays, output checked (switch,\n"
               "alltoall, allgather, memcpy, nccl-alltoall; CUDA builds only)");
  app.add_option("-B,--backend", o.backend,
                 "mpi: host memory; nccl: device memory, one GPU per rank\n"
                 "(only in builds with dsp::nccl and a CUDA Kokkos)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->type_name("NAME")
      ->capture_default_str();
  app.add_option("-F,--format", o.format, "table format")
      ->check(CLI::IsMember({"text", "csv", "json"}))
      ->type_name("FMT")
      ->capture_default_str();
  app.add_option("-O,--output", o.out,
                 "write the table there instead of stdout (rank 0; created before\n"
                 "the run: a path that cannot be written fails at once, exit code 2)")
      ->type_name("FILE");
  // One line, the option and the reason (CLI11's default adds a second line).
  app.failure_message(
      [](const CLI::App*, const CLI::Error& e) { return "dsp-bench: " + std::string(e.what()) + "\n"; });

  try {
    app.parse(argc, argv);
    // What no single option can check.
    if (o.min_bytes > o.max_bytes)
      throw CLI::ValidationError("--minbytes",
                                 std::to_string(o.min_bytes) + " is above --maxbytes " + std::to_string(o.max_bytes));
    if (o.step == 0) {
      std::ostringstream f;
      f << o.factor;
      if (!(o.factor > 1 && std::isfinite(o.factor)))
        throw CLI::ValidationError("--stepfactor", f.str() + " is not a finite factor above 1 (or step by -i N)");
      if (o.factor > max_factor)
        throw CLI::ValidationError("--stepfactor", f.str() + " is too large (at most 2^32 = 4294967296)");
      // floor(b F) >= b + 1 at b = -b, and so at every larger b.
      const double b = double(o.min_bytes);
      if (b * o.factor < b + 1) {
        // 1 + 1/b, with the digits it takes for that text to be enough.
        std::ostringstream least;
        for (int digits = 6; digits <= 17; ++digits) {
          least.str("");
          least.precision(digits);
          least << 1 + 1 / b;
          if (b * std::stod(least.str()) >= b + 1) break;
        }
        throw CLI::ValidationError("--stepfactor", f.str() + " grows --minbytes " + std::to_string(o.min_bytes) +
                                                       " by less than one byte per step: give at least " + least.str() +
                                                       " (1 + 1/" + std::to_string(o.min_bytes) + "), or step by -i N");
      }
    }
    o.sizes = step_sizes(o, max_sizes);
    if (o.sizes.size() > max_sizes) {
      std::ostringstream by;
      if (o.step > 0) by << o.step;
      else by << o.factor;
      throw CLI::ValidationError(o.step > 0 ? "--stepbytes" : "--stepfactor",
                                 by.str() + " from --minbytes " + std::to_string(o.min_bytes) + " to --maxbytes " +
                                     std::to_string(o.max_bytes) + " makes more than " + std::to_string(max_sizes) +
                                     " sizes (at most " + std::to_string(max_sizes) +
                                     " per op): a larger step or a narrower range");
    }
    parse_agreement(agreement, o.agreement, o.first_call);  // the option's check accepted it
    o.ops = split_ops(o.op);
    const auto runs_any = [&](std::initializer_list<const char*> names) {
      return std::ranges::any_of(o.ops, [&](const std::string& op) {
        return std::ranges::any_of(names, [&](const char* n) { return op == n; });
      });
    };
    if (o.wire != "exact") {
      const dsp::ElemKind k = kind_of(o.type);
      if (!dsp::wire_carries(wire_of(o.wire), k))
        throw CLI::ValidationError("--wire",
                                   o.wire + " does not carry -d " + o.type + " (dsp::wire_carries): -d " + o.type +
                                       (k == dsp::ElemKind::other ? std::string(" travels exact only")
                                                                  : std::string(" travels on ") + dsp::wires_for(k)));
      if (!runs_any({"switch", "pack", "unpack"}))
        throw CLI::ValidationError("--wire", o.wire + " applies to -o switch, pack and unpack, not to -o " + o.op);
    }
    if (o.graph) {
#if defined(DSP_BENCH_WITH_NCCL)
      if (o.backend != "nccl") throw CLI::ValidationError("--graph", "CUDA graphs need -B nccl, not -B " + o.backend);
      if (!o.first_call)
        throw CLI::ValidationError("--graph", "needs -a first_call, not -a " + agreement +
                                                  ": the agreement check of every call waits on the host, which a "
                                                  "CUDA graph cannot capture");
      for (const std::string& op : o.ops)
        if (op != "switch" && op != "alltoall" && op != "allgather" && op != "memcpy" && op != "nccl-alltoall")
          throw CLI::ValidationError("--graph", "-o " + op +
                                                    " is not captured (its timed call waits on the host); --graph "
                                                    "times switch, alltoall, allgather, memcpy and nccl-alltoall");
#else
      throw CLI::ValidationError("--graph",
                                 "CUDA graphs need -B nccl, and this dsp-bench is built without it (a "
                                 "build with -DDSP_ENABLE_NCCL=ON against a CUDA-enabled Kokkos)");
#endif
    }
    // A DSP_* environment value dsp does not accept would fail the first
    // collective; the kernels timed alone (pack, unpack) would never see it.
    if (!dsp::detail::settings_ok()) throw CLI::ValidationError(dsp::detail::settings_error());
  } catch (const CLI::ParseError& e) {
    std::ostream discard(nullptr);  // no buffer: the other ranks' copies go nowhere
    const int rc = app.exit(e, rank == 0 ? std::cout : discard, rank == 0 ? std::cerr : discard);
    MPI_Finalize();
    std::exit(rc == 0 ? 0 : 2);  // CLI11's own codes (105 and so on) would mean nothing here
  }
  o.check = check != 0;
  std::tie(o.dim_from, o.dim_to) = dims;
  o.op = o.ops.front();
  return o;
}

struct Row {
  std::size_t bytes = 0, count = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  long long wrong = -1;
  std::array<std::size_t, 3> shape{};  // global tensor of a switch (and its references); all 0 for flat buffers
};

// The shape column: "AxBxC", or "-" for the flat buffers of alltoall and allgather.
std::string shape_text(const Row& r) {
  if (r.shape[0] == 0) return "-";
  return std::to_string(r.shape[0]) + "x" + std::to_string(r.shape[1]) + "x" + std::to_string(r.shape[2]);
}

// Mean bus bandwidth over the sizes run (nccl-tests' "Avg bus bandwidth").
double avg_busbw(const std::vector<Row>& rows) {
  double sum = 0;
  for (const Row& r : rows) sum += r.busbw;
  return rows.empty() ? 0 : sum / double(rows.size());
}

// Calls f(begin, end) on parts of [0, n) in threads of their own, one per
// hardware thread (at most 64), and returns the sum of what they return:
// the host loops that fill and check the buffers of the kernels timed alone,
// which would otherwise take most of a large size's time on a machine whose
// GPU does the timed part in a millisecond. Small n: one call, no threads.
template <class F>
long long host_parallel(std::size_t n, F&& f) {
  const std::size_t threads = std::min<std::size_t>(64, std::max(1u, std::thread::hardware_concurrency()));
  if (n < (std::size_t(1) << 22) || threads == 1) return f(std::size_t(0), n);
  const std::size_t per = (n + threads - 1) / threads;
  std::vector<long long> sums(threads, 0);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { sums[t] = f(std::min(n, t * per), std::min(n, (t + 1) * per)); });
  for (std::thread& t : pool) t.join();
  long long sum = 0;
  for (const long long v : sums) sum += v;
  return sum;
}

// Value at a global linear index: exact in every type (wraps in the small
// ones). The floating types hold values a wire must round, over a range
// that exercises every part of wire.hpp's bounds: float up to 20
// significant bits, times 2^-6, 2^-10, 2^-14 or 2^-18 by turns (so an fp8
// block spans 2^12 and more, and some values are below fp16's normal
// range), double the same thirds; the half types cycle through every
// encoding of +-[2^-7, 2^9), so neighbours differ.
template <class T>
T value_at(std::size_t g) {
  const std::size_t k = g % (std::size_t(1) << 20) + 1;
  if constexpr (std::is_same_v<T, dsp::bfloat16>) {
    const auto c = static_cast<std::uint16_t>(g % 4096);  // 0x3c00: 2^-7; 7 fraction bits
    return dsp::bfloat16::from_bits(static_cast<std::uint16_t>((c & 2048u) << 4 | (0x3c00u + (c & 2047u))));
  } else if constexpr (std::is_same_v<T, dsp::float16>) {
    const auto c = static_cast<std::uint16_t>(g % 32768);  // 0x2000: 2^-7; 10 fraction bits
    return dsp::float16::from_bits(static_cast<std::uint16_t>((c & 16384u) << 1 | (0x2000u + (c & 16383u))));
  } else if constexpr (std::is_same_v<T, float>) {
    constexpr float scale[4] = {0x1p-6f, 0x1p-10f, 0x1p-14f, 0x1p-18f};
    return static_cast<float>(k) * scale[g % 4];
  } else if constexpr (std::is_same_v<T, double>) {
    constexpr double scale[4] = {0x1p-6, 0x1p-10, 0x1p-14, 0x1p-18};
    return static_cast<double>(k) / 3 * scale[g % 4];
  } else if constexpr (sizeof(T) == 1) {
    return static_cast<T>(g * 7 + 1);
  } else {
    return static_cast<T>(k);
  }
}

// The largest |x' - x| wire w lets a finite value x of kind k arrive with
// (wire.hpp's bounds); a: the largest finite |x| of x's fp8 block. float on
// fp16 from 65520 on arrives as an infinity, which the caller checks.
double wire_bound(dsp::Wire w, dsp::ElemKind k, double x, double a) {
  const double ax = std::fabs(x);
  switch (w) {
    case dsp::Wire::exact: return 0;
    case dsp::Wire::bf16:
      if (k == dsp::ElemKind::f16) return 0x1p-8 * ax;  // fp16's whole range is inside bf16's normal one
      return ax >= 0x1p-126 ? 0x1p-8 * ax : 0x1p-134;
    case dsp::Wire::fp16: return ax >= 0x1p-14 ? 0x1p-11 * ax : 0x1p-25;
    case dsp::Wire::fp8_e4m3: {
      const double s = a * 0x1p-10 / 448;
      if (k == dsp::ElemKind::bf16) return (0x1p-4 + 0x1p-8 + 0x1p-12) * ax + 1.01 * s + 0x1p-134;
      if (k == dsp::ElemKind::f16) return (0x1p-4 + 0x1p-11 + 0x1p-15) * ax + 1.01 * s + 0x1p-25;
      return (0x1p-4 * ax + s) * (1 + 0x1p-22) + 0x1p-150;
    }
    case dsp::Wire::fp32: return ax >= 0x1p-126 ? 0x1p-24 * ax : 0x1p-150;
  }
  return 0;
}

// Whether x arrived as v within wire w's bound.
bool within_bound(dsp::Wire w, dsp::ElemKind k, double x, double a, double v) {
  if (w == dsp::Wire::fp16 && k == dsp::ElemKind::f32 && std::fabs(x) >= 65520)
    return std::isinf(v) && std::signbit(v) == std::signbit(x);
  return std::fabs(v - x) <= wire_bound(w, k, x, a);  // false for NaN
}

#if defined(DSP_BENCH_WITH_NCCL)
template <class Comm>
inline constexpr bool is_nccl_v = std::is_same_v<Comm, dsp::NcclCommunicator>;
#else
template <class Comm>
inline constexpr bool is_nccl_v = false;
#endif

// Host copies of buffers in any memory space: the same view for host memory
// (no copy), a mirror for device memory. Filling and checking happen there,
// outside the timed region.
template <class V>
auto host_copy(const V& v) {
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v);
}
template <class V, class H>
void upload(const V& v, const H& h) {
  Kokkos::deep_copy(v, h);
}

template <class Comm>
class Runner {
 public:
  // `sync` ends every timed iteration (a stream-ordered backend returns
  // before its work is done; nothing for MPI).
  Runner(Comm& comm, const Options& o, std::function<void()> sync)
      : comm_(comm), o_(o), n_(comm.size()), p_(comm.rank()), sync_(std::move(sync)) {}

  template <class T>
  Row run(std::size_t bytes) {
    if (o_.op == "alltoall") return alltoall<T>(bytes);
    if (o_.op == "allgather") return allgather<T>(bytes);
    if (o_.op == "memcpy") return raw<T>(bytes, true);
    if (o_.op == "pack" || o_.op == "unpack") {
      if (o_.wire != "exact") return wire_kernel<T>(bytes, o_.op == "pack");
      return kernel<T>(bytes, o_.op == "pack");
    }
    if constexpr (is_nccl_v<Comm>) {
      if (o_.op == "nccl-alltoall") return raw<T>(bytes, false);
      if (o_.op == "mpi-alltoall" || o_.op == "mpi-alltoallw")
        throw std::runtime_error("dsp-bench: -o " + o_.op + " is for -B mpi (with -B nccl: nccl-alltoall)");
    } else {
      if (o_.op == "mpi-alltoall") return raw<T>(bytes, false);
      if (o_.op == "mpi-alltoallw") return alltoallw<T>(bytes);
      if (o_.op == "nccl-alltoall") throw std::runtime_error("dsp-bench: -o nccl-alltoall is for -B nccl");
    }
    if (o_.op != "switch") throw std::runtime_error("dsp-bench: unknown op " + o_.op);
    return dispatch_switch<T>(bytes);
  }

 private:
  // The median over -n iterations of f (after -w untimed ones), each ended by
  // sync_. With --graph, replays of f captured in a CUDA graph instead;
  // `poison` then overwrites the outputs after the capture, so that the
  // check afterwards sees what the replays wrote.
  template <class F>
  double timed(F&& f, const std::function<void()>& poison = {}) {
#if defined(DSP_BENCH_WITH_NCCL)
    if constexpr (is_nccl_v<Comm>) {
      if (o_.graph) return timed_graph(f, poison);
    }
#endif
    (void)poison;
    auto step = [&] {
      f();
      sync_();
    };
    for (int k = 0; k < o_.warmup; ++k) step();
    std::vector<double> t;
    for (int k = 0; k < o_.iters; ++k) t.push_back(dsp_bench::time_max(MPI_COMM_WORLD, step));
    return dsp_bench::median(t);
  }

#if defined(DSP_BENCH_WITH_NCCL)
  // A captured graph and its executable form, destroyed on every path.
  struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    Graph() = default;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    ~Graph() {
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
    }
  };

  // --graph: the warm-up runs f as usual (at least once: under first_call
  // that call is the checked one, and it fills the plan and table caches and
  // the workspaces), then f is captured once on the communicator's stream
  // (relaxed mode, as test_nccl does) and each iteration is one
  // cudaGraphLaunch and the stream synchronization.
  template <class F>
  double timed_graph(F& f, const std::function<void()>& poison) {
    const cudaStream_t stream = comm_.stream();
    for (int k = 0; k < std::max(1, o_.warmup); ++k) {
      f();
      sync_();
    }
    Graph g;
    DSP_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    try {
      f();
    } catch (...) {
      cudaStreamEndCapture(stream, &g.graph);  // ends the capture; the error raised in f is the one to report
      throw;
    }
    DSP_CHECK_CUDA(cudaStreamEndCapture(stream, &g.graph));
    DSP_CHECK_CUDA(cudaGraphInstantiate(&g.exec, g.graph, 0));
    if (poison) poison();
    auto replay = [&] {
      DSP_CHECK_CUDA(cudaGraphLaunch(g.exec, stream));
      sync_();
    };
    for (int k = 0; k < o_.warmup; ++k) replay();
    std::vector<double> t;
    for (int k = 0; k < o_.iters; ++k) t.push_back(dsp_bench::time_max(MPI_COMM_WORLD, replay));
    return dsp_bench::median(t);
  }
#endif

  // Sets every byte of v to 0xff on the communicator's stream (a NaN in the
  // floating types): what a graph's replays must overwrite. Only --graph
  // (-B nccl) calls it.
  template <class V>
  void poison(const V& v) const {
#if defined(DSP_BENCH_WITH_NCCL)
    if constexpr (is_nccl_v<Comm>) {
      DSP_CHECK_CUDA(cudaMemsetAsync(v.data(), 0xff, v.span() * sizeof(typename V::value_type), comm_.stream()));
      sync_();
    }
#endif
    (void)v;
  }

  // The agreement settings of -a around the timed calls of a switch, the
  // process's own restored after.
  struct AgreementScope {
    bool on;
    dsp::AgreementMode mode;
    explicit AgreementScope(const Options& o) : on(dsp::agreement_checks()), mode(dsp::agreement_mode()) {
      dsp::set_agreement_checks(o.agreement);
      if (o.first_call) dsp::set_agreement_mode(dsp::AgreementMode::first_call);
    }
    AgreementScope(const AgreementScope&) = delete;
    AgreementScope& operator=(const AgreementScope&) = delete;
    ~AgreementScope() {
      dsp::set_agreement_checks(on);
      dsp::set_agreement_mode(mode);
    }
  };
  long long sum_wrong(long long w) const {
    long long s = 0;
    MPI_Allreduce(&w, &s, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return s;
  }
  Row finish(std::size_t bytes, std::size_t count, double t, long long wrong,
             std::array<std::size_t, 3> shape = {}) const {
    Row r{bytes, count, t * 1e6, 0, 0, wrong, shape};
    r.algbw = t > 0 ? double(bytes) / t * 1e-9 : 0;
    r.busbw = r.algbw * (n_ - 1) / n_;
    return r;
  }

  // Element k of the block rank a sends to rank b: its value names (a, b, k).
  template <class T>
  static T a2a_value(int a, int b, int n, std::size_t per, std::size_t k) {
    return value_at<T>((std::size_t(a) * n + b) * per + k);
  }

  template <class T>
  Row alltoall(std::size_t bytes) {
    const std::size_t per = std::max<std::size_t>(1, bytes / sizeof(T) / n_), count = per * n_;
    Kokkos::View<T*, typename Comm::memory_space> s("s", count), r("r", count);
    {
      auto h = Kokkos::create_mirror_view(s);
      for (int q = 0; q < n_; ++q)
        for (std::size_t k = 0; k < per; ++k) h(q * per + k) = a2a_value<T>(p_, q, n_, per, k);
      upload(s, h);
    }
    const double t = timed([&] { comm_.all_to_all(s.data(), r.data(), per, sizeof(T)); }, [&] { poison(r); });
    long long wrong = -1;
    if (o_.check) {
      const auto h = host_copy(r);
      wrong = 0;
      for (int q = 0; q < n_; ++q)
        for (std::size_t k = 0; k < per; ++k) wrong += h(q * per + k) != a2a_value<T>(q, p_, n_, per, k);
      wrong = sum_wrong(wrong);
    }
    return finish(count * sizeof(T), count, t, wrong);
  }

  template <class T>
  Row allgather(std::size_t bytes) {
    const std::size_t per = std::max<std::size_t>(1, bytes / sizeof(T) / n_), count = per * n_;
    Kokkos::View<T*, typename Comm::memory_space> s("s", per), r("r", count);
    {
      auto h = Kokkos::create_mirror_view(s);
      for (std::size_t k = 0; k < per; ++k) h(k) = value_at<T>(p_ * per + k);
      upload(s, h);
    }
    const double t = timed([&] { comm_.all_gather(s.data(), r.data(), per, sizeof(T)); }, [&] { poison(r); });
    long long wrong = -1;
    if (o_.check) {
      const auto h = host_copy(r);
      wrong = host_parallel(count, [&](std::size_t b, std::size_t e) {
        long long w = 0;
        for (std::size_t k = b; k < e; ++k) w += h(k) != value_at<T>(k);
        return w;
      });
      wrong = sum_wrong(wrong);
    }
    return finish(count * sizeof(T), count, t, wrong);
  }

  // References for the switch of the same shape, not checked: the backend's
  // raw all-to-all of the same bytes (MPI_Alltoall; with NCCL the
  // communicator's all-to-all, ncclAlltoAll where the NCCL has it), or a copy
  // of the local block (memcpy; with NCCL a device-to-device cudaMemcpyAsync).
  template <class T>
  Row raw(std::size_t bytes, bool copy) {
    const auto g = shape<T>(bytes);
    const std::size_t count = g[0] * g[1] * g[2] / n_, per = count / n_;
    double time = 0;
    if constexpr (is_nccl_v<Comm>) {
#if defined(DSP_BENCH_WITH_NCCL)
      Kokkos::View<T*, typename Comm::memory_space> s("s", count), r("r", count);
      // Filled from a host mirror: Kokkos::deep_copy(s, T(1)) (a ViewFill kernel)
      // wrote out of bounds on an H200 with the Kokkos 4.6.99 CUDA build of
      // docs/gpu.md (compute-sanitizer: 4 GB before the allocation).
      auto h = Kokkos::create_mirror_view(s);
      host_parallel(count, [&](std::size_t b, std::size_t e) {
        for (std::size_t k = b; k < e; ++k) h(k) = T(1);
        return 0LL;
      });
      upload(s, h);
      Kokkos::fence();
      time = copy ? timed([&] {
        DSP_CHECK_CUDA(
            cudaMemcpyAsync(r.data(), s.data(), count * sizeof(T), cudaMemcpyDeviceToDevice, comm_.stream()));
      })
                  : timed([&] { comm_.all_to_all(s.data(), r.data(), per, sizeof(T)); });
#endif
    } else {
      std::vector<T> s(count, T(1)), r(count);
      MPI_Datatype t;
      MPI_Type_contiguous(sizeof(T), MPI_BYTE, &t);
      MPI_Type_commit(&t);
      time = copy ? timed([&] { std::memcpy(r.data(), s.data(), count * sizeof(T)); })
                  : timed([&] { MPI_Alltoall(s.data(), int(per), t, r.data(), int(per), t, MPI_COMM_WORLD); });
      MPI_Type_free(&t);
    }
    return finish(count * sizeof(T), count, time, -1, g);
  }

  // MPI_Alltoallw with subarray datatypes doing the switch (float only).
  template <class T>
  Row alltoallw(std::size_t bytes) {
    if constexpr (!std::is_same_v<T, float>) {
      throw std::runtime_error("dsp-bench: mpi-alltoallw is for -d float only");
    } else {
      const auto g = shape<T>(bytes);
      using X = dsp::DistTensor<T, 3, dsp::Sharded<0>, Comm>;
      using Y = dsp::DistTensor<T, 3, dsp::Sharded<1>, Comm>;
      if (o_.dim_from != 0 || o_.dim_to != 1) throw std::runtime_error("dsp-bench: mpi-alltoallw does --dims 0,1 only");
      X x(comm_, g);
      Y y(comm_, g);
      fill(x);
      dsp_bench::AlltoallwSwitch w(MPI_COMM_WORLD, {g[0], g[1], g[2]}, 0, 1);
      const double t = timed([&] { w(x.local().data(), y.local().data()); });
      long long wrong = -1;
      if (o_.check) wrong = sum_wrong(count_wrong(y, dsp::Wire::exact, 0));
      return finish(x.local_size() * sizeof(T), x.local_size(), t, wrong, g);
    }
  }

  // The switch's pack (or unpack) kernel alone, as rank 0 of --peers ranks
  // runs it in an alltoallv switch (the plan every backend without
  // point-to-point exchange, NCCL included, uses above 8 KiB per rank), on
  // this backend's memory and execution space. The size is the elements
  // copied (rank 0's block less its own chunk). Checked against the host
  // path of the same kernel, which the tests check against the reference.
  // The tensor of pack and unpack (global extents) and rank 0's block of it:
  // the input (Sharded<i>) for a pack, the output (Sharded<j>) for an unpack.
  struct KernelShape {
    std::array<std::size_t, 3> global, block;
    int peers;
    std::size_t i, j;
    std::size_t block_elems() const { return block[0] * block[1] * block[2]; }
  };
  template <class T>
  KernelShape kernel_shape(std::size_t bytes, bool pack) const {
    const int peers = o_.peers > 0 ? o_.peers : n_;
    const std::size_t i = std::size_t(o_.dim_from), j = std::size_t(o_.dim_to);
    if (i == j) throw std::runtime_error("dsp-bench: pack and unpack need --dims I,J with I != J");
    const auto g = shape<T>(bytes, peers);
    std::array<std::size_t, 3> block = g;
    block[pack ? i : j] = dsp::Partition{g[pack ? i : j], std::size_t(peers)}.count(0);
    // A and B are multiples of the peers: with many peers and a wide --inner
    // the block can dwarf the size asked for. Refused before anything is allocated.
    const double block_bytes = double(block[0]) * double(block[1]) * double(block[2]) * double(sizeof(T));
    if (block_bytes > std::max(4.0 * double(bytes), 256.0 * (1 << 20))) {
      std::ostringstream m;
      m << "dsp-bench: -o " << o_.op << " with --peers " << peers << " and --inner " << o_.inner << " at size " << bytes
        << ": rank 0's block would be " << block_bytes / (1 << 20)
        << " MiB (A and B are multiples of --peers, so it holds at least --peers x --inner elements): "
           "lower --peers or --inner";
      throw std::runtime_error(m.str());
    }
    return {g, block, peers, i, j};
  }

  template <class T>
  Row kernel(std::size_t bytes, bool pack) {
    using M = typename Comm::memory_space;
    const KernelShape ks = kernel_shape<T>(bytes, pack);
    const auto& g = ks.global;
    const std::size_t i = ks.i, j = ks.j;
    const int peers = ks.peers;
    const auto plan = dsp::detail::plan_alltoallv(std::span<const std::size_t>(g), i, j, 0, peers);
    const auto& tasks = pack ? plan.pack : plan.unpack;
    if (tasks.empty())
      throw std::runtime_error("dsp-bench: the switch " + std::to_string(i) + "->" + std::to_string(j) + " needs no " +
                               (pack ? "pack" : "unpack") +
                               ": its chunks are contiguous on that side, and dsp transfers them in place (the " +
                               (pack ? "unpack" : "pack") + " of --dims " + std::to_string(j) + "," +
                               std::to_string(i) + " is the same kernel's other side)");
    const std::size_t block_elems = ks.block_elems();
    const std::size_t in_elems = pack ? block_elems : plan.recv_elems;
    const std::size_t out_elems = pack ? plan.send_elems : block_elems;
    const std::size_t moved = pack ? plan.send_elems : plan.recv_elems;
    Kokkos::View<T*, M> in("in", in_elems), out("out", out_elems);
    auto hin = Kokkos::create_mirror_view(in);
    host_parallel(in_elems, [&](std::size_t b, std::size_t e) {
      for (std::size_t k = b; k < e; ++k) hin(k) = value_at<T>(k);
      return 0LL;
    });
    upload(in, hin);
    Kokkos::fence();
    const auto exec = dsp::detail::execution_space_for<M>(comm_);
    const double t = timed([&] {
      dsp::detail::copy_runs(exec, out.data(), in.data(), sizeof(T), tasks);
      exec.fence();
    });
    long long wrong = -1;
    if (o_.check) {
      std::vector<T> ref(out_elems);
      const auto hsrc = host_copy(in);
      dsp::detail::copy_runs(Kokkos::DefaultHostExecutionSpace{}, ref.data(), hsrc.data(), sizeof(T), tasks);
      Kokkos::DefaultHostExecutionSpace{}.fence();
      const auto hout = host_copy(out);
      wrong = host_parallel(out_elems, [&](std::size_t b, std::size_t e) {
        long long w = 0;
        for (std::size_t k = b; k < e; ++k) w += !(hout(k) == ref[k]);
        return w;
      });
      wrong = sum_wrong(wrong);
    }
    return finish(moved * sizeof(T), moved, t, wrong, g);
  }

  // -o pack|unpack --wire W: the wire's pack (or unpack) kernel alone
  // (detail::wire_pack / wire_unpack), as rank 0 of --peers ranks runs it in
  // a switch on that wire: one section per peer but itself, each converted by
  // its own launch, on this backend's memory and execution space. The size
  // is the bytes the kernels read plus those they write (the elements and
  // the wire sections, scales and padding included), so algbw is memory
  // traffic, to compare with twice a copy's algbw. Checked, element by
  // element and scale by scale, against the host path of the same kernels.
  template <class T>
  Row wire_kernel(std::size_t bytes, bool pack) {
    constexpr dsp::ElemKind kind = dsp::elem_kind_v<T>;
    if constexpr (kind == dsp::ElemKind::other) {
      throw std::runtime_error("dsp-bench: -d " + o_.type + " travels on no wire");  // parse refuses it first
    } else {
      using M = typename Comm::memory_space;
      const KernelShape ks = kernel_shape<T>(bytes, pack);
      const auto plan = dsp::detail::plan_peer_switch(std::span<const std::size_t>(ks.global), ks.i, ks.j, 0, ks.peers);
      const auto& chunks = pack ? plan.sends : plan.recvs;  // runs in rank 0's block
      const dsp::Wire w = wire_of(o_.wire);
      std::vector<std::size_t> at;  // each section's byte offset
      std::size_t wire_bytes = 0, elems = 0;
      for (const dsp::PeerRuns& c : chunks) {
        at.push_back(wire_bytes);
        wire_bytes += dsp::wire_section_bytes(w, c.elems, sizeof(T));
        elems += c.elems;
      }
      const std::size_t block_elems = ks.block_elems();
      Kokkos::View<T*, M> tensor("tensor", block_elems);
      Kokkos::View<unsigned char*, M> sections("sections", wire_bytes);
      const Kokkos::DefaultHostExecutionSpace host;
      // Runs every section's kernel on `exec`: a pack of `t` into `s`, or an unpack of `s` into `t`.
      auto convert = [&](const auto& exec, bool to_wire, T* t, unsigned char* s) {
        for (std::size_t c = 0; c < chunks.size(); ++c) {
          if (to_wire) dsp::detail::wire_pack(exec, w, kind, s + at[c], t, chunks[c].runs, chunks[c].elems);
          else dsp::detail::wire_unpack(exec, w, kind, t, chunks[c].runs, s + at[c], chunks[c].elems);
        }
      };
      // The input: the block's values (pack), or the sections they make (unpack).
      std::vector<T> values(block_elems);
      host_parallel(block_elems, [&](std::size_t b, std::size_t e) {
        for (std::size_t k = b; k < e; ++k) values[k] = value_at<T>(k);
        return 0LL;
      });
      std::vector<unsigned char> wired(wire_bytes);
      if (pack) {
        upload(tensor, Kokkos::View<const T*, Kokkos::HostSpace>(values.data(), block_elems));
      } else {
        convert(host, true, values.data(), wired.data());
        host.fence();
        upload(sections, Kokkos::View<const unsigned char*, Kokkos::HostSpace>(wired.data(), wire_bytes));
      }
      Kokkos::fence();
      const auto exec = dsp::detail::execution_space_for<M>(comm_);
      const double t = timed([&] {
        convert(exec, pack, tensor.data(), sections.data());
        exec.fence();
      });
      long long wrong = -1;
      if (o_.check) {
        wrong = 0;
        if (pack) {
          std::vector<unsigned char> ref(wire_bytes);
          convert(host, true, values.data(), ref.data());
          host.fence();
          const auto got = host_copy(sections);
          const std::size_t width = w == dsp::Wire::fp8_e4m3 ? 1 : w == dsp::Wire::fp32 ? 4 : 2;
          for (std::size_t c = 0; c < chunks.size(); ++c) {  // scales and elements; the padding is nobody's
            const unsigned char *a = got.data() + at[c], *b = ref.data() + at[c];
            std::size_t head = 0;
            if (w == dsp::Wire::fp8_e4m3) {
              const std::size_t nb = (chunks[c].elems + dsp::kFp8Block - 1) / dsp::kFp8Block;
              for (std::size_t k = 0; k < nb; ++k) wrong += std::memcmp(a + 4 * k, b + 4 * k, 4) != 0;
              head = 4 * nb;
            }
            wrong += host_parallel(chunks[c].elems, [&](std::size_t e0, std::size_t e1) {
              long long bad = 0;
              for (std::size_t e = e0; e < e1; ++e)
                bad += std::memcmp(a + head + width * e, b + head + width * e, width) != 0;
              return bad;
            });
          }
        } else {
          std::vector<T> ref(block_elems);  // zeros, as the tensor: the own chunk's part stays so in both
          convert(host, false, ref.data(), wired.data());
          host.fence();
          const auto got = host_copy(tensor);
          wrong = host_parallel(block_elems, [&](std::size_t k0, std::size_t k1) {
            long long bad = 0;
            for (std::size_t k = k0; k < k1; ++k) bad += std::memcmp(&got(k), &ref[k], sizeof(T)) != 0;
            return bad;
          });
        }
        wrong = sum_wrong(wrong);
      }
      const std::size_t traffic = elems * sizeof(T) + wire_bytes;
      return finish(traffic, elems, t, wrong, ks.global);
    }
  }

  template <class T>
  Row dispatch_switch(std::size_t bytes) {
    const int i = o_.dim_from, j = o_.dim_to;
#define DSP_BENCH_CASE(I, J) \
  if (i == I && j == J) return do_switch<T, I, J>(bytes)
    DSP_BENCH_CASE(0, 1);
    DSP_BENCH_CASE(1, 0);
    DSP_BENCH_CASE(0, 2);
    DSP_BENCH_CASE(2, 0);
    DSP_BENCH_CASE(1, 2);
    DSP_BENCH_CASE(2, 1);
#undef DSP_BENCH_CASE
    return do_switch<T, 0, 0>(bytes);  // i == j: a local copy
  }

  // A rank-3 tensor [A, B, C] with C = --inner and A, B multiples of the rank
  // count, about `bytes` per rank.
  template <class T>
  std::array<std::size_t, 3> shape(std::size_t bytes, int ranks = 0) const {
    const std::size_t n = ranks > 0 ? ranks : n_;
    const std::size_t c = std::min<std::size_t>(o_.inner, std::max<std::size_t>(1, bytes / sizeof(T)));
    const std::size_t rows = std::max<std::size_t>(1, bytes / sizeof(T) * n / c);
    std::size_t a = std::max<std::size_t>(n, std::size_t(std::sqrt(double(rows))) / n * n);
    std::size_t b = std::max<std::size_t>(n, rows / a / n * n);
    return {a, b, c};
  }

  template <class T, std::size_t I, std::size_t J>
  Row do_switch(std::size_t bytes) {
    using X = dsp::DistTensor<T, 3, dsp::Sharded<I>, Comm>;
    using Y = dsp::DistTensor<T, 3, dsp::Sharded<J>, Comm>;
    const auto g = shape<T>(bytes);
    X x(comm_, g);
    Y y(comm_, g);
    fill(x);
    if (o_.batch != 1 || o_.wire != "exact") return switch_batch_or_wire<I, J>(x, y, g);
    double t = 0;
    {
      const AgreementScope agreement(o_);
      t = timed([&] { dsp::dynamic_switch<J>(x, y); }, [&] { poison(y.local()); });
    }
    long long wrong = -1;
    if (o_.check) wrong = sum_wrong(count_wrong(y, dsp::Wire::exact, I));
    return finish(x.local_size() * sizeof(T), x.local_size(), t, wrong, g);
  }

  // --batch 3 and --wire W: Q, K, V in one batch, the same input three times
  // (inputs are read only), each into its own output; or one tensor on a
  // wire (any type the wire carries: parse refuses the others).
  template <std::size_t I, std::size_t J, class X, class Y>
  Row switch_batch_or_wire(const X& x, Y& y, const std::array<std::size_t, 3>& g) {
    using T = typename X::value_type;
    const dsp::Wire wire = wire_of(o_.wire);
    const bool three = o_.batch == 3;
    Y y2 = three ? Y(comm_, g) : y, y3 = three ? Y(comm_, g) : y;  // two more outputs only for a batch
    auto one = [&] {
      if constexpr (dsp::elem_kind_v<T> != dsp::ElemKind::other) dsp::dynamic_switch<J>(x, y, wire);
      else dsp::dynamic_switch<J>(x, y);  // exact: no wire carries T
    };
    double t = 0;
    {
      const AgreementScope agreement(o_);
      t = three ? timed([&] { dsp::dynamic_switch<J>(dsp::batch(x, x, x), dsp::batch(y, y2, y3), wire); },
                        [&] {
        poison(y.local());
        poison(y2.local());
        poison(y3.local());
      })
                : timed(one, [&] { poison(y.local()); });
    }
    long long wrong = -1;
    if (o_.check) {
      wrong = count_wrong(y, wire, I);
      if (three) wrong += count_wrong(y2, wire, I) + count_wrong(y3, wire, I);
      wrong = sum_wrong(wrong);
    }
    Row r = finish(x.local_size() * sizeof(T), x.local_size(), t, wrong, g);
    r.algbw *= o_.batch;  // the size column is per tensor; algbw and busbw count all of them
    r.busbw *= o_.batch;
    return r;
  }

  // The reference value of element g (global multi-index) of a switch's tensor.
  template <class Z>
  static typename Z::value_type reference(const Z& z, const std::array<std::size_t, 3>& g) {
    const auto& e = z.global_extents();
    return value_at<typename Z::value_type>((g[0] * e[1] + g[1]) * e[2] + g[2]);
  }
  template <class Z>
  static void fill(const Z& z) {
    dsp::fill(z, [&](const auto& g) { return reference(z, g); });
    Kokkos::fence();
  }
  // The elements of z, the output of a switch from Sharded<i>, that differ
  // from the reference: exactly, or on a wire by more than its bound
  // (wire.hpp). For fp8 the bound needs the largest |x| of each element's
  // block of kFp8Block: the blocks are consecutive elements of the chunk the
  // element came in (row-major in the box that its sender p sent this
  // rank), so a first pass finds every block's largest value.
  template <class Z>
  long long count_wrong(const Z& z, dsp::Wire wire, std::size_t i) const {
    sync_();
    using T = typename Z::value_type;
    if (wire == dsp::Wire::exact)
      return static_cast<long long>(dsp::count_mismatches(z, [&](const auto& g) { return reference(z, g); }));
    constexpr std::size_t j = Z::layout_type::dim;
    const auto& e = z.global_extents();
    const dsp::Partition pi{e[i], std::size_t(n_)}, pj{e[j], std::size_t(n_)};
    const std::size_t q = std::size_t(p_);
    // Sender p of element g and the element's index in p's chunk.
    auto chunk_at = [&](const auto& g) {
      const std::size_t p = pi.owner(g[i]);
      std::array<std::size_t, 3> box{e[0], e[1], e[2]}, l{g[0], g[1], g[2]};
      box[i] = pi.count(p), l[i] -= pi.offset(p);
      box[j] = pj.count(q), l[j] -= pj.offset(q);
      return std::pair{p, (l[0] * box[1] + l[1]) * box[2] + l[2]};
    };
    const bool fp8 = wire == dsp::Wire::fp8_e4m3;
    std::vector<std::vector<double>> amax(std::size_t(fp8 ? n_ : 0));  // per sender, per block
    if (fp8)
      dsp::for_each(z, [&](const auto& g, const auto&) {
        const auto [p, k] = chunk_at(g);
        auto& a = amax[p];
        if (a.size() <= k / dsp::kFp8Block) a.resize(k / dsp::kFp8Block + 1, 0.0);
        const double x = std::fabs(double(static_cast<float>(reference(z, g))));
        if (std::isfinite(x)) a[k / dsp::kFp8Block] = std::max(a[k / dsp::kFp8Block], x);
      });
    long long w = 0;
    const dsp::ElemKind kind = dsp::elem_kind_v<T>;
    dsp::for_each(z, [&](const auto& g, const T& v) {
      double a = 0;
      if (fp8) {
        const auto [p, k] = chunk_at(g);
        a = amax[p][k / dsp::kFp8Block];
      }
      if constexpr (std::is_same_v<T, double>) w += !within_bound(wire, kind, reference(z, g), a, v);
      else w += !within_bound(wire, kind, static_cast<float>(reference(z, g)), a, static_cast<float>(v));
    });
    return w;
  }

  Comm& comm_;
  const Options& o_;
  int n_, p_;
  std::function<void()> sync_;
};

template <class Comm>
std::vector<Row> run_sizes(Comm& comm, const Options& o, std::function<void()> sync) {
  Runner<Comm> r(comm, o, std::move(sync));
  std::vector<Row> rows;
  for (const std::size_t b : o.sizes) {
    if (o.type == "float") rows.push_back(r.template run<float>(b));
    else if (o.type == "double") rows.push_back(r.template run<double>(b));
    else if (o.type == "int32") rows.push_back(r.template run<std::int32_t>(b));
    else if (o.type == "int64") rows.push_back(r.template run<std::int64_t>(b));
    else if (o.type == "int8") rows.push_back(r.template run<std::int8_t>(b));
    else if (o.type == "uint8") rows.push_back(r.template run<std::uint8_t>(b));
    else if (o.type == "bf16") rows.push_back(r.template run<dsp::bfloat16>(b));
    else if (o.type == "fp16") rows.push_back(r.template run<dsp::float16>(b));
    else throw std::runtime_error("dsp-bench: unknown datatype " + o.type);
  }
  return rows;
}

// nccl-tests' closing line; busbw in GB/s.
std::string avg_line(const std::vector<Row>& rows) {
  char line[64];
  std::snprintf(line, sizeof line, "# Avg bus bandwidth    : %g \n", avg_busbw(rows));
  return line;
}

// One op's table. `k` of `nops` ops: csv writes its header before the first
// table only, json wraps several ops' objects in an array. `about` (text
// only): a line on the backend, before the first table.
void print(std::ostream& os, const Options& o, int n, const std::vector<Row>& rows, const std::string& about,
           std::size_t k, std::size_t nops) {
  const std::string what =
      o.op == "switch" ? "switch " + std::to_string(o.dim_from) + "->" + std::to_string(o.dim_to) : o.op;
  // -a first_call, or DSP_AGREEMENT_MODE=first_call in the environment.
  const bool first_call = o.agreement && (o.first_call || dsp::agreement_mode() == dsp::AgreementMode::first_call);
  if (o.format == "csv") {
    // agreement: 1, 0, or first_call (the column's values before first_call existed are unchanged)
    if (k == 0) os << "op,ranks,backend,agreement,size,count,type,time_us,algbw,busbw,wrong,shape\n";
    for (const Row& r : rows)
      os << what << ',' << n << ',' << o.backend << ','
         << (first_call    ? "first_call"
             : o.agreement ? "1"
                           : "0")
         << ',' << r.bytes << ',' << r.count << ',' << o.type << ',' << r.time_us << ',' << r.algbw << ',' << r.busbw
         << ',' << r.wrong << ',' << shape_text(r) << '\n';
    return;
  }
  if (o.format == "json") {
    if (nops > 1) os << (k == 0 ? "[" : ",\n");
    os << "{\"op\": \"" << what << "\", \"ranks\": " << n << ", \"backend\": \"" << o.backend
       << "\", \"agreement\": " << (o.agreement ? "true" : "false") << ", \"agreement_mode\": \""
       << (first_call ? "first_call" : "every_call") << "\", \"wire\": \"" << o.wire << "\", \"batch\": " << o.batch
       << ", \"graph\": " << (o.graph ? "true" : "false") << ", \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      os << (i ? ",\n  " : "\n  ") << "{\"size\": " << r.bytes << ", \"count\": " << r.count << ", \"type\": \""
         << o.type << "\", \"time_us\": " << r.time_us << ", \"algbw\": " << r.algbw << ", \"busbw\": " << r.busbw
         << ", \"wrong\": " << r.wrong << ", \"shape\": ";
      if (r.shape[0] == 0) os << "null}";
      else os << '[' << r.shape[0] << ", " << r.shape[1] << ", " << r.shape[2] << "]}";
    }
    os << "\n], \"avg_busbw\": " << avg_busbw(rows) << "}";
    if (nops == 1) os << "\n";
    else if (k + 1 == nops) os << "]\n";
    return;
  }
  char line[256];
  if (k > 0) os << "\n";
  const bool kernel = o.op == "pack" || o.op == "unpack";
  const bool wired = o.wire != "exact" && (kernel || o.op == "switch");
  os << "# dsp-bench: " << what << ", " << n << " ranks, backend " << o.backend << ", agreement check "
     << (first_call    ? "on (first_call)"
         : o.agreement ? "on"
                       : "off")
     << ", " << o.iters << " iters, " << o.warmup << " warmup, check " << (o.check ? "on" : "off (#wrong -1)") << "\n";
  if (k == 0 && !about.empty()) os << about;
  if (o.op == "switch" && (wired || o.batch != 1))
    os << "# switch" << (o.batch != 1 ? " of a batch of " + std::to_string(o.batch) + " tensors" : std::string())
       << (wired ? " on wire " + o.wire + " (checked within wire.hpp's bound)" : std::string())
       << (o.batch != 1 ? "; size and count per tensor, algbw and busbw over all of them" : "") << "\n";
  if (o.graph)
    os << "# CUDA graph: the call captured once after the warm-up; time per replay (cudaGraphLaunch, stream "
          "synchronization)\n";
  if (kernel && wired)
    os << "# the " << o.wire << " wire " << o.op << " kernel alone (dsp::detail::wire_" << o.op
       << "), rank 0's part of a switch on that wire among " << (o.peers > 0 ? o.peers : n)
       << " ranks; size: the bytes it reads plus the bytes it writes (elements and wire sections): "
          "compare algbw with 2 x memcpy's\n";
  else if (kernel)
    os << "# the " << o.op << " kernel alone, rank 0's part of an alltoallv switch among "
       << (o.peers > 0 ? o.peers : n) << " ranks; size: the elements it copies\n";
  if (!rows.empty() && rows.front().shape[0] != 0)
    os << "# tensor: " << o.type << " [A, B, " << o.inner << "] (shape AxBxC below: global extents; A, B multiples of "
       << (kernel && o.peers > 0 ? o.peers : n) << ")\n";
  std::snprintf(line, sizeof line, "#%11s %12s %8s %12s %9s %9s %8s  %s\n", "size", "count", "type", "time(us)",
                "algbw", "busbw", "#wrong", "shape");
  os << line;
  std::snprintf(line, sizeof line, "#%11s %12s %8s %12s %9s %9s %8s\n", "(B)", "(elements)", "", "", "(GB/s)", "(GB/s)",
                "");
  os << line;
  for (const Row& r : rows) {
    std::snprintf(line, sizeof line, "%12zu %12zu %8s %12.2f %9.3f %9.3f %8lld  %s\n", r.bytes, r.count, o.type.c_str(),
                  r.time_us, r.algbw, r.busbw, r.wrong, shape_text(r).c_str());
    os << line;
  }
  os << avg_line(rows);
}

#if defined(KOKKOS_ENABLE_CUDA)
// A CUDA-enabled Kokkos initializes its CUDA backend whatever -B says, and
// that needs a GPU. Picks this rank's GPU (its rank among the ranks on its
// node, modulo the GPUs it sees), or says on every rank why there is none.
// Collective: every rank returns the same verdict.
bool pick_device(int rank, int& device) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  int ok = rc == cudaSuccess && count > 0, all_ok = 0;
  if (!ok)
    std::cerr << "dsp-bench (rank " << rank
              << "): this dsp-bench is built against a CUDA-enabled Kokkos and needs an NVIDIA GPU, "
                 "but none is visible here (cudaGetDeviceCount: "
              << (rc != cudaSuccess ? std::string(cudaGetErrorName(rc)) + ", " + cudaGetErrorString(rc)
                                    : std::string("0 devices"))
              << ")\n";
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) return false;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  device = local % count;
  return cudaSetDevice(device) == cudaSuccess;
}
#endif

#if defined(DSP_BENCH_WITH_NCCL)
// One NCCL communicator over MPI_COMM_WORLD (its id from rank 0, broadcast
// over MPI) and a stream, on the GPU pick_device chose.
struct NcclWorld {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;

  NcclWorld(int rank, int size) {
    ncclUniqueId id{};
    int status = rank == 0 ? int(ncclGetUniqueId(&id)) : 0;
    MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (status != ncclSuccess)
      throw std::runtime_error(std::string("dsp-bench: ncclGetUniqueId failed on rank 0: ") +
                               ncclGetErrorString(ncclResult_t(status)));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    DSP_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const ncclResult_t rc = ncclCommInitRank(&comm, size, id, rank);
    if (rc != ncclSuccess) {
      comm = nullptr;
      cudaStreamDestroy(stream);
      throw std::runtime_error(std::string("dsp-bench: ncclCommInitRank failed: ") + ncclGetErrorString(rc));
    }
  }
  ~NcclWorld() {
    ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }
  NcclWorld(const NcclWorld&) = delete;
  NcclWorld& operator=(const NcclWorld&) = delete;
};

// The header line of -B nccl: what runs where, for the record.
std::string nccl_about(const dsp::NcclCommunicator& c, int device) {
  cudaDeviceProp prop{};
  int driver = 0, runtime = 0;
  cudaGetDeviceProperties(&prop, device);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const int v = dsp::detail::nccl_runtime_version();
  std::ostringstream s;
  s << "# backend nccl: NCCL " << NCCL_MAJOR << '.' << NCCL_MINOR << '.' << NCCL_PATCH << " (loaded: " << v
    << "), all-to-all by " << (c.uses_nccl_alltoall() ? "ncclAlltoAll" : "grouped ncclSend/ncclRecv")
    << "; rank 0 on GPU " << device << ": " << prop.name << "; CUDA driver " << driver / 1000 << '.'
    << driver % 1000 / 10 << ", runtime " << runtime / 1000 << '.' << runtime % 1000 / 10
    << "; device kernels: " << dsp::to_string(dsp::device_kernels()) << " (DSP_DEVICE_KERNELS)\n";
  return s.str();
}
#endif

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, rc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Options o = parse(argc, argv, rank);
  // -O: rank 0 opens (and truncates) the file before anything runs, so that a
  // path it cannot write fails at once, on every rank, with exit code 2.
  std::ofstream file;
  {
    int opened = 1;
    std::string why;
    if (rank == 0 && !o.out.empty()) {
      errno = 0;
      file.open(o.out);
      if (!file) opened = 0, why = errno != 0 ? std::strerror(errno) : "cannot open it";
    }
    MPI_Bcast(&opened, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!opened) {
      if (rank == 0) std::cerr << "dsp-bench: --output: cannot write '" << o.out << "': " << why << "\n";
      MPI_Finalize();
      return 2;
    }
  }
#if defined(KOKKOS_ENABLE_CUDA)
  int device = 0;
  if (!pick_device(rank, device)) {
    MPI_Finalize();
    return 1;
  }
  Kokkos::initialize(Kokkos::InitializationSettings().set_device_id(device));
#else
  Kokkos::initialize();
#endif
  try {
    // One table per op; the runner is generic in the communicator.
    std::vector<std::vector<Row>> tables;
    std::string about;
    auto run_all = [&](auto& comm, std::function<void()> sync) {
      for (const std::string& op : o.ops) {
        Options one = o;
        one.op = op;
        tables.push_back(run_sizes(comm, one, sync));
      }
    };
    if (o.backend == "mpi") {
      dsp::MpiCommunicator comm(MPI_COMM_WORLD);
      run_all(comm, [] {});
#if defined(DSP_BENCH_WITH_NCCL)
    } else if (o.backend == "nccl") {
      NcclWorld world(rank, size);
      {
        dsp::NcclCommunicator comm(world.comm, world.stream);
        about = nccl_about(comm, device);
        run_all(comm, [&] { DSP_CHECK_CUDA(cudaStreamSynchronize(world.stream)); });
        comm.check_async_error();
      }  // the communicator and its buffers go before the NCCL communicator
#endif
    } else {
#if defined(DSP_BENCH_WITH_NCCL)
      throw std::runtime_error("dsp-bench: unknown backend '" + o.backend + "' (available: mpi, nccl)");
#else
      throw std::runtime_error("dsp-bench: backend '" + o.backend +
                               "' is not built (available: mpi; nccl needs a build with -DDSP_ENABLE_NCCL=ON "
                               "against a CUDA-enabled Kokkos)");
#endif
    }
    long long wrong = 0;
    for (const auto& rows : tables)
      for (const Row& r : rows) wrong += r.wrong > 0 ? r.wrong : 0;
    if (rank == 0) {
      std::ostream& os = o.out.empty() ? std::cout : file;
      for (std::size_t k = 0; k < tables.size(); ++k) {
        Options one = o;
        one.op = o.ops[k];
        print(os, one, size, tables[k], about, k, tables.size());
        // csv and json keep stdout parseable: the average goes to stderr then,
        // and to stdout when the table went to a file.
        if (o.format != "text") (o.out.empty() ? std::cerr : std::cout) << avg_line(tables[k]);
      }
      if (!o.out.empty()) {
        file.close();
        if (file.fail()) {
          std::cerr << "dsp-bench: --output: writing '" << o.out << "' failed (" << std::strerror(errno) << ")\n";
          rc = 1;
        }
      }
    }
    if (wrong > 0) {
      if (rank == 0) std::cerr << "dsp-bench: " << wrong << " wrong elements\n";
      rc = 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "dsp-bench (rank " << rank << "): " << e.what() << "\n";
    rc = 1;
  }
  Kokkos::finalize();
  MPI_Finalize();
  return rc;
}
