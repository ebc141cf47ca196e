// Kernels of error feedback's non-finite handling: the fused compensation x = g + x counting NaN and
// Inf, the clearing of non-finite residuals, the search for the first NaN or Inf.
// Kernels only, in detail::cuda (see launch.cuh); their launchers are in sluice/cuda/non_finite.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/cuda/detail/launch.cuh>

namespace sluice::detail::cuda {

/// The end of a sparse selection with feedback fused, as sluice::residual ends it: when this call
/// counted non-finite compensated values (*bad != 0), every non-finite residual becomes +0 and the
/// count is added to *total (when set); otherwise nothing is read.
__global__ void __launch_bounds__(threads)
    clear_non_finite(float* __restrict__ x, std::size_t n, unsigned long long const* bad, unsigned long long* total) {
  unsigned long long const b = *bad;
  if (b == 0) return;
  if (total != nullptr && blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(total, b);
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride)
    x[i] = kept_residual(x[i]);
}

/// The first NaN or Inf of x: *at = min(*at, its index) (*at starts at all ones).
__global__ void __launch_bounds__(threads)
    find_non_finite(float const* __restrict__ x, std::size_t n, unsigned long long* at) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride)
    if (non_finite_count(x[i]) != 0) {
      atomicMin(at, static_cast<unsigned long long>(i));
      return;  // later indices of this thread are larger
    }
}

/// x = g + x (error feedback's compensation), float4 when aligned; non-finite sums counted in *bad.
__global__ void __launch_bounds__(threads)
    compensate(float const* __restrict__ g, float* __restrict__ x, std::size_t n, unsigned long long* bad) {
  unsigned own = 0;
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * threads;
  std::size_t const quads = aligned16(g) && aligned16(x) ? n / 4 : 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < quads; i += stride) {
    float4 const gv = reinterpret_cast<float4 const*>(g)[i];
    float4 xv = reinterpret_cast<float4*>(x)[i];
    xv = make_float4(feedback_maxmin_element::compensate(gv.x, xv.x), feedback_maxmin_element::compensate(gv.y, xv.y),
                     feedback_maxmin_element::compensate(gv.z, xv.z), feedback_maxmin_element::compensate(gv.w, xv.w));
    reinterpret_cast<float4*>(x)[i] = xv;
    own += non_finite_count(xv.x) + non_finite_count(xv.y) + non_finite_count(xv.z) + non_finite_count(xv.w);
  }
  for (std::size_t i = 4 * quads + blockIdx.x * static_cast<std::size_t>(threads) + threadIdx.x; i < n; i += stride)
    own += non_finite_count(x[i] = feedback_maxmin_element::compensate(g[i], x[i]));
  add_non_finite(bad, own);
}

}  // namespace sluice::detail::cuda
