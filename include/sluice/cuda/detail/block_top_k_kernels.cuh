// Kernels of block_top_k: the L1/L2 block scores (with feedback fused), the kept blocks' residual and
// the gather of their elements.
// Kernels only, in detail::cuda (see launch.cuh); their launchers are in sluice/cuda/block_top_k.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/cuda/detail/launch.cuh>

namespace sluice::detail::cuda {

/// Scores of the blocks of block_top_k (block_top_k_score), one thread per block.
__global__ void block_scores(float const* __restrict__ x, std::size_t n, unsigned block, bool l2,
                             float* __restrict__ scores, std::size_t nb) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < nb; j += stride) {
    std::size_t const first = j * block;
    scores[j] = block_top_k_score(x + first, n - first < block ? n - first : block, l2);
  }
}

/// Error feedback around block_top_k: c = g + x is written to x and scored (block_top_k_score),
/// one thread per block, in one pass; the non-finite values of c are counted in *bad.
__global__ void feedback_block_scores(float const* __restrict__ g, float* __restrict__ x, std::size_t n, unsigned block,
                                      bool l2, float* __restrict__ scores, std::size_t nb, unsigned long long* bad) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned own = 0;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < nb; j += stride) {
    std::size_t const first = j * block, len = n - first < block ? n - first : block;
    for (std::size_t e = first; e < first + len; ++e)
      own += non_finite_count(x[e] = feedback_maxmin_element::compensate(g[e], x[e]));
    scores[j] = block_top_k_score(x + first, len, l2);
  }
  add_non_finite(bad, own);
}

/// The residual of the kept blocks: +0, what the CPU's fused feedback writes (c - c for finite c).
__global__ void zero_blocks(float* __restrict__ x, std::size_t n, unsigned block,
                            std::uint32_t const* __restrict__ blocks, std::size_t kb) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; t < kb * block; t += stride) {
    std::size_t const i = static_cast<std::size_t>(blocks[t / block]) * block + t % block;
    if (i < n) x[i] = 0.0f;
  }
}

/// The elements of the kept blocks, block after block, the tensor's last block zero-padded.
__global__ void gather_blocks(float const* __restrict__ x, std::size_t n, unsigned block,
                              std::uint32_t const* __restrict__ blocks, std::size_t kb, float* __restrict__ vals) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; t < kb * block; t += stride) {
    std::size_t const i = static_cast<std::size_t>(blocks[t / block]) * block + t % block;
    vals[t] = i < n ? x[i] : 0.0f;
  }
}

}  // namespace sluice::detail::cuda
