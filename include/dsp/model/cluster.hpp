// SPDX-License-Identifier: BSD-3-Clause
// dsp::model: a hierarchical alpha-beta model of a GPU cluster (GPUs in nodes,
// one link inside a node, one across nodes, NCCL's collectives across nodes on
// all of a node's NICs, device memory for the copies around an all-to-all),
// the time of the collectives a sequence-parallel layer makes, and a fit of
// its links to dsp-bench output.
// Plain arithmetic on doubles: no MPI, no Kokkos. Times in seconds, sizes in
// bytes, bandwidths in bytes per second, compute in FLOP/s.
#pragma once

#include <dsp/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <istream>
#include <numeric>
#include <string>
#include <vector>

namespace dsp::model {

/// One level of the network as one GPU sees it.
struct Link {
  double bandwidth = 0;  ///< bytes/s one GPU sends at once on this level (achieved, not line rate)
  double latency = 0;    ///< seconds per step of a collective (a message's start-up and synchronization)
};

/// A cluster of nodes with `gpus_per_node` GPUs each.
struct Cluster {
  std::string name = "custom";
  int gpus_per_node = 8;
  Link intra;  ///< between the GPUs of one node (NVLink)
  Link inter;  ///< from a GPU to a GPU of another node (its own NIC): all-to-alls, ring passes
  /// Bytes/s per GPU (bus bandwidth, nccl-tests' busbw) of a ring all-gather,
  /// reduce-scatter or all-reduce whose group spans nodes and holds every GPU
  /// of each: NCCL's channels cross nodes on all of the node's NICs, not one.
  double collective_bandwidth = 0;
  /// Device-memory traffic per second (bytes read plus written) of the
  /// copies that pack and unpack the blocks around an all-to-all.
  double memory_bandwidth = 0;
  double peak_flops = 0;    ///< per GPU, dense, in the training precision
  double efficiency = 0.5;  ///< the fraction of peak_flops the layer's math reaches
  double memory_bytes = 0;  ///< per GPU, usable by the job (after the CUDA context and the libraries' buffers)
};

/// The H100 preset, from published figures: 8 H100 SXM per node; NVLink 4 at
/// 450 GB/s per direction (line), of which NCCL reaches about 370 GB/s; one
/// 400 Gb/s InfiniBand NDR NIC per GPU (50 GB/s line), about 45 GB/s reached;
/// NCCL's all-gather across nodes at about 200 GB/s of bus bandwidth per GPU
/// (measured on 32 nodes of 8 H100s, nccl#1218); device memory at 3.0 TB/s of
/// traffic (3.35 TB/s HBM3 peak, at the 89% of peak a device-to-device
/// cudaMemcpy reached on an H200, docs/gpu.md); 989 TFLOP/s dense BF16 peak
/// at 40% efficiency; 80 GiB HBM3, 72 GiB of it for the job. Latencies:
/// about 10 us per collective step inside a node and 20 us across.
/// docs/cluster-model.md lists the sources.
inline Cluster h100() {
  Cluster c;
  c.name = "h100";
  c.gpus_per_node = 8;
  c.intra = {370e9, 10e-6};
  c.inter = {45e9, 20e-6};
  c.collective_bandwidth = 200e9;
  c.memory_bandwidth = 3.0e12;
  c.peak_flops = 989e12;
  c.efficiency = 0.4;
  c.memory_bytes = 72.0 * 1024 * 1024 * 1024;
  return c;
}

/// The names cluster_preset() knows.
inline std::vector<std::string> cluster_presets() { return {"h100"}; }

/// The preset called `name`, or InvalidArgument naming the known ones.
inline Cluster cluster_preset(const std::string& name) {
  if (name == "h100") return h100();
  std::string known;
  for (const auto& n : cluster_presets()) known += (known.empty() ? "" : ", ") + n;
  throw InvalidArgument("dsp::model: unknown cluster preset '" + name + "' (known: " + known + ")");
}

/// InvalidArgument unless the cluster's numbers can price anything: at least
/// one GPU per node, positive bandwidths (links, collectives across nodes,
/// device memory), peak and efficiency in (0, 1], latencies and memory not
/// negative.
inline void check(const Cluster& c) {
  auto bad = [&](const std::string& what) { throw InvalidArgument("dsp::model: cluster '" + c.name + "': " + what); };
  if (c.gpus_per_node < 1) bad("gpus_per_node must be at least 1");
  if (!(c.intra.bandwidth > 0) || !(c.inter.bandwidth > 0)) bad("link bandwidths must be positive");
  if (!(c.collective_bandwidth > 0)) bad("collective_bandwidth (collectives across nodes) must be positive");
  if (!(c.memory_bandwidth > 0)) bad("memory_bandwidth (device memory) must be positive");
  if (!(c.intra.latency >= 0) || !(c.inter.latency >= 0)) bad("link latencies must not be negative");
  if (!(c.peak_flops > 0)) bad("peak_flops must be positive");
  if (!(c.efficiency > 0 && c.efficiency <= 1)) bad("efficiency must be in (0, 1]");
  if (!(c.memory_bytes >= 0)) bad("memory_bytes must not be negative");
}

/// Where a group's GPUs sit: `size` GPUs, `per_node` of them in each node.
struct Group {
  int size = 1;
  int per_node = 1;
  /// Whether the group spans nodes.
  bool spans_nodes() const { return per_node < size; }
};

/// `n` consecutive GPUs: a sequence-parallel group, the inner axis of a
/// DP x SP mesh (ranks numbered node by node, groups starting at multiples
/// of n). `per_node` is the fewest of a group's GPUs any node holds, the
/// share the busiest GPU keeps inside its node: gcd(n, gpus_per_node) (n when
/// n divides the node, the whole node when the node divides n; 12 over nodes
/// of 8 puts 8 + 4, then 4 + 8).
inline Group consecutive_group(const Cluster& c, int n) {
  if (n < 1) throw InvalidArgument("dsp::model: a group needs at least one GPU");
  if (c.gpus_per_node < 1) throw InvalidArgument("dsp::model: gpus_per_node must be at least 1");
  return {n, std::gcd(n, c.gpus_per_node)};
}

/// `n` GPUs `stride` apart: a data-parallel group across SP groups of `stride` GPUs.
inline Group strided_group(const Cluster& c, int n, int stride) {
  if (n < 1 || stride < 1) throw InvalidArgument("dsp::model: a group needs at least one GPU and a stride >= 1");
  return {n, std::clamp(c.gpus_per_node / stride, 1, n)};
}

namespace detail {
/// `s` cut at every `sep`, empty pieces kept ("a,,b," is a, "", b, "").
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char ch : s)
    if (ch == sep) out.emplace_back();
    else out.back() += ch;
  return out;
}
/// The link a point-to-point ring over `g` is limited by: across nodes when it spans them.
inline const Link& ring_link(const Cluster& c, const Group& g) { return g.spans_nodes() ? c.inter : c.intra; }
}  // namespace detail

/// An all-to-all in which each GPU sends `bytes_sent` bytes to the other GPUs
/// of its group, the same to each. Inside a node and across nodes the GPU
/// sends at once (NVLink and its NIC are separate links), so the time is the
/// slower of the two levels:
///   intra = alpha_intra + bytes_sent (k - 1) / (n - 1) / beta_intra   (k = per_node > 1)
///   inter = alpha_inter + bytes_sent (n - k) / (n - 1) / beta_inter   (n > k)
/// Every GPU's share across nodes leaves through its own NIC. The copies
/// around it (packing and unpacking) are copy_time(), apart.
inline double all_to_all_time(const Cluster& c, const Group& g, double bytes_sent) {
  const int n = g.size, k = g.per_node;
  if (n <= 1 || !(bytes_sent > 0)) return 0;
  const double intra = k > 1 ? c.intra.latency + bytes_sent * (k - 1) / (n - 1) / c.intra.bandwidth : 0;
  const double inter = n > k ? c.inter.latency + bytes_sent * (n - k) / (n - 1) / c.inter.bandwidth : 0;
  return std::max(intra, inter);
}

/// n - 1 point-to-point steps around a ring, the GPU sending `bytes_sent` in
/// all: every step waits for the ring's slowest link, one NIC across nodes
/// when the group spans them:
///   (n - 1) alpha + bytes_sent / beta
/// Ring-Attention's k and v passes.
inline double ring_pass_time(const Cluster& c, const Group& g, double bytes_sent) {
  if (g.size <= 1 || !(bytes_sent > 0)) return 0;
  const Link& l = detail::ring_link(c, g);
  return (g.size - 1) * l.latency + bytes_sent / l.bandwidth;
}

/// The bus bandwidth per GPU of NCCL's ring collectives (all-gather,
/// reduce-scatter, all-reduce) over `g`. Inside a node: the intra link. Across
/// nodes, NCCL runs several channels whose node crossings use different NICs:
/// a group holding k of a node's G GPUs gets its share k / G of the node's
/// aggregate `collective_bandwidth`, at least its own NIC (`inter`), and at
/// most NVLink (every byte also crosses the node on it):
///   min(beta_intra, max(beta_inter, collective_bandwidth k / G))
inline double ring_collective_bandwidth(const Cluster& c, const Group& g) {
  if (!g.spans_nodes()) return c.intra.bandwidth;
  const double share = c.collective_bandwidth * double(g.per_node) / double(std::max(1, c.gpus_per_node));
  return std::min(c.intra.bandwidth, std::max(c.inter.bandwidth, share));
}

/// A ring all-gather; `bytes_sent` = the GPU's block times (n - 1), what dsp's
/// cost model counts for a gather. (n - 1) alpha + bytes_sent / ring_collective_bandwidth.
inline double all_gather_time(const Cluster& c, const Group& g, double bytes_sent) {
  if (g.size <= 1 || !(bytes_sent > 0)) return 0;
  return (g.size - 1) * detail::ring_link(c, g).latency + bytes_sent / ring_collective_bandwidth(c, g);
}

/// A ring reduce-scatter; `bytes_sent` = everything but the GPU's own chunk,
/// what dsp's cost model counts. (n - 1) alpha + bytes_sent / ring_collective_bandwidth.
inline double reduce_scatter_time(const Cluster& c, const Group& g, double bytes_sent) {
  return all_gather_time(c, g, bytes_sent);
}

/// A ring all-reduce: a reduce-scatter and an all-gather; `bytes_sent` is the
/// two together, what dsp's cost model counts.
/// 2 (n - 1) alpha + bytes_sent / ring_collective_bandwidth.
inline double all_reduce_time(const Cluster& c, const Group& g, double bytes_sent) {
  if (g.size <= 1 || !(bytes_sent > 0)) return 0;
  return 2.0 * (g.size - 1) * detail::ring_link(c, g).latency + bytes_sent / ring_collective_bandwidth(c, g);
}

/// Packing and unpacking the blocks around an all-to-all: `traffic` bytes of
/// device memory read plus written (about 4 per byte of the GPU's block: read
/// and write it into the send buffer, read and write the received blocks into
/// place), at memory_bandwidth. traffic / memory_bandwidth.
inline double copy_time(const Cluster& c, double traffic) { return traffic > 0 ? traffic / c.memory_bandwidth : 0; }

/// `flops` of math on one GPU: flops / (peak_flops * efficiency).
inline double compute_time(const Cluster& c, double flops) { return flops / (c.peak_flops * c.efficiency); }

// ------------------------------------------------------------ calibration ----

/// One row of dsp-bench's csv output (`dsp-bench -F csv`): the op's name,
/// ranks, size in bytes per rank (the send buffer for alltoall and switch, the
/// receive buffer for allgather) and time in microseconds.
struct BenchRow {
  std::string op;
  int ranks = 0;
  double size = 0;
  double time_us = 0;
};

/// The rows of a dsp-bench csv table, read by its header (columns op, ranks,
/// size and time_us; others ignored). `source` names the input in errors.
/// InvalidArgument for a missing column, a row that does not parse, or a
/// value out of range (ranks < 1, a size that is negative, not finite or
/// above 2^64, a time_us that is not finite or not positive: inf and nan
/// included), naming the line, the column and the value.
inline std::vector<BenchRow> read_bench_csv(std::istream& in, const std::string& source) {
  std::string line;
  if (!std::getline(in, line))
    throw InvalidArgument("dsp::model: " + source + " is empty (expected dsp-bench -F csv output)");
  const auto head = detail::split(line, ',');
  auto column = [&](const char* name) {
    const auto it = std::find(head.begin(), head.end(), name);
    if (it == head.end())
      throw InvalidArgument("dsp::model: " + source + " has no '" + name +
                            "' column (expected dsp-bench -F csv output, header op,ranks,...,size,...,time_us,...)");
    return std::size_t(it - head.begin());
  };
  const std::size_t c_op = column("op"), c_ranks = column("ranks"), c_size = column("size"), c_time = column("time_us");
  std::vector<BenchRow> rows;
  for (int no = 2; std::getline(in, line); ++no) {
    if (line.empty() || line[0] == '#') continue;
    const auto f = detail::split(line, ',');
    BenchRow r;
    try {
      if (f.size() <= std::max({c_op, c_ranks, c_size, c_time})) throw std::invalid_argument("short");
      std::size_t used = 0;
      r.op = f[c_op];
      r.ranks = std::stoi(f[c_ranks], &used);
      if (used != f[c_ranks].size()) throw std::invalid_argument("ranks");
      r.size = std::stod(f[c_size], &used);
      if (used != f[c_size].size()) throw std::invalid_argument("size");
      r.time_us = std::stod(f[c_time], &used);
      if (used != f[c_time].size()) throw std::invalid_argument("time");
    } catch (const std::exception&) {
      throw InvalidArgument("dsp::model: " + source + " line " + std::to_string(no) + " does not parse: '" + line +
                            "'");
    }
    const auto out_of_range = [&](const char* column, std::size_t c) {
      throw InvalidArgument("dsp::model: " + source + " line " + std::to_string(no) + ": " + column + " '" + f[c] +
                            "' is out of range (need ranks >= 1, a finite size >= 0 and at most 2^64, and a finite "
                            "time_us > 0): '" +
                            line + "'");
    };
    if (r.ranks < 1) out_of_range("ranks", c_ranks);
    if (!(r.size >= 0 && r.size <= 0x1p64)) out_of_range("size", c_size);  // nan fails both
    if (!(r.time_us > 0 && std::isfinite(r.time_us))) out_of_range("time_us", c_time);
    rows.push_back(r);
  }
  return rows;
}

/// The latency and bandwidth that fit t = alpha + x / beta to the points
/// (x bytes, t seconds) best in relative error (each point weighs 1 / t^2, so
/// small messages set alpha and large ones beta). alpha is kept >= 0 (if the
/// best line crosses below zero, the line through the origin). Needs two
/// different x, every x finite and >= 0 and every t finite and > 0;
/// InvalidArgument otherwise (naming the point), or when time does not grow
/// with x.
inline Link fit_link(const std::vector<double>& x, const std::vector<double>& t) {
  if (x.size() != t.size() || x.size() < 2)
    throw InvalidArgument("dsp::model: a link fit needs at least two (bytes, time) points");
  double t_min = t[0];
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] >= 0 && std::isfinite(x[i])) || !(t[i] > 0 && std::isfinite(t[i])))
      throw InvalidArgument("dsp::model: a link fit needs finite sizes >= 0 and finite times > 0; point " +
                            std::to_string(i) + " is (" + std::to_string(x[i]) + " bytes, " + std::to_string(t[i]) +
                            " s)");
    t_min = std::min(t_min, t[i]);
  }
  // The weights 1 / t^2, scaled by t_min^2 (the fit does not change) so that
  // they stay in (0, 1]: tiny times cannot overflow them.
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = (t_min / t[i]) * (t_min / t[i]);
    sw += w, sx += w * x[i], st += w * t[i], sxx += w * x[i] * x[i], sxt += w * x[i] * t[i];
  }
  const double den = sw * sxx - sx * sx;
  if (!(den > 0)) throw InvalidArgument("dsp::model: a link fit needs points of at least two different sizes");
  double slope = (sw * sxt - sx * st) / den, alpha = (st - slope * sx) / sw;
  if (alpha < 0) alpha = 0, slope = sxt / sxx;
  if (!(slope > 0))
    throw InvalidArgument("dsp::model: the times do not grow with the size: no bandwidth can be fitted");
  if (!std::isfinite(1 / slope) || !std::isfinite(alpha))
    throw InvalidArgument("dsp::model: the points' sizes and times are too far apart to fit a finite link");
  return {1 / slope, alpha};
}

/// What calibrate() did: the links it fitted, and from how many points.
struct Calibration {
  int intra_points = 0, inter_points = 0;
};

/// Fits the cluster's links to dsp-bench `alltoall` rows (run dsp-bench with
/// `-o alltoall -F csv`, on one node for the intra link and across nodes for
/// the inter link; ranks are taken to fill nodes of `gpus_per_node`). A row of
/// n ranks with size s sends s (n - 1) / n bytes per rank; a run inside one
/// node (n dividing gpus_per_node) gives
/// intra points (x = those bytes), a run across nodes inter points (x = the
/// share (n - k) / (n - 1) that leaves the node, k = gcd(n, gpus_per_node)),
/// by all_to_all_time()'s formula. Runs of 1 rank are skipped. InvalidArgument when no level gets two
/// sizes.
inline Calibration calibrate(Cluster& c, const std::vector<BenchRow>& rows) {
  std::vector<double> xi, ti, xo, to;
  for (const BenchRow& r : rows) {
    if (r.op != "alltoall" || r.ranks <= 1 || !(r.size > 0)) continue;
    const int n = r.ranks, k = consecutive_group(c, n).per_node;
    const double sent = r.size * (n - 1) / n;
    if (n == k) xi.push_back(sent), ti.push_back(r.time_us * 1e-6);
    else xo.push_back(sent * (n - k) / (n - 1)), to.push_back(r.time_us * 1e-6);
  }
  if (xi.size() < 2 && xo.size() < 2)
    throw InvalidArgument(
        "dsp::model: calibration needs dsp-bench alltoall rows of at least two sizes on more than one rank "
        "(dsp-bench -o alltoall -F csv)");
  Calibration cal;
  if (xi.size() >= 2) c.intra = fit_link(xi, ti), cal.intra_points = int(xi.size());
  if (xo.size() >= 2) c.inter = fit_link(xo, to), cal.inter_points = int(xo.size());
  if (c.name.size() < 11 || c.name.compare(c.name.size() - 11, 11, "+calibrated") != 0) c.name += "+calibrated";
  return cal;
}

}  // namespace dsp::model
