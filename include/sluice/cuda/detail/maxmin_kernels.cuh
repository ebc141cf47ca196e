// Kernels of error feedback around max-min quantization: fused c = g + e, the bucket range by a CUB
// block reduction, the levels packed, e = c - decode; and dense += decode.
// Kernels only, in detail::cuda (see launch.cuh); their launchers are in sluice/cuda/maxmin.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include <sluice/cuda/detail/launch.cuh>

namespace sluice::detail::cuda {

struct merge_range {
  __device__ maxmin_range_acc operator()(maxmin_range_acc a, maxmin_range_acc const& b) const noexcept {
    a.merge(b);
    return a;
  }
};

/// One block per bucket (at most 4096 elements, staged in shared memory). With e, the count of
/// non-finite compensated values is added to *bad (when set); their bucket's residual is +0.
__global__ void __launch_bounds__(threads)
    feedback_maxmin(float const* __restrict__ g, float* __restrict__ e, std::size_t n, maxmin_params c,
                    philox_stream rs, std::uint8_t* __restrict__ ranges, std::uint8_t* __restrict__ levels,
                    unsigned long long* bad) {
  __shared__ __align__(16) float cs[4096];             // float4 stores
  __shared__ __align__(16) std::uint8_t qs[4096 + 8];  // uchar4 stores
  __shared__ float grid_min, grid_unit;
  using reduce = cub::BlockReduce<maxmin_range_acc, threads>;
  __shared__ typename reduce::TempStorage tmp;

  std::size_t const b = blockIdx.x, first = b * c.bucket;
  unsigned const len = static_cast<unsigned>(n - first < c.bucket ? n - first : c.bucket);
  unsigned const t = threadIdx.x;
  bool const vec = c.bucket % 4 == 0 && aligned16(g) && (e == nullptr || aligned16(e));
  unsigned const body = vec ? len / 4 * 4 : 0;

  maxmin_range_acc acc;
  unsigned own = 0;
  for (unsigned j = 4 * t; j < body; j += 4 * threads) {
    float4 gv = *reinterpret_cast<float4 const*>(g + first + j);
    if (e != nullptr) {
      float4 const ev = *reinterpret_cast<float4 const*>(e + first + j);
      gv.x = feedback_maxmin_element::compensate(gv.x, ev.x);
      gv.y = feedback_maxmin_element::compensate(gv.y, ev.y);
      gv.z = feedback_maxmin_element::compensate(gv.z, ev.z);
      gv.w = feedback_maxmin_element::compensate(gv.w, ev.w);
      own += non_finite_count(gv.x) + non_finite_count(gv.y) + non_finite_count(gv.z) + non_finite_count(gv.w);
    }
    *reinterpret_cast<float4*>(cs + j) = gv;
    acc.add(gv.x), acc.add(gv.y), acc.add(gv.z), acc.add(gv.w);
  }
  for (unsigned j = body + t; j < len; j += threads) {
    float const v = e != nullptr ? feedback_maxmin_element::compensate(g[first + j], e[first + j]) : g[first + j];
    cs[j] = v;
    acc.add(v);
    if (e != nullptr) own += non_finite_count(v);
  }
  add_non_finite(bad, own);
  if (t < 8) qs[len + t] = 0;  // a last partial group packs zeros
  maxmin_range_acc const total = reduce(tmp).Reduce(acc, merge_range{});
  if (t == 0) {
    maxmin_grid const gr = total.grid(len, c.bits);
    grid_min = gr.min, grid_unit = gr.unit;
    *reinterpret_cast<float2*>(ranges + 8 * b) = make_float2(gr.min, gr.unit);
  }
  __syncthreads();
  maxmin_grid const gr{grid_min, grid_unit};
  maxmin_encoder const enc(gr, c.bits, c.stochastic);
  for (unsigned j = 4 * t; j < body; j += 4 * threads) {
    float4 const cv = *reinterpret_cast<float4 const*>(cs + j);
    float const u[4] = {c.stochastic ? rs.uniform(first + j) : 0.0f, c.stochastic ? rs.uniform(first + j + 1) : 0.0f,
                        c.stochastic ? rs.uniform(first + j + 2) : 0.0f,
                        c.stochastic ? rs.uniform(first + j + 3) : 0.0f};
    std::uint8_t const q0 = enc.level(cv.x, u[0]), q1 = enc.level(cv.y, u[1]), q2 = enc.level(cv.z, u[2]),
                       q3 = enc.level(cv.w, u[3]);
    *reinterpret_cast<uchar4*>(qs + j) = make_uchar4(q0, q1, q2, q3);
    if (e != nullptr)
      *reinterpret_cast<float4*>(e + first + j) =
          make_float4(feedback_maxmin_element::residual(cv.x, gr, q0), feedback_maxmin_element::residual(cv.y, gr, q1),
                      feedback_maxmin_element::residual(cv.z, gr, q2), feedback_maxmin_element::residual(cv.w, gr, q3));
  }
  for (unsigned j = body + t; j < len; j += threads) {
    float const v = cs[j];
    std::uint8_t const q = enc.level(v, c.stochastic ? rs.uniform(first + j) : 0.0f);
    qs[j] = q;
    if (e != nullptr) e[first + j] = feedback_maxmin_element::residual(v, gr, q);
  }
  __syncthreads();
  std::size_t const bit0 = first * c.bits;
  if (bit0 % 8 == 0) {
    // Groups of 8 levels are `bits` whole bytes of this bucket alone.
    std::uint8_t* const out = levels + bit0 / 8;
    for (unsigned grp = t; 8 * grp < len; grp += threads) {
      std::uint64_t const w = pack8(qs + 8 * grp, c.bits);
      unsigned const have = len - 8 * grp < 8 ? len - 8 * grp : 8;
      unsigned const bytes = (have * c.bits + 7) / 8;
      std::uint8_t* const o = out + static_cast<std::size_t>(grp) * c.bits;
      if (bytes == 4 && reinterpret_cast<std::uintptr_t>(o) % 4 == 0)
        *reinterpret_cast<std::uint32_t*>(o) = static_cast<std::uint32_t>(w);
      else
        for (unsigned k = 0; k < bytes; ++k) o[k] = static_cast<std::uint8_t>(w >> (8 * k));
    }
  } else {
    // Buckets share their edge bytes: OR levels into the zeroed section, one 32-bit word at a time.
    auto* const words = reinterpret_cast<unsigned*>(levels);
    for (unsigned j = t; j < len; j += threads) {
      std::size_t const p = bit0 + static_cast<std::size_t>(j) * c.bits;
      unsigned const q = qs[j], s = static_cast<unsigned>(p % 32);
      atomicOr(words + p / 32, q << s);
      if (s + c.bits > 32) atomicOr(words + p / 32 + 1, q >> (32 - s));
    }
  }
}

__global__ void dequantize_add(float* __restrict__ dense, std::size_t n, maxmin_params c,
                               std::uint8_t const* __restrict__ ranges, std::uint8_t const* __restrict__ levels) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    float2 const r = *reinterpret_cast<float2 const*>(ranges + 8 * (i / c.bucket));
    dense[i] = dequantize_add_element{}(dense[i], maxmin_grid{r.x, r.y}, unpack_level(levels, i, c.bits));
  }
}

}  // namespace sluice::detail::cuda
