// Compressed allreduce over NCCL with device buffers (the CGX path): every rank compresses its
// gradient on the device with error feedback fused (max-min quantization, top-k or random-k), the
// fixed-size payloads travel in one ncclAllGather (nccl_transport::allgather_frames, lengths
// agreed over the host transport first), and every rank decode-adds all of them on the device in
// rank order, so every rank holds the same bits. Needs nvcc, the CUDA runtime and NCCL (targets
// sluice::cuda and sluice::nccl).
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime.h>

#include <sluice/compress/random_k.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/core/error.hpp>
#include <sluice/cuda/kernels.cuh>
#include <sluice/transport/nccl.hpp>

namespace sluice::cuda_detail {

/// The rank count of an allreduce workspace, checked before anything is sized from it.
inline std::size_t allreduce_ranks(int ranks, char const* what) {
  require(ranks >= 1, errc::invalid_argument, "{}: {} ranks", what, ranks);
  return static_cast<std::size_t>(ranks);
}

}  // namespace sluice::cuda_detail

namespace sluice::cuda {

/// Device buffers of maxmin_allreduce for tensors of up to `n` elements quantized with `c`, on
/// `ranks` ranks: this rank's payload and every rank's, one slot of maxmin_payload_bytes each.
class maxmin_allreduce_workspace {
 public:
  maxmin_allreduce_workspace(std::size_t n, maxmin_params c, int ranks)
      : n_(n),
        c_(c),
        ranks_(ranks),
        mine_(maxmin_payload_bytes(n, c)),
        all_(mine_.size() * kernel::allreduce_ranks(ranks, "cuda::maxmin_allreduce_workspace")) {}
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }
  /// Every rank's payload after maxmin_allreduce: rank r's at r * slot(n) bytes (device memory).
  [[nodiscard]] std::span<std::byte const> gathered() const noexcept { return {all_.data(), all_.size()}; }

 private:
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

/// Device buffers of top_k_allreduce for tensors of up to `n` elements sparsified with `c` on
/// `ranks` ranks: the selection's scratch, this rank's entries and every rank's, one slot of
/// 8 * c.keep(n) bytes each (k u32 indices, then their k f32 values).
class top_k_allreduce_workspace {
 public:
  top_k_allreduce_workspace(std::size_t n, top_k const& c, int ranks)
      : n_(n),
        ranks_(ranks),
        select_(n),
        mine_(slot_bytes(c, n)),
        all_(mine_.size() * kernel::allreduce_ranks(ranks, "cuda::top_k_allreduce_workspace")) {}
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }
  /// Every rank's entries after top_k_allreduce: rank r's k indices at r * 8k bytes, its k values
  /// at r * 8k + 4k (device memory).
  [[nodiscard]] std::span<std::byte const> gathered() const noexcept { return {all_.data(), all_.size()}; }
  /// Bytes of one rank's slot for n elements: k = c.keep(n) indices and k values.
  [[nodiscard]] static std::size_t slot_bytes(top_k const& c, std::size_t n) {
    c.validate();
    return 8 * c.keep(n);
  }

 private:
  template <Transport Host>
  friend void top_k_allreduce(nccl_transport<Host>&, std::span<float const>, std::span<float>, top_k const&,
                              std::span<float>, top_k_allreduce_workspace&, unsigned long long*, cudaStream_t,
                              deadline);
  std::size_t n_;
  int ranks_;
  top_k_workspace select_;
  device_buffer<std::byte> mine_, all_;
};

/// Sums a dense fp32 device tensor over the ranks of `t` with top-k sparsification: the k =
/// c.keep(n) entries of largest |c|, c = g + e, are selected on the device (top_k_select with
/// feedback fused: e keeps c where not sent, NaN/Inf handled and counted in `non_finite` as there;
/// an empty `e` selects from g alone), every rank's k indices and values are all-gathered with
/// NCCL, and `sum` (device memory, g.size() floats) becomes +0 plus each rank's values added at
/// its indices in rank order on `s`: the same bits on every rank, those of decode_add of each
/// rank's CPU top_k frame in rank order into zeros. Every rank must call it in the same order with
/// the same n and `c` (checked: errc::size_mismatch on every rank otherwise). Synchronizes `s`
/// before the gather; the scatter-adds are queued on `s` on return.
template <Transport Host>
void top_k_allreduce(nccl_transport<Host>& t, std::span<float const> g, std::span<float> e, top_k const& c,
                     std::span<float> sum, top_k_allreduce_workspace& ws, unsigned long long* non_finite,
                     cudaStream_t s, deadline d) {
  std::size_t const n = g.size(), slot = top_k_allreduce_workspace::slot_bytes(c, n), k = slot / 8;
  require(sum.size() == n && (e.empty() || e.size() == n), errc::size_mismatch,
          "cuda::top_k_allreduce: {} gradients, {} residuals, a sum of {}", n, e.size(), sum.size());
  require(n <= ws.n_ && slot <= ws.mine_.size() && ws.ranks_ == t.size(), errc::size_mismatch,
          "cuda::top_k_allreduce: workspace for {} elements on {} ranks, called with {} on {}", ws.n_, ws.ranks_, n,
          t.size());
  auto const indices = [k](std::byte* slot_at) {
    return std::span<std::uint32_t>(reinterpret_cast<std::uint32_t*>(slot_at), k);
  };
  auto const values = [k](std::byte* slot_at) {
    return std::span<float>(reinterpret_cast<float*>(slot_at + 4 * k), k);
  };
  // Without feedback top_k_select only reads x (g is the input then), so the const_cast writes nothing.
  std::span<float> const x = e.empty() ? std::span<float>(const_cast<float*>(g.data()), n) : e;
  check(top_k_select(e.empty() ? std::span<float const>() : g, x, k, ws.select_, indices(ws.mine_.data()),
                     values(ws.mine_.data()), non_finite, s),
        "cuda::top_k_allreduce");
  check(cudaStreamSynchronize(s), "cuda::top_k_allreduce");
  // Indices and values share one slot: one agreement over the host transport and one
  // ncclAllGather per call instead of two of each; the slot is as fixed as two would be.
  std::size_t const ranks = static_cast<std::size_t>(t.size());
  (void)t.allgather_frames(std::span<std::byte const>(ws.mine_.data(), slot), slot,
                           std::span<std::byte>(ws.all_.data(), slot * ranks), d);
  if (n == 0) return;
  check(cudaMemsetAsync(sum.data(), 0, n * sizeof(float), s), "cuda::top_k_allreduce");
  // One launch per rank, in rank order on `s`: a rank's indices are distinct, so its adds never
  // race, and each element receives the ranks' values in the CPU's order.
  for (std::size_t r = 0; r < ranks; ++r) {
    std::byte* const at = ws.all_.data() + r * slot;
    check(scatter_add(sum, indices(at), values(at), s), "cuda::top_k_allreduce");
  }
}

/// Device buffers of random_k_allreduce for tensors of up to `n` elements sparsified with `c` on
/// `ranks` ranks: the draw's scratch, the drawn indices (the same on every rank), this rank's
/// values and every rank's, one slot of 4 * c.keep(n) bytes each.
class random_k_allreduce_workspace {
 public:
  random_k_allreduce_workspace(std::size_t n, random_k const& c, int ranks)
      : n_(n),
        ranks_(ranks),
        select_(n, slot_bytes(c, n) / 4),
        indices_(std::max<std::size_t>(slot_bytes(c, n) / 4, 1)),
        mine_(slot_bytes(c, n)),
        all_(mine_.size() * kernel::allreduce_ranks(ranks, "cuda::random_k_allreduce_workspace")) {}
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }
  /// Every rank's values after random_k_allreduce: rank r's k values at r * 4k bytes (device
  /// memory), at the indices every rank drew.
  [[nodiscard]] std::span<std::byte const> gathered() const noexcept { return {all_.data(), all_.size()}; }
  /// Bytes of one rank's slot for n elements: k = c.keep(n) values.
  [[nodiscard]] static std::size_t slot_bytes(random_k const& c, std::size_t n) {
    c.validate();
    return 4 * c.keep(n);
  }

 private:
  template <Transport Host>
  friend void random_k_allreduce(nccl_transport<Host>&, std::span<float const>, std::span<float>, random_k const&,
                                 stream_key const&, std::span<float>, random_k_allreduce_workspace&,
                                 unsigned long long*, cudaStream_t, deadline);
  std::size_t n_;
  int ranks_;
  random_k_workspace select_;
  device_buffer<std::uint32_t> indices_;
  device_buffer<std::byte> mine_, all_;
};

/// Sums a dense fp32 device tensor over the ranks of `t` with random-k sparsification: every rank
/// draws the same k = c.keep(n) indices from key.shared() (random_k's shared randomness: seed,
/// step and tensor of `key`, ctx.key(), must agree across ranks, as for the CPU codec), samples
/// c = g + e there on the device (random_k_select with feedback fused: e keeps c where not sent
/// and c - sent where sent, NaN/Inf handled and counted in `non_finite` as there; an empty `e`
/// samples g alone; values scaled by n / k with c.rescale), only the k values are all-gathered
/// with NCCL, and `sum` (device memory, g.size() floats) becomes +0 plus each rank's values added
/// at the drawn indices in rank order on `s`: the same bits on every rank, those of decode_add of
/// each rank's CPU random_k frame in rank order into zeros. Every rank must call it in the same
/// order with the same n and `c` (checked: errc::size_mismatch on every rank otherwise).
/// Synchronizes `s` before the gather; the scatter-adds are queued on `s` on return.
template <Transport Host>
void random_k_allreduce(nccl_transport<Host>& t, std::span<float const> g, std::span<float> e, random_k const& c,
                        stream_key const& key, std::span<float> sum, random_k_allreduce_workspace& ws,
                        unsigned long long* non_finite, cudaStream_t s, deadline d) {
  std::size_t const n = g.size(), slot = random_k_allreduce_workspace::slot_bytes(c, n), k = slot / 4;
  require(sum.size() == n && (e.empty() || e.size() == n), errc::size_mismatch,
          "cuda::random_k_allreduce: {} gradients, {} residuals, a sum of {}", n, e.size(), sum.size());
  require(n <= ws.n_ && slot <= ws.mine_.size() && ws.ranks_ == t.size(), errc::size_mismatch,
          "cuda::random_k_allreduce: workspace for {} elements on {} ranks, called with {} on {}", ws.n_, ws.ranks_, n,
          t.size());
  std::span<std::uint32_t const> const indices(ws.indices_.data(), k);
  auto const values = [k](std::byte* slot_at) { return std::span<float>(reinterpret_cast<float*>(slot_at), k); };
  // Without feedback random_k_select only reads x (g is the input then), so the const_cast writes nothing.
  std::span<float> const x = e.empty() ? std::span<float>(const_cast<float*>(g.data()), n) : e;
  check(random_k_select(e.empty() ? std::span<float const>() : g, x, k, key.shared(),
                        random_k_element::of(n, k, c.rescale), ws.select_,
                        std::span<std::uint32_t>(ws.indices_.data(), k), values(ws.mine_.data()), non_finite, s),
        "cuda::random_k_allreduce");
  check(cudaStreamSynchronize(s), "cuda::random_k_allreduce");
  std::size_t const ranks = static_cast<std::size_t>(t.size());
  (void)t.allgather_frames(std::span<std::byte const>(ws.mine_.data(), slot), slot,
                           std::span<std::byte>(ws.all_.data(), slot * ranks), d);
  if (n == 0) return;
  check(cudaMemsetAsync(sum.data(), 0, n * sizeof(float), s), "cuda::random_k_allreduce");
  for (std::size_t r = 0; r < ranks; ++r)
    check(scatter_add(sum, indices, values(ws.all_.data() + r * slot), s), "cuda::random_k_allreduce");
}

}  // namespace sluice::cuda
