// Error feedback around max-min quantization on the device: feedback_maxmin writes the frame's ranges
// and levels sections (finish_maxmin_frame completes the frame on the host), dequantize_add adds a
// payload into a dense tensor. Launchers return a device_status; kernels in detail/maxmin_kernels.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/core/error.hpp>
#include <sluice/cuda/detail/maxmin_kernels.cuh>
#include <sluice/cuda/runtime.cuh>

namespace sluice::cuda {

namespace kernel = sluice::detail::cuda;

/// Device bytes feedback_maxmin writes at `payload`: the ranges then the levels section, rounded
/// up to 8 (the kernel may OR into the last 32-bit word).
inline std::size_t maxmin_payload_bytes(std::size_t n, maxmin_params c) noexcept {
  std::size_t const nb = (n + c.bucket - 1) / c.bucket;
  return (8 * nb + (n * c.bits + 7) / 8 + 7) / 8 * 8;
}

/// Queues error feedback around max-min quantization on `s`: c = g + e, the frame's ranges and
/// levels sections into `payload` (maxmin_payload_bytes, 8-aligned device memory), e = c -
/// decode (+0 where not finite, as sluice::residual stores it; a bucket holding NaN or Inf keeps
/// +0 throughout). An empty `e` quantizes g alone. The sections equal the CPU encoder's bytes
/// (finish_maxmin_frame completes the frame on the host). Buckets of 64..4096, bits 1..8. With
/// e, a non-null `non_finite` (device memory, non_finite_counter::count()) receives the number of
/// NaN or Inf compensated values added.
inline device_status feedback_maxmin(std::span<float const> g, std::span<float> e, maxmin_params c,
                                     stream_key const& key, std::span<std::byte> payload,
                                     unsigned long long* non_finite, cudaStream_t s) noexcept {
  std::size_t const n = g.size();
  if (c.bits < 1 || c.bits > 8 || c.bucket < 64 || c.bucket > 4096 || (!e.empty() && e.size() != n) ||
      payload.size() < maxmin_payload_bytes(n, c) || reinterpret_cast<std::uintptr_t>(payload.data()) % 8 != 0)
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  std::size_t const nb = (n + c.bucket - 1) / c.bucket;
  auto* const ranges = reinterpret_cast<std::uint8_t*>(payload.data());
  if (c.bucket % 8 != 0) {
    if (auto const st = status_of(cudaMemsetAsync(ranges + 8 * nb, 0, payload.size() - 8 * nb, s));
        st != device_status::ok)
      return st;
  }
  kernel::feedback_maxmin<<<static_cast<unsigned>(nb), kernel::threads, 0, s>>>(
      g.data(), e.empty() ? nullptr : e.data(), n, c, philox_stream(key), ranges, ranges + 8 * nb, non_finite);
  return status_of(cudaGetLastError());
}

/// feedback_maxmin without counting the non-finite values.
inline device_status feedback_maxmin(std::span<float const> g, std::span<float> e, maxmin_params c,
                                     stream_key const& key, std::span<std::byte> payload, cudaStream_t s) noexcept {
  return feedback_maxmin(g, e, c, key, payload, nullptr, s);
}

/// Queues dense += decode(ranges, levels) on `s` (the two sections as feedback_maxmin writes
/// them, 8-aligned device memory).
inline device_status dequantize_add(std::span<float> dense, maxmin_params c, std::span<std::byte const> payload,
                                    cudaStream_t s) noexcept {
  std::size_t const n = dense.size(), nb = (n + c.bucket - 1) / c.bucket;
  if (c.bits < 1 || c.bits > 8 || c.bucket < 64 || c.bucket > 4096 || payload.size() < 8 * nb + (n * c.bits + 7) / 8 ||
      reinterpret_cast<std::uintptr_t>(payload.data()) % 8 != 0)
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  auto const* ranges = reinterpret_cast<std::uint8_t const*>(payload.data());
  kernel::dequantize_add<<<kernel::grid_for(n), kernel::threads, 0, s>>>(dense.data(), n, c, ranges, ranges + 8 * nb);
  return status_of(cudaGetLastError());
}

}  // namespace sluice::cuda
