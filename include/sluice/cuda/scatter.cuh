// scatter_add: dense[indices[j]] += values[j] on the device (the sparse codecs' decode-add), and
// scatter_add_blocks, block_top_k's.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/core/error.hpp>
#include <sluice/cuda/detail/scatter_kernels.cuh>
#include <sluice/cuda/runtime.cuh>

namespace sluice::cuda {

namespace kernel = sluice::detail::cuda;

/// Queues dense[indices[j]] += values[j] on `s`; indices distinct and below dense.size() (as in
/// every sluice sparse frame; duplicates would race).
inline device_status scatter_add(std::span<float> dense, std::span<std::uint32_t const> indices,
                                 std::span<float const> values, cudaStream_t s) noexcept {
  if (indices.size() != values.size()) return device_status::size_mismatch;
  if (indices.empty()) return device_status::ok;
  kernel::scatter_add<<<kernel::grid_for(indices.size()), kernel::threads, 0, s>>>(dense.data(), indices.data(),
                                                                                   values.data(), indices.size());
  return status_of(cudaGetLastError());
}

/// Queues the decode-add of block_top_k on `s`: the `block` elements of values from t * block
/// onwards are added at block blocks[t] (distinct block indices), the tensor's padding past
/// dense.size() skipped.
inline device_status scatter_add_blocks(std::span<float> dense, std::span<std::uint32_t const> blocks,
                                        std::size_t block, std::span<float const> values, cudaStream_t s) noexcept {
  if (block < 1 || block > 65536 || values.size() != blocks.size() * block) return device_status::size_mismatch;
  if (blocks.empty()) return device_status::ok;
  kernel::scatter_add_blocks<<<kernel::grid_for(values.size()), kernel::threads, 0, s>>>(
      dense.data(), dense.size(), static_cast<unsigned>(block), blocks.data(), blocks.size(), values.data());
  return status_of(cudaGetLastError());
}

}  // namespace sluice::cuda
