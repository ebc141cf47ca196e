// block_top_k_select: block_top_k's selection on the device, with error feedback fused; kernels in
// detail/block_top_k_kernels.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include <sluice/core/error.hpp>
#include <sluice/cuda/detail/block_top_k_kernels.cuh>
#include <sluice/cuda/detail/non_finite_kernels.cuh>
#include <sluice/cuda/runtime.cuh>
#include <sluice/cuda/top_k.cuh>

namespace sluice::cuda {

namespace kernel = sluice::detail::cuda;

/// Device scratch of block_top_k_select for tensors of up to `n` elements in blocks of `block`.
class block_top_k_workspace {
 public:
  block_top_k_workspace(std::size_t n, std::size_t block)
      : block_(block),
        scores_(std::max<std::size_t>((n + block - 1) / block, 1)),
        kept_(scores_.size()),
        bad_(1),
        select_(scores_.size()) {
    require(block >= 1 && block <= 65536, errc::invalid_argument,
            "cuda::block_top_k_workspace: block size {} is outside [1, 65536]", block);
  }

 private:
  friend device_status block_top_k_select(std::span<float const>, std::size_t, bool, std::size_t,
                                          block_top_k_workspace&, std::span<std::uint32_t>, std::span<float>,
                                          cudaStream_t) noexcept;
  friend device_status block_top_k_select(std::span<float const>, std::span<float>, std::size_t, bool, std::size_t,
                                          block_top_k_workspace&, std::span<std::uint32_t>, std::span<float>,
                                          unsigned long long*, cudaStream_t) noexcept;
  /// The kb best of the nb scores in scores_, their blocks' elements of x gathered.
  device_status select(float const* x, std::size_t n, std::size_t nb, std::size_t kb, std::span<std::uint32_t> blocks,
                       std::span<float> values, cudaStream_t s) noexcept {
    if (auto const r = status_of(cudaGetLastError()); r != device_status::ok) return r;
    if (auto const r = top_k_select({}, std::span<float>(scores_.data(), nb), kb, select_, blocks,
                                    std::span<float>(kept_.data(), kb), s);
        r != device_status::ok)
      return r;
    kernel::gather_blocks<<<kernel::grid_for(kb * block_), kernel::threads, 0, s>>>(x, n, static_cast<unsigned>(block_),
                                                                                    blocks.data(), kb, values.data());
    return status_of(cudaGetLastError());
  }
  std::size_t block_;
  device_buffer<float> scores_, kept_;
  device_buffer<unsigned long long> bad_;  // non-finite compensated values of the call
  top_k_workspace select_;
};

/// Queues block_top_k's selection on `s`: the L1 (l2 false) or L2 scores of the blocks of `block`
/// elements, the kb best blocks by top_k_select's rule (ties to the lower block), their indices
/// (increasing) into `blocks` and their elements into `values` (kb * block, the tensor's last
/// block zero-padded). write_block_top_k_frame builds the frame from the copied-back results.
inline device_status block_top_k_select(std::span<float const> x, std::size_t block, bool l2, std::size_t kb,
                                        block_top_k_workspace& ws, std::span<std::uint32_t> blocks,
                                        std::span<float> values, cudaStream_t s) noexcept {
  std::size_t const n = x.size(), nb = (n + block - 1) / block;
  if (block != ws.block_ || nb > ws.scores_.size() || kb > nb || blocks.size() < kb || values.size() < kb * block)
    return device_status::size_mismatch;
  if (kb == 0) return device_status::ok;
  kernel::block_scores<<<kernel::grid_for(nb), kernel::threads, 0, s>>>(x.data(), n, static_cast<unsigned>(block), l2,
                                                                        ws.scores_.data(), nb);
  return ws.select(x.data(), n, nb, kb, blocks, values, s);
}

/// block_top_k_select with error feedback fused, as sluice::residual around block_top_k: x holds
/// e on entry; c = g + e is written and scored in one pass, the kb best blocks of c selected and
/// gathered, and x holds the residual on exit (c outside the kept blocks, +0 in them; when any c was
/// NaN or Inf, every non-finite residual becomes +0), and a non-null `non_finite` (device memory)
/// receives the number of NaN or Inf values of c added.
inline device_status block_top_k_select(std::span<float const> g, std::span<float> x, std::size_t block, bool l2,
                                        std::size_t kb, block_top_k_workspace& ws, std::span<std::uint32_t> blocks,
                                        std::span<float> values, unsigned long long* non_finite,
                                        cudaStream_t s) noexcept {
  std::size_t const n = x.size(), nb = (n + block - 1) / block;
  if (g.size() != n || block != ws.block_ || nb > ws.scores_.size() || kb > nb || blocks.size() < kb ||
      values.size() < kb * block)
    return device_status::size_mismatch;
  if (n == 0) return device_status::ok;
  if (auto const r = status_of(cudaMemsetAsync(ws.bad_.data(), 0, sizeof(unsigned long long), s));
      r != device_status::ok)
    return r;
  kernel::feedback_block_scores<<<kernel::grid_for(nb), kernel::threads, 0, s>>>(
      g.data(), x.data(), n, static_cast<unsigned>(block), l2, ws.scores_.data(), nb, ws.bad_.data());
  if (kb != 0) {
    if (auto const r = ws.select(x.data(), n, nb, kb, blocks, values, s); r != device_status::ok) return r;
    kernel::zero_blocks<<<kernel::grid_for(kb * block), kernel::threads, 0, s>>>(
        x.data(), n, static_cast<unsigned>(block), blocks.data(), kb);
  }
  kernel::clear_non_finite<<<kernel::grid_for(n, 4), kernel::threads, 0, s>>>(x.data(), n, ws.bad_.data(), non_finite);
  return status_of(cudaGetLastError());
}

/// block_top_k_select with feedback, without counting the non-finite values.
inline device_status block_top_k_select(std::span<float const> g, std::span<float> x, std::size_t block, bool l2,
                                        std::size_t kb, block_top_k_workspace& ws, std::span<std::uint32_t> blocks,
                                        std::span<float> values, cudaStream_t s) noexcept {
  return block_top_k_select(g, x, block, l2, kb, ws, blocks, values, nullptr, s);
}

}  // namespace sluice::cuda
