// Thrust formulations of the backend's element-wise and per-bucket work, on any Thrust execution
// policy: thrust::cuda::par.on(stream) with nvcc, or the host compiler with Thrust's OpenMP (or
// CPP) device system, where the test suite runs them without a GPU. They use the functors of
// sluice/cuda/functors.hpp, so their bytes are the CPU codecs' bytes. Pointers are of the
// policy's memory (device memory for the CUDA system, host memory for OpenMP).
//
// Needs the CUDA Toolkit's CCCL headers (include/cccl) on the include path; with a host compiler
// define THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP and compile with -fopenmp.
#pragma once

#include <cstddef>
#include <cstdint>

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <sluice/cuda/functors.hpp>

namespace sluice::cuda::portable {

/// Error feedback around max-min quantization of 8 consecutive buckets (one work item: 8 buckets
/// end on a byte boundary, so items never share a byte of the levels section). Two passes over
/// each bucket: the range, then levels and residuals (c = g + e is recomputed, bit for bit).
struct maxmin_group_op {
  float const* g;
  float* e;  ///< null: quantize g alone
  std::size_t n;
  maxmin_params c;
  philox_stream rs;
  std::uint8_t* ranges;
  std::uint8_t* levels;  ///< zeroed before the pass (levels are OR-ed in)

  SLUICE_HD void operator()(std::size_t group) const noexcept {
    std::size_t const nb = (n + c.bucket - 1) / c.bucket;
    for (std::size_t b = 8 * group; b < nb && b < 8 * group + 8; ++b) {
      std::size_t const first = b * c.bucket, len = n - first < c.bucket ? n - first : c.bucket;
      auto value = [&](std::size_t j) {
        return e != nullptr ? feedback_maxmin_element::compensate(g[first + j], e[first + j]) : g[first + j];
      };
      maxmin_range_acc acc;
      for (std::size_t j = 0; j < len; ++j) acc.add(value(j));
      maxmin_grid const gr = acc.grid(len, c.bits);
      float const mu[2] = {gr.min, gr.unit};
      for (int k = 0; k < 8; ++k)
        ranges[8 * b + static_cast<std::size_t>(k)] =
            static_cast<std::uint8_t>(detail::ieee::bits_of(mu[k / 4]) >> (8 * (k % 4)));
      maxmin_encoder const enc(gr, c.bits, c.stochastic);
      for (std::size_t j = 0; j < len; ++j) {
        float const v = value(j);
        std::uint32_t const q = enc.level(v, c.stochastic ? rs.uniform(first + j) : 0.0f);
        if (e != nullptr) e[first + j] = feedback_maxmin_element::residual(v, gr, q);
        std::size_t const p = (first + j) * c.bits;
        unsigned const shifted = q << (p % 8);
        levels[p / 8] = static_cast<std::uint8_t>(levels[p / 8] | (shifted & 0xffu));
        if ((p % 8) + c.bits > 8) levels[p / 8 + 1] = static_cast<std::uint8_t>(levels[p / 8 + 1] | (shifted >> 8));
      }
    }
  }
};

/// Error feedback around max-min quantization (e may be null): the ranges then levels sections
/// (8 * buckets + ceil(n * bits / 8) bytes at `payload`), as cuda::feedback_maxmin writes them.
template <class Policy>
void feedback_maxmin(Policy&& policy, float const* g, float* e, std::size_t n, maxmin_params c, stream_key const& key,
                     std::uint8_t* payload) {
  std::size_t const nb = (n + c.bucket - 1) / c.bucket;
  thrust::fill(policy, payload, payload + 8 * nb + (n * c.bits + 7) / 8, std::uint8_t{0});
  thrust::for_each(policy, thrust::counting_iterator<std::size_t>(0),
                   thrust::counting_iterator<std::size_t>((nb + 7) / 8),
                   maxmin_group_op{g, e, n, c, philox_stream(key), payload, payload + 8 * nb});
}

struct dequantize_add_op {
  float* dense;
  maxmin_params c;
  std::uint8_t const* ranges;
  std::uint8_t const* levels;
  SLUICE_HD void operator()(std::size_t i) const noexcept {
    std::uint8_t const* r = ranges + 8 * (i / c.bucket);
    std::uint32_t lo = 0, hi = 0;
    for (int k = 0; k < 4; ++k)
      lo |= static_cast<std::uint32_t>(r[k]) << (8 * k), hi |= static_cast<std::uint32_t>(r[4 + k]) << (8 * k);
    dense[i] = dequantize_add_element{}(dense[i], maxmin_grid{detail::ieee::float_of(lo), detail::ieee::float_of(hi)},
                                        unpack_level(levels, i, c.bits));
  }
};

/// dense += decode of the sections feedback_maxmin wrote.
template <class Policy>
void dequantize_add(Policy&& policy, float* dense, std::size_t n, maxmin_params c, std::uint8_t const* payload) {
  std::size_t const nb = (n + c.bucket - 1) / c.bucket;
  thrust::for_each(policy, thrust::counting_iterator<std::size_t>(0), thrust::counting_iterator<std::size_t>(n),
                   dequantize_add_op{dense, c, payload, payload + 8 * nb});
}

struct scatter_add_op {
  float* dense;
  std::uint32_t const* idx;
  float const* vals;
  SLUICE_HD void operator()(std::size_t j) const noexcept {
    dense[idx[j]] = scatter_add_element{}(dense[idx[j]], vals[j]);
  }
};

/// dense[idx[j]] += vals[j] for j < k (distinct indices).
template <class Policy>
void scatter_add(Policy&& policy, float* dense, std::uint32_t const* idx, float const* vals, std::size_t k) {
  thrust::for_each(policy, thrust::counting_iterator<std::size_t>(0), thrust::counting_iterator<std::size_t>(k),
                   scatter_add_op{dense, idx, vals});
}

struct adam_op {
  float* p;
  float const* g;
  float* m;
  float* v;
  adam_element f;
  SLUICE_HD void operator()(std::size_t i) const noexcept { f(p[i], g[i], m[i], v[i]); }
};

/// One dense Adam / AdamW step (f from adam_element::from(policy.kernel(t))).
template <class Policy>
void adam_step(Policy&& policy, float* p, float const* g, float* m, float* v, std::size_t n, adam_element const& f) {
  thrust::for_each(policy, thrust::counting_iterator<std::size_t>(0), thrust::counting_iterator<std::size_t>(n),
                   adam_op{p, g, m, v, f});
}

struct sgd_op {
  float* p;
  float const* g;
  float* b;  ///< null without momentum
  sgd_element f;
  SLUICE_HD void operator()(std::size_t i) const noexcept {
    float unused = 0.0f;
    f(p[i], g[i], b != nullptr ? b[i] : unused);
  }
};

/// One dense SGD step (f from sgd_element::from(policy.kernel(t)); b null without momentum).
template <class Policy>
void sgd_step(Policy&& policy, float* p, float const* g, float* b, std::size_t n, sgd_element const& f) {
  thrust::for_each(policy, thrust::counting_iterator<std::size_t>(0), thrust::counting_iterator<std::size_t>(n),
                   sgd_op{p, g, b, f});
}

}  // namespace sluice::cuda::portable
