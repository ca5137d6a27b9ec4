// SPDX-License-Identifier: BSD-3-Clause
// The attention the examples in examples/attention compute on each rank's
// blocks (and on one rank, for the reference): plain softmax attention,
// o[b, i, h] = sum_j softmax_j(q[b, i, h] . k[b, j, kv(h)] / sqrt(d)) v[b, j, kv(h)],
// with the queries, keys and values read through functions, so that a rank
// can attend over keys that are not one array (text tokens beside video
// tokens) and read the key/value head its query head maps to (GQA).
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

}  // namespace attention
