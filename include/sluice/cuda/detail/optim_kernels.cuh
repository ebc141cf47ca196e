// Kernels of the dense optimizer steps (fp32 moments, float4 loads) and of the element-targeted
// steps (lazy sparse, catch-up replay, bf16 moments).
// Kernels only, in detail::cuda (see launch.cuh); their launchers are in sluice/cuda/optim.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/cuda/detail/launch.cuh>

namespace sluice::detail::cuda {

__global__ void __launch_bounds__(threads)
    adam_step(float* __restrict__ p, float const* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
              std::size_t n, adam_element f, std::uint16_t* __restrict__ shadow) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::size_t const quads = aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v) ? n / 4 : 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < quads; i += stride) {
    float4 pv = reinterpret_cast<float4*>(p)[i], mv = reinterpret_cast<float4*>(m)[i],
           vv = reinterpret_cast<float4*>(v)[i];
    float4 const gv = reinterpret_cast<float4 const*>(g)[i];
    f(pv.x, gv.x, mv.x, vv.x), f(pv.y, gv.y, mv.y, vv.y), f(pv.z, gv.z, mv.z, vv.z), f(pv.w, gv.w, mv.w, vv.w);
    reinterpret_cast<float4*>(p)[i] = pv, reinterpret_cast<float4*>(m)[i] = mv, reinterpret_cast<float4*>(v)[i] = vv;
    if (shadow != nullptr) {
      shadow[4 * i] = bf16_nearest(pv.x), shadow[4 * i + 1] = bf16_nearest(pv.y);
      shadow[4 * i + 2] = bf16_nearest(pv.z), shadow[4 * i + 3] = bf16_nearest(pv.w);
    }
  }
  for (std::size_t i = 4 * quads + blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride) {
    f(p[i], g[i], m[i], v[i]);
    if (shadow != nullptr) shadow[i] = bf16_nearest(p[i]);
  }
}

__global__ void __launch_bounds__(threads)
    sgd_step(float* __restrict__ p, float const* __restrict__ g, float* __restrict__ b, std::size_t n, sgd_element f,
             std::uint16_t* __restrict__ shadow) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride) {
    float unused = 0.0f;
    f(p[i], g[i], b != nullptr ? b[i] : unused);
    if (shadow != nullptr) shadow[i] = bf16_nearest(p[i]);
  }
}

/// Optimizer moments in device memory: fp32 (f) or bf16 bits (b, rounded by r).
struct moment_ptrs {
  float* f[2] = {nullptr, nullptr};
  std::uint16_t* b[2] = {nullptr, nullptr};
  bf16_moment_rounding r{};

  __device__ float load(unsigned j, std::size_t i) const noexcept {
    return b[j] != nullptr ? bf16_value(b[j][i]) : f[j][i];
  }
  __device__ void store(unsigned j, std::size_t i, float m) const noexcept {
    if (b[j] != nullptr)
      b[j][i] = r(m, i, j);
    else
      f[j][i] = m;
  }
};

/// Adam / AdamW at the elements `at` targets: value t of g updates element at.at(t) (the lazy
/// sparse step, or a dense one with bf16 moments). With per-entry counters `last`
/// (sparse_mode::catch_up), the element's skipped steps are replayed first (cu, up to step
/// cu.t - 1) and its counter set to cu.t; with g null too, only the replay runs, up to cu.t
/// (flush).
__global__ void __launch_bounds__(threads)
    adam_step_at(float* __restrict__ p, float const* __restrict__ g, std::size_t count, sparse_target at, moment_ptrs m,
                 adam_element f, std::uint16_t* __restrict__ shadow, std::uint32_t* __restrict__ last,
                 adam_catch_up cu) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::uint64_t const target = g != nullptr ? cu.t - 1 : cu.t;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; t < count; t += stride) {
    std::size_t const i = at.at(t);
    if (i == at.n) continue;
    float m0 = m.load(0, i), m1 = m.load(1, i);
    if (last != nullptr) {
      cu(p[i], m0, m1, last[i], target);
      last[i] = static_cast<std::uint32_t>(cu.t);
    }
    if (g != nullptr) f(p[i], g[t], m0, m1);
    m.store(0, i, m0), m.store(1, i, m1);
    if (shadow != nullptr) shadow[i] = bf16_nearest(p[i]);
  }
}

/// SGD at the elements `at` targets (see adam_step_at); without momentum m is not read.
__global__ void __launch_bounds__(threads)
    sgd_step_at(float* __restrict__ p, float const* __restrict__ g, std::size_t count, sparse_target at, moment_ptrs m,
                sgd_element f, std::uint16_t* __restrict__ shadow, std::uint32_t* __restrict__ last, sgd_catch_up cu) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::uint64_t const target = g != nullptr ? cu.t - 1 : cu.t;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; t < count; t += stride) {
    std::size_t const i = at.at(t);
    if (i == at.n) continue;
    float b = f.momentum ? m.load(0, i) : 0.0f;
    if (last != nullptr) {
      cu(p[i], b, last[i], target);
      last[i] = static_cast<std::uint32_t>(cu.t);
    }
    if (g != nullptr) f(p[i], g[t], b);
    if (f.momentum) m.store(0, i, b);
    if (shadow != nullptr) shadow[i] = bf16_nearest(p[i]);
  }
}

}  // namespace sluice::detail::cuda
