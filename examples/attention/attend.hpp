// SPDX-License-Identifier: BSD-3-Clause
// The attention the examples in examples/attention compute on each rank's
// blocks (and on one rank, for the reference): plain softmax attention,
// o[b, i, h] = sum_j softmax_j(q[b, i, h] . k[b, j, kv(h)] / sqrt(d)) v[b, j, kv(h)],
// with the queries, keys and values read through functions, so that a rank
// can attend over keys that are not one array (text tokens beside video
// tokens) and read the key/value head its query head maps to (GQA); and the
// online softmax that ring attention merges key/value blocks with as they
// arrive (with a mask for causal attention).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace attention {

/// Command-line argument k as a whole number of at least `least` (`fallback`
/// when there is none); false, with a message, when it is not one.
inline bool count_arg(int argc, char** argv, int k, unsigned long least, std::size_t fallback, std::size_t& out,
                      const char* name, bool speak) {
  out = fallback;
  if (k >= argc) return true;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(argv[k], &end, 10);
  if (end == argv[k] || *end != '\0' || errno != 0 || v < 0 || (unsigned long long)(v) < least) {
    if (speak) std::fprintf(stderr, "%s must be a whole number >= %lu, not \"%s\"\n", name, least, argv[k]);
    return false;
  }
  out = std::size_t(v);
  return true;
}

/// Queries q(b, i, h, e) for b < B, i < nq, h < hq, e < d; keys and values
/// k(b, j, h, e), v(b, j, h, e) for j < nk, where h is the query head (the
/// functions map it to their key/value head); o(b, i, h, e) is written.
template <class Q, class K, class V, class O>
void attend(std::size_t B, std::size_t nq, std::size_t hq, std::size_t d, std::size_t nk, Q q, K k, V v, O o) {
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> w(nk);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < nq; ++i)
      for (std::size_t h = 0; h < hq; ++h) {
        double top = -1e300, sum = 0;
        for (std::size_t j = 0; j < nk; ++j) {
          double s = 0;
          for (std::size_t e = 0; e < d; ++e) s += double(q(b, i, h, e)) * double(k(b, j, h, e));
          w[j] = s * scale;
          top = std::max(top, w[j]);
        }
        for (std::size_t j = 0; j < nk; ++j) sum += (w[j] = std::exp(w[j] - top));
        for (std::size_t e = 0; e < d; ++e) {
          double acc = 0;
          for (std::size_t j = 0; j < nk; ++j) acc += w[j] * double(v(b, j, h, e));
          o(b, i, h, e) = float(acc / sum);
        }
      }
}

/// Online softmax state of this rank's queries: running max, sum and weighted values.
struct Online {
  std::size_t B, sq, h, d, group;  // group: query heads per key/value head (GQA; 1: as many)
  std::vector<double> top, sum, acc;
  Online(std::size_t b, std::size_t s, std::size_t hh, std::size_t dd, std::size_t g = 1)
      : B(b), sq(s), h(hh), d(dd), group(g), top(b * s * hh, -1e300), sum(b * s * hh, 0.0), acc(b * s * hh * dd, 0.0) {}
  /// Merges the keys and values k, v (row-major [B, nk, h / group, d]) into
  /// the queries q (query head hh reads key/value head hh / group), where
  /// allowed(i, j) (query row i, key row j) says a pair counts (a causal
  /// mask); returns the pairs it computed, per batch and head.
  template <class Q, class Allowed>
  std::size_t merge(const Q& q, const float* kp, const float* vp, std::size_t nk, Allowed allowed) {
    std::size_t pairs = 0;
    const std::size_t hk = h / group;
    auto k = [&](std::size_t b, std::size_t j, std::size_t hh, std::size_t e) {
      return kp[((b * nk + j) * hk + hh / group) * d + e];
    };
    auto v = [&](std::size_t b, std::size_t j, std::size_t hh, std::size_t e) {
      return vp[((b * nk + j) * hk + hh / group) * d + e];
    };
    const double scale = 1.0 / std::sqrt(double(d));
    std::vector<double> w(nk);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < sq; ++i)
        for (std::size_t hh = 0; hh < h; ++hh) {
          const std::size_t at = (b * sq + i) * h + hh;
          double m = top[at];
          for (std::size_t j = 0; j < nk; ++j) {
            w[j] = -1e300;
            if (!allowed(i, j)) continue;
            pairs += b == 0 && hh == 0;
            double s = 0;
            for (std::size_t e = 0; e < d; ++e) s += double(q(b, i, hh, e)) * double(k(b, j, hh, e));
            m = std::max(m, w[j] = s * scale);
          }
          const double fade = std::exp(top[at] - m);  // rescale what was merged before
          sum[at] *= fade;
          for (std::size_t e = 0; e < d; ++e) acc[at * d + e] *= fade;
          if (m == -1e300) continue;  // nothing of this block is allowed yet
          for (std::size_t j = 0; j < nk; ++j) {
            if (!allowed(i, j)) continue;
            const double p = std::exp(w[j] - m);
            sum[at] += p;
            for (std::size_t e = 0; e < d; ++e) acc[at * d + e] += p * double(v(b, j, hh, e));
          }
          top[at] = m;
        }
    return pairs;
  }
  template <class Q>
  std::size_t merge(const Q& q, const float* kp, const float* vp, std::size_t nk) {
    return merge(q, kp, vp, nk, [](std::size_t, std::size_t) { return true; });
  }
  template <class O>
  void finish(const O& o) const {
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < sq; ++i)
        for (std::size_t hh = 0; hh < h; ++hh)
          for (std::size_t e = 0; e < d; ++e) {
            const std::size_t at = (b * sq + i) * h + hh;
            o(b, i, hh, e) = float(acc[at * d + e] / sum[at]);
          }
  }
};

}  // namespace attention
