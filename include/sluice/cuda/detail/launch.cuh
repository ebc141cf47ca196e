// What every kernel of the CUDA backend shares: the block size, the grid of a grid-stride loop,
// alignment and counting helpers. Every per-element step is a functor of sluice/cuda/functors.hpp,
// shared with the CPU, so the bytes the device writes are the CPU codecs' bytes.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/cuda/functors.hpp>
#include <sluice/cuda/status.hpp>

namespace sluice::cuda {}  // namespace sluice::cuda

// The kernels are not declared in sluice::cuda: the host code nvcc generates to launch them would
// read libcu++'s ::cuda there as sluice::cuda and fail to compile. In sluice::detail::cuda they
// compile (nvcc 13).
namespace sluice::detail::cuda {

using namespace sluice::cuda;

inline constexpr int threads = 256;

__host__ __device__ inline bool aligned16(void const* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

/// Adds a thread's count of non-finite compensated values to *bad (when any and bad is set).
__device__ inline void add_non_finite(unsigned long long* bad, unsigned own) noexcept {
  if (bad != nullptr && own != 0) atomicAdd(bad, static_cast<unsigned long long>(own));
}

/// An optional per-element buffer (the bf16 shadow): empty, or n entries.
template <class T>
bool empty_or(std::span<T> b, std::size_t n) noexcept {
  return b.empty() || b.size() == n;
}

/// The optional buffer's device pointer, null when it is empty.
template <class T>
T* data_or_null(std::span<T> b) noexcept {
  return b.empty() ? nullptr : b.data();
}

/// Blocks for a grid-stride loop over n items: enough to fill the device, no more than needed.
inline unsigned grid_for(std::size_t n, std::size_t per_thread = 1) noexcept {
  std::size_t const want = (n / per_thread + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::size_t>(want, 1, 132 * 32));
}

}  // namespace sluice::detail::cuda
