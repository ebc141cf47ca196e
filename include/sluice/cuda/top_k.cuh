// top_k_select: the exact top-k of a device tensor (sluice::top_k's selection), with error feedback
// fused; kernels in detail/top_k_kernels.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <thrust/iterator/counting_iterator.h>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <sluice/core/error.hpp>
#include <sluice/cuda/detail/non_finite_kernels.cuh>
#include <sluice/cuda/detail/top_k_kernels.cuh>
#include <sluice/cuda/runtime.cuh>

namespace sluice::cuda {

namespace kernel = sluice::detail::cuda;

/// Device scratch of top_k_select for tensors of up to `n` elements.
class top_k_workspace {
 public:
  explicit top_k_workspace(std::size_t n)
      : n_(n),
        tiles_((n + kernel::tile - 1) / kernel::tile),
        state_(1),
        tie_count_(std::max<std::size_t>(tiles_, 1)),
        tie_cum_(std::max<std::size_t>(tiles_, 1)),
        selected_(1),
        cand_(std::max<std::size_t>(n / 16, std::size_t{1} << 16)) {
    require(n < (std::size_t{1} << 32), errc::invalid_argument,
            "cuda::top_k_workspace: {} elements; indices are 32-bit, split the tensor below 2^32", n);
    std::size_t scan_bytes = 0, select_bytes = 0;
    check(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, tie_count_.data(), tie_cum_.data(),
                                        static_cast<int>(tie_count_.size())),
          "cuda::top_k_workspace");
    check(cub::DeviceSelect::If(nullptr, select_bytes, thrust::counting_iterator<std::uint32_t>(0),
                                static_cast<std::uint32_t*>(nullptr), selected_.data(), static_cast<std::int64_t>(n),
                                kernel::top_k_selected{nullptr, nullptr}),
          "cuda::top_k_workspace");
    temp_ = device_buffer<std::byte>(std::max(scan_bytes, select_bytes));
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }

 private:
  friend device_status top_k_select(std::span<float const>, std::span<float>, std::size_t, top_k_workspace&,
                                    std::span<std::uint32_t>, std::span<float>, unsigned long long*,
                                    cudaStream_t) noexcept;
  std::size_t n_, tiles_;
  device_buffer<kernel::top_k_state> state_;
  device_buffer<unsigned> tie_count_, tie_cum_;
  device_buffer<std::int64_t> selected_;
  device_buffer<std::byte> temp_;
  device_buffer<unsigned> cand_;  // keys of the first digit's bin (AIR top-k's filtering)
};

/// Queues the exact top-k of x by magnitude on `s` (sluice::top_k's selection: the k largest
/// |x| ranked by their bits, NaN first, ties to the lower index): `indices` (increasing) and
/// `values` receive k entries. With a non-empty `g`, error feedback is fused: x holds e on entry,
/// c = g + e is ranked, and x holds the new residual (c where not sent, c - c where sent; when any
/// c was NaN or Inf, every non-finite residual becomes +0, as sluice::residual clears them) on
/// exit, and a non-null `non_finite` (device memory) receives the number of NaN or Inf values of c
/// added. write_top_k_frame builds the frame from the copied-back entries.
inline device_status top_k_select(std::span<float const> g, std::span<float> x, std::size_t k, top_k_workspace& ws,
                                  std::span<std::uint32_t> indices, std::span<float> values,
                                  unsigned long long* non_finite, cudaStream_t s) noexcept {
  std::size_t const n = x.size();
  if (n > ws.n_ || k > n || indices.size() < k || values.size() < k || (!g.empty() && g.size() != n))
    return device_status::size_mismatch;
  if (k == 0) return device_status::ok;
  kernel::top_k_state* const st = ws.state_.data();
  device_status r = status_of(cudaMemsetAsync(st, 0, sizeof(kernel::top_k_state), s));
  if (r != device_status::ok) return r;
  unsigned const grid = kernel::grid_for(n, 4 * 8), kk = static_cast<unsigned>(k);
  unsigned const cap = static_cast<unsigned>(ws.cand_.size());
  unsigned* const cand = ws.cand_.data();
  kernel::top_k_histogram<0><<<grid, kernel::threads, 0, s>>>(g.empty() ? nullptr : g.data(), x.data(), n, st, cand);
  kernel::top_k_choose<0><<<1, kernel::threads, 0, s>>>(st, kk, cap);
  kernel::top_k_histogram<1><<<grid, kernel::threads, 0, s>>>(nullptr, x.data(), n, st, cand);
  kernel::top_k_choose<1><<<1, kernel::threads, 0, s>>>(st, kk, cap);
  kernel::top_k_histogram<2><<<grid, kernel::threads, 0, s>>>(nullptr, x.data(), n, st, cand);
  kernel::top_k_choose<2><<<1, kernel::threads, 0, s>>>(st, kk, cap);
  unsigned const tiles = static_cast<unsigned>(ws.tiles_);
  kernel::top_k_tie_count<<<tiles, kernel::threads, 0, s>>>(x.data(), n, st, ws.tie_count_.data());
  std::size_t bytes = ws.temp_.size();
  r = status_of(cub::DeviceScan::InclusiveSum(ws.temp_.data(), bytes, ws.tie_count_.data(), ws.tie_cum_.data(),
                                              static_cast<int>(tiles), s));
  if (r != device_status::ok) return r;
  kernel::top_k_tie_index<<<tiles, kernel::threads, 0, s>>>(x.data(), n, st, ws.tie_cum_.data());
  bytes = ws.temp_.size();
  r = status_of(cub::DeviceSelect::If(ws.temp_.data(), bytes, thrust::counting_iterator<std::uint32_t>(0),
                                      indices.data(), ws.selected_.data(), static_cast<std::int64_t>(n),
                                      kernel::top_k_selected{x.data(), st}, s));
  if (r != device_status::ok) return r;
  kernel::top_k_gather<<<kernel::grid_for(k), kernel::threads, 0, s>>>(x.data(), indices.data(), values.data(), k,
                                                                       !g.empty());
  if (!g.empty())
    kernel::clear_non_finite<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(x.data(), n, &st->bad, non_finite);
  return status_of(cudaGetLastError());
}

/// top_k_select without counting the non-finite values.
inline device_status top_k_select(std::span<float const> g, std::span<float> x, std::size_t k, top_k_workspace& ws,
                                  std::span<std::uint32_t> indices, std::span<float> values, cudaStream_t s) noexcept {
  return top_k_select(g, x, k, ws, indices, values, nullptr, s);
}

}  // namespace sluice::cuda
