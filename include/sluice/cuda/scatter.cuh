// scatter_add: dense[indices[j]] += values[j] on the device (the sparse codecs' decode-add).
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

namespace kernel = sluice::cuda_detail;

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

}  // namespace sluice::cuda
