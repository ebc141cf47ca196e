// random_k_select: random_k's shared draw and the gather of its values on the device, with error
// feedback fused; kernels in detail/random_k_kernels.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <thrust/iterator/transform_iterator.h>
#include <cub/device/device_scan.cuh>

#include <sluice/core/error.hpp>
#include <sluice/cuda/detail/non_finite_kernels.cuh>
#include <sluice/cuda/detail/random_k_kernels.cuh>
#include <sluice/cuda/runtime.cuh>

namespace sluice::cuda {

namespace kernel = sluice::detail::cuda;

/// Device scratch of random_k_select for tensors of up to `n` elements keeping up to `k`.
class random_k_workspace {
 public:
  random_k_workspace(std::size_t n, std::size_t k)
      : n_(n),
        k_(std::min(k, n)),
        slots_(std::bit_ceil(2 * k_ + 2)),
        targets_(std::max<std::size_t>(k_, 1)),
        keys_(slots_),
        first_(slots_),
        repeat_(std::max<std::size_t>(k_, 1)),
        bitmap_(std::max<std::size_t>((n + 31) / 32, 1)),
        offsets_(bitmap_.size()),
        bad_(1) {
    require(n < 0xffffffffu, errc::invalid_argument,
            "cuda::random_k_workspace: {} elements; indices are 32-bit, split the tensor below 2^32 - 1", n);
    std::size_t bytes = 0;
    check(cub::DeviceScan::ExclusiveSum(nullptr, bytes,
                                        thrust::make_transform_iterator(bitmap_.data(), kernel::popcount_of{}),
                                        offsets_.data(), static_cast<std::int64_t>(bitmap_.size())),
          "cuda::random_k_workspace");
    temp_ = device_buffer<std::byte>(std::max<std::size_t>(bytes, 1));
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }

 private:
  friend device_status random_k_select(std::span<float const>, std::span<float>, std::size_t, stream_key const&,
                                       random_k_element, random_k_workspace&, std::span<std::uint32_t>,
                                       std::span<float>, unsigned long long*, cudaStream_t) noexcept;
  std::size_t n_, k_, slots_;
  device_buffer<std::uint32_t> targets_;
  device_buffer<unsigned> keys_, first_;
  device_buffer<std::uint8_t> repeat_;
  device_buffer<unsigned> bitmap_, offsets_;
  device_buffer<std::byte> temp_;
  device_buffer<unsigned long long> bad_;  // non-finite compensated values of the call
};

/// Queues random_k's selection on `s`: the k indices every rank draws from `key` (pass
/// ctx.key().shared(), as sluice::random_k does) into `indices` (increasing) and the values there,
/// as `f` sends them (random_k_element::of(n, k, rescale)), into `values`. With a non-empty `g`,
/// error feedback is fused: x holds e on entry, c = g + e is sampled, and x holds the residual
/// (c where not sent, c - sent where sent; when any c was NaN or Inf, every non-finite residual
/// becomes +0, as sluice::residual clears them) on exit, and a non-null `non_finite` (device
/// memory) receives the number of NaN or Inf values of c added. write_random_k_frame builds the
/// frame from the copied-back values.
inline device_status random_k_select(std::span<float const> g, std::span<float> x, std::size_t k, stream_key const& key,
                                     random_k_element f, random_k_workspace& ws, std::span<std::uint32_t> indices,
                                     std::span<float> values, unsigned long long* non_finite, cudaStream_t s) noexcept {
  std::size_t const n = x.size();
  if (n > ws.n_ || k > ws.k_ || k > n || indices.size() < k || values.size() < k || (!g.empty() && g.size() != n))
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  auto const clear = [&] {
    if (!g.empty())
      kernel::clear_non_finite<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(x.data(), n, ws.bad_.data(),
                                                                                  non_finite);
    return status_of(cudaGetLastError());
  };
  if (!g.empty()) {
    if (auto const r = status_of(cudaMemsetAsync(ws.bad_.data(), 0, sizeof(unsigned long long), s));
        r != device_status::ok)
      return r;
    kernel::compensate<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(g.data(), x.data(), n, ws.bad_.data());
  }
  if (k == 0) return clear();
  std::size_t const words = (n + 31) / 32, slots = std::bit_ceil(2 * k + 2), mask = slots - 1;
  for (auto const r : {status_of(cudaMemsetAsync(ws.keys_.data(), 0, 4 * slots, s)),
                       status_of(cudaMemsetAsync(ws.first_.data(), 0xff, 4 * slots, s)),
                       status_of(cudaMemsetAsync(ws.bitmap_.data(), 0, 4 * words, s))})
    if (r != device_status::ok) return r;
  random_k_draw const d{philox_stream(key), n, k};
  unsigned const grid = kernel::grid_for(k);
  kernel::random_k_targets<<<grid, kernel::threads, 0, s>>>(d, ws.targets_.data(), ws.keys_.data(), ws.first_.data(),
                                                            mask);
  kernel::random_k_repeats<<<grid, kernel::threads, 0, s>>>(d, ws.targets_.data(), ws.keys_.data(), ws.first_.data(),
                                                            mask, ws.repeat_.data(), ws.bitmap_.data());
  kernel::random_k_own<<<grid, kernel::threads, 0, s>>>(d, ws.targets_.data(), ws.repeat_.data(), ws.bitmap_.data());
  std::size_t bytes = ws.temp_.size();
  if (auto const r = status_of(cub::DeviceScan::ExclusiveSum(
          ws.temp_.data(), bytes, thrust::make_transform_iterator(ws.bitmap_.data(), kernel::popcount_of{}),
          ws.offsets_.data(), static_cast<std::int64_t>(words), s));
      r != device_status::ok)
    return r;
  kernel::random_k_compact<<<kernel::grid_for(words), kernel::threads, 0, s>>>(ws.bitmap_.data(), ws.offsets_.data(),
                                                                               words, indices.data());
  kernel::random_k_gather<<<grid, kernel::threads, 0, s>>>(x.data(), indices.data(), values.data(), k, f, !g.empty());
  return clear();
}

/// random_k_select without counting the non-finite values.
inline device_status random_k_select(std::span<float const> g, std::span<float> x, std::size_t k, stream_key const& key,
                                     random_k_element f, random_k_workspace& ws, std::span<std::uint32_t> indices,
                                     std::span<float> values, cudaStream_t s) noexcept {
  return random_k_select(g, x, k, key, f, ws, indices, values, nullptr, s);
}

}  // namespace sluice::cuda
