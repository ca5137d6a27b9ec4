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
#include "common.hpp"

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
#include <iostream>
#include <limits>
#include <ranges>
#include <span>
#include <sstream>
#include <string>
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
  std::string wire = "exact";  // switch: exact or bf16 (float only)
  bool agreement = true;
};

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
  int check = o.check, agreement = o.agreement;  // 0|1, read as integers: non-zero is on
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
  app.add_option("-d,--datatype", o.type, "element type")
      ->check(CLI::IsMember({"float", "double", "int32", "int64", "int8", "uint8"}))
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
  app.add_option("--wire", o.wire, "switch: bf16 for -d float only (checked within 2^-8 |x|)")
      ->check(CLI::IsMember({"exact", "bf16"}))
      ->type_name("W")
      ->capture_default_str();
  app.add_option("-a,--agreement", agreement, "dsp's cross-rank agreement check")
      ->type_name("0|1")
      ->capture_default_str();
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
    if (o.wire == "bf16" && o.type != "float")
      throw CLI::ValidationError("--wire", "bf16 is for -d float, not " + o.type);
  } catch (const CLI::ParseError& e) {
    std::ostream discard(nullptr);  // no buffer: the other ranks' copies go nowhere
    const int rc = app.exit(e, rank == 0 ? std::cout : discard, rank == 0 ? std::cerr : discard);
    MPI_Finalize();
    std::exit(rc == 0 ? 0 : 2);  // CLI11's own codes (105 and so on) would mean nothing here
  }
  o.check = check != 0;
  o.agreement = agreement != 0;
  std::tie(o.dim_from, o.dim_to) = dims;
  o.ops = split_ops(o.op);
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

// Value at a global linear index: exact in every type (wraps in the small ones).
template <class T>
T value_at(std::size_t g) {
  if constexpr (sizeof(T) == 1) return static_cast<T>(g * 7 + 1);
  else return static_cast<T>(g % (std::size_t(1) << 20) + 1);
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
    if (o_.op == "pack" || o_.op == "unpack") return kernel<T>(bytes, o_.op == "pack");
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
  template <class F>
  double timed(F&& f) {
    auto step = [&] {
      f();
      sync_();
    };
    for (int k = 0; k < o_.warmup; ++k) step();
    std::vector<double> t;
    for (int k = 0; k < o_.iters; ++k) t.push_back(dsp_bench::time_max(MPI_COMM_WORLD, step));
    return dsp_bench::median(t);
  }
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
    const double t = timed([&] { comm_.all_to_all(s.data(), r.data(), per, sizeof(T)); });
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
    const double t = timed([&] { comm_.all_gather(s.data(), r.data(), per, sizeof(T)); });
    long long wrong = -1;
    if (o_.check) {
      const auto h = host_copy(r);
      wrong = 0;
      for (std::size_t k = 0; k < count; ++k) wrong += h(k) != value_at<T>(k);
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
      for (std::size_t k = 0; k < count; ++k) h(k) = T(1);
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
      if (o_.check) wrong = sum_wrong(count_wrong(y));
      return finish(x.local_size() * sizeof(T), x.local_size(), t, wrong, g);
    }
  }

  // The switch's pack (or unpack) kernel alone, as rank 0 of --peers ranks
  // runs it in an alltoallv switch (the plan every backend without
  // point-to-point exchange, NCCL included, uses above 8 KiB per rank), on
  // this backend's memory and execution space. The size is the elements
  // copied (rank 0's block less its own chunk). Checked against the host
  // path of the same kernel, which the tests check against the reference.
  template <class T>
  Row kernel(std::size_t bytes, bool pack) {
    using M = typename Comm::memory_space;
    const int peers = o_.peers > 0 ? o_.peers : n_;
    const std::size_t i = std::size_t(o_.dim_from), j = std::size_t(o_.dim_to);
    if (i == j) throw std::runtime_error("dsp-bench: pack and unpack need --dims I,J with I != J");
    const auto g = shape<T>(bytes, peers);
    std::array<std::size_t, 3> block = g;  // rank 0's block, input (Sharded<i>) or output (Sharded<j>)
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
    const auto plan = dsp::detail::plan_alltoallv(std::span<const std::size_t>(g), i, j, 0, peers);
    const auto& tasks = pack ? plan.pack : plan.unpack;
    if (tasks.empty())
      throw std::runtime_error("dsp-bench: the switch " + std::to_string(i) + "->" + std::to_string(j) + " needs no " +
                               (pack ? "pack" : "unpack") +
                               ": its chunks are contiguous on that side, and dsp transfers them in place (the " +
                               (pack ? "unpack" : "pack") + " of --dims " + std::to_string(j) + "," +
                               std::to_string(i) + " is the same kernel's other side)");
    const std::size_t block_elems = block[0] * block[1] * block[2];
    const std::size_t in_elems = pack ? block_elems : plan.recv_elems;
    const std::size_t out_elems = pack ? plan.send_elems : block_elems;
    const std::size_t moved = pack ? plan.send_elems : plan.recv_elems;
    Kokkos::View<T*, M> in("in", in_elems), out("out", out_elems);
    auto hin = Kokkos::create_mirror_view(in);
    for (std::size_t k = 0; k < in_elems; ++k) hin(k) = value_at<T>(k);
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
      wrong = 0;
      for (std::size_t k = 0; k < out_elems; ++k) wrong += !(hout(k) == ref[k]);
      wrong = sum_wrong(wrong);
    }
    return finish(moved * sizeof(T), moved, t, wrong, g);
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
    if constexpr (std::is_same_v<T, float>) {
      if (o_.batch != 1 || o_.wire != "exact") return switch_batch_or_wire<I, J>(x, y, g);
    }
    dsp::set_agreement_checks(o_.agreement);
    const double t = timed([&] { dsp::dynamic_switch<J>(x, y); });
    dsp::set_agreement_checks(true);
    long long wrong = -1;
    if (o_.check) wrong = sum_wrong(count_wrong(y));
    return finish(x.local_size() * sizeof(T), x.local_size(), t, wrong, g);
  }

  // --batch 3 and --wire bf16 (float tensors): Q, K, V in one batch, the same
  // input three times (inputs are read only), each into its own output.
  template <std::size_t I, std::size_t J, class X, class Y>
  Row switch_batch_or_wire(const X& x, Y& y, const std::array<std::size_t, 3>& g) {
    const dsp::Wire wire = o_.wire == "bf16" ? dsp::Wire::bf16 : dsp::Wire::exact;
    const bool three = o_.batch == 3;
    Y y2 = three ? Y(comm_, g) : y, y3 = three ? Y(comm_, g) : y;  // two more outputs only for a batch
    dsp::set_agreement_checks(o_.agreement);
    const double t = three ? timed([&] { dsp::dynamic_switch<J>(dsp::batch(x, x, x), dsp::batch(y, y2, y3), wire); })
                           : timed([&] { dsp::dynamic_switch<J>(x, y, wire); });
    dsp::set_agreement_checks(true);
    long long wrong = -1;
    if (o_.check) {
      wrong = count_wrong(y, wire);
      if (three) wrong += count_wrong(y2, wire) + count_wrong(y3, wire);
      wrong = sum_wrong(wrong);
    }
    Row r = finish(x.local_size() * sizeof(float), x.local_size(), t, wrong, g);
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
  template <class Z>
  long long count_wrong(const Z& z, dsp::Wire wire = dsp::Wire::exact) const {
    sync_();
    if (wire == dsp::Wire::exact)
      return static_cast<long long>(dsp::count_mismatches(z, [&](const auto& g) { return reference(z, g); }));
    long long w = 0;  // bf16: |x' - x| <= 2^-8 |x| (every reference value is a normal float)
    dsp::for_each(z, [&](const auto& g, const auto& v) {
      const double ref = double(reference(z, g));
      w += !(std::fabs(double(v) - ref) <= std::ldexp(std::fabs(ref), -8));
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
  if (o.format == "csv") {
    if (k == 0) os << "op,ranks,backend,agreement,size,count,type,time_us,algbw,busbw,wrong,shape\n";
    for (const Row& r : rows)
      os << what << ',' << n << ',' << o.backend << ',' << o.agreement << ',' << r.bytes << ',' << r.count << ','
         << o.type << ',' << r.time_us << ',' << r.algbw << ',' << r.busbw << ',' << r.wrong << ',' << shape_text(r)
         << '\n';
    return;
  }
  if (o.format == "json") {
    if (nops > 1) os << (k == 0 ? "[" : ",\n");
    os << "{\"op\": \"" << what << "\", \"ranks\": " << n << ", \"backend\": \"" << o.backend
       << "\", \"agreement\": " << (o.agreement ? "true" : "false") << ", \"rows\": [";
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
  os << "# dsp-bench: " << what << ", " << n << " ranks, backend " << o.backend << ", agreement check "
     << (o.agreement ? "on" : "off") << ", " << o.iters << " iters, " << o.warmup << " warmup, check "
     << (o.check ? "on" : "off (#wrong -1)") << "\n";
  if (k == 0 && !about.empty()) os << about;
  const bool kernel = o.op == "pack" || o.op == "unpack";
  if (kernel)
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
    << driver % 1000 / 10 << ", runtime " << runtime / 1000 << '.' << runtime % 1000 / 10 << "\n";
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
