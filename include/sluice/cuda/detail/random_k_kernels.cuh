// Kernels of random_k's shared-randomness draw (Floyd's steps resolved per thread, a table of first
// draws, a bitmap read in order) and the gather of the drawn values.
// Kernels only, in detail::cuda (see launch.cuh); their launchers are in sluice/cuda/random_k.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/cuda/detail/launch.cuh>

namespace sluice::detail::cuda {

/// Slot of value t in random_k's table of first draws (Fibonacci hashing, linear probing).
__device__ inline std::size_t random_k_slot(unsigned t, std::size_t mask) noexcept {
  return static_cast<std::size_t>((static_cast<std::uint64_t>(t) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/// The target of every draw, entered in the table (key t + 1) with the first draw that chose it.
__global__ void random_k_targets(random_k_draw d, std::uint32_t* __restrict__ targets, unsigned* __restrict__ keys,
                                 unsigned* __restrict__ first, std::size_t mask) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < d.k; j += stride) {
    unsigned const t = d.target(j);
    targets[j] = t;
    std::size_t h = random_k_slot(t, mask);
    for (;;) {
      unsigned const prev = atomicCAS(keys + h, 0u, t + 1u);
      if (prev == 0u || prev == t + 1u) break;
      h = (h + 1) & mask;
    }
    atomicMin(first + h, static_cast<unsigned>(j));
  }
}

/// Whether each draw repeats an earlier target; every target enters the bitmap.
__global__ void random_k_repeats(random_k_draw d, std::uint32_t const* __restrict__ targets,
                                 unsigned const* __restrict__ keys, unsigned const* __restrict__ first,
                                 std::size_t mask, std::uint8_t* __restrict__ repeat, unsigned* __restrict__ bitmap) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < d.k; j += stride) {
    unsigned const t = targets[j];
    std::size_t h = random_k_slot(t, mask);
    while (keys[h] != t + 1u) h = (h + 1) & mask;
    repeat[j] = first[h] != static_cast<unsigned>(j) ? 1 : 0;
    atomicOr(bitmap + t / 32, 1u << (t % 32));
  }
}

/// The own index of every draw that inserts it (random_k_draw::own_inserted) enters the bitmap.
__global__ void random_k_own(random_k_draw d, std::uint32_t const* __restrict__ targets,
                             std::uint8_t const* __restrict__ repeat, unsigned* __restrict__ bitmap) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < d.k; j += stride)
    if (d.own_inserted(targets, repeat, j)) {
      std::uint64_t const o = d.own(j);
      atomicOr(bitmap + o / 32, 1u << (o % 32));
    }
}

struct popcount_of {
  __device__ unsigned operator()(unsigned w) const noexcept { return static_cast<unsigned>(__popc(w)); }
};

/// The drawn indices in increasing order: word w of the bitmap writes its bits from offsets[w].
__global__ void random_k_compact(unsigned const* __restrict__ bitmap, unsigned const* __restrict__ offsets,
                                 std::size_t words, std::uint32_t* __restrict__ idx) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t w = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; w < words; w += stride) {
    unsigned o = offsets[w];
    for (unsigned b = bitmap[w]; b != 0; b &= b - 1)
      idx[o++] = static_cast<std::uint32_t>(32 * w + static_cast<unsigned>(__ffs(static_cast<int>(b)) - 1));
  }
}

/// Values of the drawn indices (scaled as random_k sends them); with feedback, e = c - sent there.
__global__ void random_k_gather(float* __restrict__ x, std::uint32_t const* __restrict__ idx, float* __restrict__ vals,
                                std::size_t k, random_k_element f, bool feedback) {
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < k; j += stride) {
    float const c = x[idx[j]], v = f.sent(c);
    vals[j] = v;
    if (feedback) x[idx[j]] = random_k_element::residual(c, v);
  }
}

}  // namespace sluice::detail::cuda
