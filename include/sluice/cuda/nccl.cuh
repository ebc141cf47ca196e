// Compressed allreduce over NCCL with device buffers (the CGX path): every rank compresses its
// gradient on the device with error feedback fused (max-min quantization, top-k or random-k), the
// fixed-size payloads travel in one ncclAllGather (nccl_transport::allgather_frames, lengths
// agreed over the host transport first), and every rank decode-adds all of them on the device in
// rank order, so every rank holds the same bits. Needs nvcc, the CUDA runtime and NCCL (targets
// sluice::cuda and sluice::nccl).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

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

/// The front of every rank's slot in a sparse allreduce: its element count and, for random-k, the
/// shared key's seed, step and tensor. Read back after the gather, so a rank with another tensor
/// size (even one with the same k) or another draw makes every rank throw before any add.
struct sparse_slot_header {
  std::uint64_t n = 0, seed = 0;
  std::uint32_t step = 0, tensor = 0;
};
static_assert(sizeof(sparse_slot_header) == 24);

/// The gather of a sparse allreduce: `mine` (this rank's slot, its entries written on `s` after
/// the header's place) travels to `all` in rank order; every rank then checks every header against
/// its own (errc::size_mismatch for another n, errc::invalid_argument for another draw) and, when
/// they agree, `sum` becomes +0 plus add(rank r's slot) queued on `s` for r in rank order.
template <Transport Host, class Add>
void sparse_allreduce(nccl_transport<Host>& t, sparse_slot_header const& h, std::byte* mine, std::byte* all,
                      std::size_t slot, std::span<float> sum, Add add, cudaStream_t s, deadline d, char const* what) {
  check(cudaMemcpyAsync(mine, &h, sizeof h, cudaMemcpyHostToDevice, s), what);
  check(cudaStreamSynchronize(s), what);
  std::size_t const ranks = static_cast<std::size_t>(t.size());
  (void)t.allgather_frames(std::span<std::byte const>(mine, slot), slot, std::span<std::byte>(all, slot * ranks), d);
  std::vector<sparse_slot_header> hs(ranks);
  check(cudaMemcpy2DAsync(hs.data(), sizeof h, all, slot, sizeof h, ranks, cudaMemcpyDeviceToHost, s), what);
  check(cudaStreamSynchronize(s), what);
  for (std::size_t r = 0; r < ranks; ++r) {
    require(hs[r].n == h.n, errc::size_mismatch,
            "{}: rank {}: a tensor of {} elements, rank {} has {} (call it with the same tensor on every rank)", what,
            t.rank(), h.n, r, hs[r].n);
    require(hs[r].seed == h.seed && hs[r].step == h.step && hs[r].tensor == h.tensor, errc::invalid_argument,
            "{}: rank {}: indices drawn for seed {}, step {}, tensor {}, rank {} for seed {}, step {}, tensor {} "
            "(random_k's shared draw needs the same seed, step and tensor on every rank)",
            what, t.rank(), h.seed, h.step, h.tensor, r, hs[r].seed, hs[r].step, hs[r].tensor);
  }
  if (sum.empty()) return;
  check(cudaMemsetAsync(sum.data(), 0, sum.size() * sizeof(float), s), what);
  // One launch per rank, in rank order on `s`: a rank's indices are distinct, so its adds never
  // race, and each element receives the ranks' values in the CPU decode_add's order.
  for (std::size_t r = 0; r < ranks; ++r) check(add(all + r * slot), what);
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
/// `ranks` ranks: the selection's scratch, this rank's slot and every rank's (k = c.keep(n)
/// indices and their values, behind a 24-byte header).
class top_k_allreduce_workspace {
 public:
  top_k_allreduce_workspace(std::size_t n, top_k const& c, int ranks)
      : n_(n),
        ranks_(ranks),
        select_(n),
        mine_(slot_bytes(c, n)),
        all_(mine_.size() * kernel::allreduce_ranks(ranks, "cuda::top_k_allreduce_workspace")) {}
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }

 private:
  static constexpr std::size_t header = sizeof(kernel::sparse_slot_header);
  static std::size_t slot_bytes(top_k const& c, std::size_t n) {
    c.validate();
    return header + 8 * c.keep(n);
  }
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
/// before and after the gather; the scatter-adds are queued on `s` on return.
template <Transport Host>
void top_k_allreduce(nccl_transport<Host>& t, std::span<float const> g, std::span<float> e, top_k const& c,
                     std::span<float> sum, top_k_allreduce_workspace& ws, unsigned long long* non_finite,
                     cudaStream_t s, deadline d) {
  using wsp = top_k_allreduce_workspace;
  std::size_t const n = g.size(), slot = wsp::slot_bytes(c, n), k = (slot - wsp::header) / 8;
  require(sum.size() == n && (e.empty() || e.size() == n), errc::size_mismatch,
          "cuda::top_k_allreduce: {} gradients, {} residuals, a sum of {}", n, e.size(), sum.size());
  require(n <= ws.n_ && slot <= ws.mine_.size() && ws.ranks_ == t.size(), errc::size_mismatch,
          "cuda::top_k_allreduce: workspace for {} elements on {} ranks, called with {} on {}", ws.n_, ws.ranks_, n,
          t.size());
  // Indices and values share one slot: one agreement over the host transport and one
  // ncclAllGather per call instead of two of each, and the slot is as fixed as two would be.
  auto const indices = [k](std::byte* slot_at) {
    return std::span<std::uint32_t>(reinterpret_cast<std::uint32_t*>(slot_at + wsp::header), k);
  };
  auto const values = [k](std::byte* slot_at) {
    return std::span<float>(reinterpret_cast<float*>(slot_at + wsp::header + 4 * k), k);
  };
  // Without feedback top_k_select only reads x (g is the input), so the const_cast writes nothing.
  std::span<float> const x = e.empty() ? std::span<float>(const_cast<float*>(g.data()), n) : e;
  check(top_k_select(e.empty() ? std::span<float const>() : g, x, k, ws.select_, indices(ws.mine_.data()),
                     values(ws.mine_.data()), non_finite, s),
        "cuda::top_k_allreduce");
  kernel::sparse_allreduce(
      t, kernel::sparse_slot_header{.n = n}, ws.mine_.data(), ws.all_.data(), slot, sum,
      [&](std::byte* at) { return scatter_add(sum, indices(at), values(at), s); }, s, d, "cuda::top_k_allreduce");
}

/// Device buffers of random_k_allreduce for tensors of up to `n` elements sparsified with `c` on
/// `ranks` ranks: the draw's scratch, the drawn indices (the same on every rank), this rank's
/// slot and every rank's (k = c.keep(n) values behind a 24-byte header).
class random_k_allreduce_workspace {
 public:
  random_k_allreduce_workspace(std::size_t n, random_k const& c, int ranks)
      : n_(n),
        ranks_(ranks),
        select_(n, entries(c, n)),
        indices_(std::max<std::size_t>(entries(c, n), 1)),
        mine_(header + 4 * entries(c, n)),
        all_(mine_.size() * kernel::allreduce_ranks(ranks, "cuda::random_k_allreduce_workspace")) {}
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }

 private:
  static constexpr std::size_t header = sizeof(kernel::sparse_slot_header);
  static std::size_t entries(random_k const& c, std::size_t n) {
    c.validate();
    return c.keep(n);
  }
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
/// draws the same k = c.keep(n) indices from key.shared() (random_k's shared randomness: pass
/// ctx.key(); its seed, step and tensor must be the same on every rank, as for the CPU codec),
/// samples c = g + e there on the device (random_k_select with feedback fused: e keeps c where
/// not sent and c - sent where sent, NaN/Inf handled and counted in `non_finite` as there; an
/// empty `e` samples g alone; values scaled by n / k with c.rescale), only the k values are
/// all-gathered with NCCL, and `sum` (device memory, g.size() floats) becomes +0 plus each rank's
/// values added at the drawn indices in rank order on `s`: the same bits on every rank, those of
/// decode_add of each rank's CPU random_k frame in rank order into zeros. Every rank must call it
/// in the same order with the same n, `c` and key (checked: errc::size_mismatch on every rank for
/// another n or k, errc::invalid_argument for another seed, step or tensor). Synchronizes `s`
/// before and after the gather; the scatter-adds are queued on `s` on return.
template <Transport Host>
void random_k_allreduce(nccl_transport<Host>& t, std::span<float const> g, std::span<float> e, random_k const& c,
                        stream_key const& key, std::span<float> sum, random_k_allreduce_workspace& ws,
                        unsigned long long* non_finite, cudaStream_t s, deadline d) {
  using wsp = random_k_allreduce_workspace;
  std::size_t const n = g.size(), k = wsp::entries(c, n), slot = wsp::header + 4 * k;
  require(sum.size() == n && (e.empty() || e.size() == n), errc::size_mismatch,
          "cuda::random_k_allreduce: {} gradients, {} residuals, a sum of {}", n, e.size(), sum.size());
  require(n <= ws.n_ && slot <= ws.mine_.size() && ws.ranks_ == t.size(), errc::size_mismatch,
          "cuda::random_k_allreduce: workspace for {} elements on {} ranks, called with {} on {}", ws.n_, ws.ranks_, n,
          t.size());
  std::span<std::uint32_t> const indices(ws.indices_.data(), k);
  auto const values = [k](std::byte* slot_at) {
    return std::span<float>(reinterpret_cast<float*>(slot_at + wsp::header), k);
  };
  // Without feedback random_k_select only reads x (g is the input), so the const_cast writes nothing.
  std::span<float> const x = e.empty() ? std::span<float>(const_cast<float*>(g.data()), n) : e;
  stream_key const shared = key.shared();
  check(random_k_select(e.empty() ? std::span<float const>() : g, x, k, shared, random_k_element::of(n, k, c.rescale),
                        ws.select_, indices, values(ws.mine_.data()), non_finite, s),
        "cuda::random_k_allreduce");
  kernel::sparse_allreduce(
      t, kernel::sparse_slot_header{.n = n, .seed = shared.seed, .step = shared.step, .tensor = shared.tensor},
      ws.mine_.data(), ws.all_.data(), slot, sum,
      [&](std::byte* at) { return scatter_add(sum, indices, values(at), s); }, s, d, "cuda::random_k_allreduce");
}

}  // namespace sluice::cuda
