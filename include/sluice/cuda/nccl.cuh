// Compressed allreduce over NCCL with device buffers (the CGX path): every rank quantizes its
// gradient on the device (max-min, error feedback fused), the fixed-size payloads travel in one
// ncclAllGather (nccl_transport::allgather_frames, lengths agreed over the host transport first),
// and every rank decode-adds all of them on the device in rank order, so every rank holds the same
// bits. Needs nvcc, the CUDA runtime and NCCL (targets sluice::cuda and sluice::nccl).
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime.h>

#include <sluice/core/error.hpp>
#include <sluice/cuda/kernels.cuh>
#include <sluice/transport/nccl.hpp>

namespace sluice::cuda {

/// Device buffers of maxmin_allreduce for tensors of up to `n` elements quantized with `c`, on
/// `ranks` ranks: this rank's payload and every rank's, one slot of maxmin_payload_bytes each.
class maxmin_allreduce_workspace {
 public:
  maxmin_allreduce_workspace(std::size_t n, maxmin_params c, int ranks)
      : n_(n), c_(c), ranks_(ranks), mine_(maxmin_payload_bytes(n, c)), all_(mine_.size() * rank_count(ranks)) {}
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }
  /// Every rank's payload after maxmin_allreduce: rank r's at r * slot(n) bytes (device memory).
  [[nodiscard]] std::span<std::byte const> gathered() const noexcept { return {all_.data(), all_.size()}; }

 private:
  // Checked before anything is sized from it.
  static std::size_t rank_count(int ranks) {
    require(ranks >= 1, errc::invalid_argument, "cuda::maxmin_allreduce_workspace: {} ranks", ranks);
    return static_cast<std::size_t>(ranks);
  }
  template <Transport Host>
  friend void maxmin_allreduce(nccl_transport<Host>&, std::span<float const>, std::span<float>, maxmin_params,
                               stream_key const&, std::span<float>, maxmin_allreduce_workspace&, unsigned long long*,
                               cudaStream_t, deadline);
  std::size_t n_;
  maxmin_params c_;
  int ranks_;
  device_buffer<std::byte> mine_, all_;
};

/// Sums a dense fp32 device tensor over the ranks of `t` with max-min quantization: c = g + e is
/// quantized on the device (feedback_maxmin; an empty `e` quantizes g alone, `non_finite` counts
/// as there), the payloads (the frame's ranges and levels sections, maxmin_payload_bytes each) are
/// all-gathered with NCCL, and `sum` (device memory, g.size() floats) becomes the decoded payloads
/// added in rank order on `s`: the same bits on every rank, those of decode_add of each rank's
/// CPU frame in rank order. Every rank must call it in the same order with the same n and `c`
/// (checked: errc::size_mismatch on every rank otherwise). `key` is this rank's stream key
/// (ctx.key()). Synchronizes `s` before the gather; the decode-adds are queued on `s` on return.
template <Transport Host>
void maxmin_allreduce(nccl_transport<Host>& t, std::span<float const> g, std::span<float> e, maxmin_params c,
                      stream_key const& key, std::span<float> sum, maxmin_allreduce_workspace& ws,
                      unsigned long long* non_finite, cudaStream_t s, deadline d) {
  std::size_t const n = g.size(), slot = maxmin_payload_bytes(n, c);
  require(sum.size() == n && (e.empty() || e.size() == n), errc::size_mismatch,
          "cuda::maxmin_allreduce: {} gradients, {} residuals, a sum of {}", n, e.size(), sum.size());
  require(n <= ws.n_ && slot <= ws.mine_.size() && ws.ranks_ == t.size(), errc::size_mismatch,
          "cuda::maxmin_allreduce: workspace for {} elements on {} ranks, called with {} on {}", ws.n_, ws.ranks_, n,
          t.size());
  check(feedback_maxmin(g, e, c, key, std::span<std::byte>(ws.mine_.data(), slot), non_finite, s),
        "cuda::maxmin_allreduce");
  check(cudaStreamSynchronize(s), "cuda::maxmin_allreduce");
  std::size_t const ranks = static_cast<std::size_t>(t.size());
  (void)t.allgather_frames(std::span<std::byte const>(ws.mine_.data(), slot), slot,
                           std::span<std::byte>(ws.all_.data(), slot * ranks), d);
  if (n == 0) return;
  check(cudaMemsetAsync(sum.data(), 0, n * sizeof(float), s), "cuda::maxmin_allreduce");
  for (std::size_t r = 0; r < ranks; ++r)
    check(dequantize_add(sum, c, std::span<std::byte const>(ws.all_.data() + r * slot, slot), s),
          "cuda::maxmin_allreduce");
}

}  // namespace sluice::cuda
