// The kernels of dense[idx] += vals (distinct indices, as in every sluice sparse frame).
// Kernels only, in detail::cuda (see launch.cuh); their launchers are in sluice/cuda/scatter.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/cuda/detail/launch.cuh>

namespace sluice::detail::cuda {

__global__ void scatter_add(float* __restrict__ dense, std::uint32_t const* __restrict__ idx,
                            float const* __restrict__ vals, std::size_t k) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < k; j += stride)
    dense[idx[j]] = scatter_add_element{}(dense[idx[j]], vals[j]);
}

/// dense[blocks[t / block] * block + t % block] += vals[t] for t < kb * block, skipping the padding
/// past n (block_top_k's decode-add; block indices distinct).
__global__ void scatter_add_blocks(float* __restrict__ dense, std::size_t n, unsigned block,
                                   std::uint32_t const* __restrict__ blocks, std::size_t kb,
                                   float const* __restrict__ vals) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x, total = kb * block;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    std::size_t const i = static_cast<std::size_t>(blocks[t / block]) * block + t % block;
    if (i < n) dense[i] = scatter_add_element{}(dense[i], vals[t]);
  }
}

}  // namespace sluice::detail::cuda
