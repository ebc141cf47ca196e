// Compressed allreduce over NCCL with device buffers (the CGX path), in the vocabulary of the CPU
// collectives: cuda::allreduce(t, codec, feedback, grad, residual, sum, ctx, ws, stream). Every
// rank compresses its gradient on the device with error feedback fused (any DeviceCodec: max-min
// quantization, top-k, random-k), the fixed-size slots travel in one ncclAllGather
// (nccl_transport::allgather_frames, lengths agreed over the host transport first), and every rank
// adds all of them into the sum on the device in rank order, so every rank holds the same bits.
// Needs nvcc, the CUDA runtime and NCCL (targets sluice::cuda and sluice::nccl).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <cuda_runtime.h>

#include <sluice/collective/concepts.hpp>
#include <sluice/core/error.hpp>
#include <sluice/cuda/device_codec.cuh>
#include <sluice/cuda/non_finite.cuh>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/transport/nccl.hpp>

namespace sluice::detail::cuda {

/// The front of every rank's slot: its element count and, for a codec whose ranks draw the same
/// indices (random_k), the shared key's seed, step and tensor. Read back after the gather, so a
/// rank with another tensor size or another draw makes every rank throw before any add.
struct slot_header {
  std::uint64_t n = 0, seed = 0;
  std::uint32_t step = 0, tensor = 0;
};
static_assert(sizeof(slot_header) == 24);

/// The rank count of an allreduce workspace, checked before anything is sized from it.
inline std::size_t allreduce_ranks(int ranks) {
  require(ranks >= 1, errc::invalid_argument, "cuda::allreduce_workspace: {} ranks", ranks);
  return static_cast<std::size_t>(ranks);
}

}  // namespace sluice::detail::cuda

namespace sluice::cuda {

/// A feedback policy the device allreduce applies: sluice::residual (fp32 residual, c = g + e
/// compressed and e = c - sent kept, fused on the device) or sluice::no_feedback (g alone). Its
/// non_finite policy decides what a NaN or Inf gradient does, as on the CPU.
template <class F>
concept DeviceFeedback = std::same_as<F, residual> || std::same_as<F, no_feedback>;

/// What one cuda::allreduce did beyond the sum: whether the step was skipped on every rank
/// (non_finite_policy::skip_step and a NaN or Inf gradient on some rank: sum and residual
/// untouched), and how many compensated values were NaN or Inf under non_finite_policy::propagate
/// (what feedback_state::record_non_finite takes; counted with a residual only).
struct allreduce_result {
  bool skipped = false;
  std::uint64_t non_finite = 0;
};

/// Device buffers of cuda::allreduce for tensors of up to `n` elements compressed with `codec` on
/// `ranks` ranks: the codec's device scratch, this rank's slot and every rank's (a 24-byte header
/// then device_codec<C>::payload_bytes), and the non-finite counters.
template <DeviceCodec C>
class allreduce_workspace {
 public:
  allreduce_workspace(std::size_t n, C const& codec, int ranks)
      : n_(n),
        ranks_(ranks),
        scratch_(n, codec),
        mine_(header + device_codec<C>::payload_bytes(codec, n)),
        all_(mine_.size() * detail::cuda::allreduce_ranks(ranks)) {}
  [[nodiscard]] std::size_t capacity() const noexcept { return n_; }
  /// Every rank's slot after an allreduce of n elements: rank r's at r * slot_bytes(codec, n)
  /// (device memory), its payload `header` bytes in.
  [[nodiscard]] std::span<std::byte const> gathered() const noexcept { return {all_.data(), all_.size()}; }
  /// Bytes of one rank's slot for n elements.
  [[nodiscard]] static std::size_t slot_bytes(C const& codec, std::size_t n) {
    return header + device_codec<C>::payload_bytes(codec, n);
  }
  static constexpr std::size_t header = sizeof(detail::cuda::slot_header);

 private:
  template <Transport Host, DeviceCodec D, DeviceFeedback F>
  friend allreduce_result allreduce(nccl_transport<Host>&, D const&, F const&, std::span<float const>, std::span<float>,
                                    std::span<float>, collective_context const&, allreduce_workspace<D>&, cudaStream_t);
  std::size_t n_;
  int ranks_;
  typename device_codec<C>::scratch scratch_;
  device_buffer<std::byte> mine_, all_;
  non_finite_counter non_finite_;
  pinned_buffer<unsigned long long> count_{1};
};

/// Sums a dense fp32 device tensor over the ranks of `t` with `codec` on the device: with
/// sluice::residual, c = grad + residual is compressed and `residual` (device memory, grad.size()
/// floats, fp32 precision) keeps c - sent (+0 where not finite, as sluice::residual stores it);
/// with sluice::no_feedback, grad alone is compressed and `residual` must be empty. The slots are
/// all-gathered with NCCL and `sum` (device memory, grad.size() floats) becomes +0 plus each rank's
/// payload decoded and added in rank order on `stream`: the same bits on every rank, those of
/// decode_add of each rank's CPU frame (encoded with ctx.for_rank(rank)) in rank order.
///
/// The feedback's non_finite policy runs before anything changes, as on the CPU: throw_error
/// throws errc::non_finite naming the tensor (ctx.tensor), element and step; skip_step agrees over
/// the ranks (one NCCL allreduce of a flag) and, when any rank found a NaN or Inf, every rank
/// returns skipped with sum and residual untouched; propagate compresses and counts. ctx.step,
/// ctx.tensor and ctx.seed give the stream key (random_k's shared draw: the same on every rank,
/// checked), ctx.timeout the deadline. Every rank must call it in the same order with the same n
/// and codec (checked: errc::size_mismatch on every rank otherwise). Synchronizes `stream` before
/// and after the gather; the adds are queued on `stream` on return.
template <Transport Host, DeviceCodec C, DeviceFeedback F>
allreduce_result allreduce(nccl_transport<Host>& t, C const& codec, F const& feedback, std::span<float const> grad,
                           std::span<float> residual, std::span<float> sum, collective_context const& ctx,
                           allreduce_workspace<C>& ws, cudaStream_t stream) {
  using dc = device_codec<C>;
  constexpr char const* what = "cuda::allreduce";
  std::size_t const n = grad.size(), slot = allreduce_workspace<C>::slot_bytes(codec, n);
  constexpr bool keeps = std::same_as<F, sluice::residual>;
  if constexpr (keeps)
    require(feedback.precision == element_type::f32, errc::unsupported,
            "{}: tensor {}: a {} residual; the device keeps fp32 residuals (residual{{.precision = f32}})", what,
            ctx.tensor, to_string(feedback.precision));
  require(sum.size() == n && residual.size() == (keeps ? n : 0), errc::size_mismatch,
          "{}: tensor {}: {} gradients, {} residuals, a sum of {} ({})", what, ctx.tensor, n, residual.size(),
          sum.size(), keeps ? "residual needs one residual per gradient" : "no_feedback takes no residual");
  require(n <= ws.n_ && slot <= ws.mine_.size() && ws.ranks_ == t.size(), errc::size_mismatch,
          "{}: tensor {}: workspace for {} elements on {} ranks, called with {} on {} (size it for this codec)", what,
          ctx.tensor, ws.n_, ws.ranks_, n, t.size());
  deadline const d = deadline::after(ctx.timeout);
  if (feedback.non_finite != non_finite_policy::propagate) {
    std::size_t const at = ws.non_finite_.find(grad, stream);
    if (feedback.non_finite == non_finite_policy::throw_error)
      require(at == std::numeric_limits<std::size_t>::max(), errc::non_finite,
              "{}: tensor {} has a non-finite gradient at element {} in step {}; state unchanged (choose "
              "non_finite_policy::skip_step or propagate to continue past such steps)",
              what, ctx.tensor, at, ctx.step);
    else {
      float any = at == std::numeric_limits<std::size_t>::max() ? 0.0f : 1.0f;
      t.native_allreduce_sum(std::span<float>(&any, 1), d);
      if (any != 0.0f) return {.skipped = true};
    }
  }
  stream_key const key = ctx.for_rank(t.rank()).key(), drawn = dc::draw_key(key);
  detail::cuda::slot_header const h{.n = n, .seed = drawn.seed, .step = drawn.step, .tensor = drawn.tensor};
  std::byte* const mine = ws.mine_.data();
  std::span<std::byte> const payload(mine + sizeof h, slot - sizeof h);
  check(dc::encode(codec, grad, residual, key, ws.scratch_, payload, ws.non_finite_.count(), stream), what);
  check(cudaMemcpyAsync(mine, &h, sizeof h, cudaMemcpyHostToDevice, stream), what);
  check(cudaMemcpyAsync(ws.count_.data(), ws.non_finite_.count(), sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                        stream),
        what);
  check(cudaMemsetAsync(ws.non_finite_.count(), 0, sizeof(unsigned long long), stream), what);
  check(cudaStreamSynchronize(stream), what);
  allreduce_result const result{.non_finite = *ws.count_.data()};
  std::size_t const ranks = static_cast<std::size_t>(t.size());
  std::byte* const all = ws.all_.data();
  (void)t.allgather_frames(std::span<std::byte const>(mine, slot), slot, std::span<std::byte>(all, slot * ranks), d);
  std::vector<detail::cuda::slot_header> hs(ranks);
  check(cudaMemcpy2DAsync(hs.data(), sizeof h, all, slot, sizeof h, ranks, cudaMemcpyDeviceToHost, stream), what);
  check(cudaStreamSynchronize(stream), what);
  for (std::size_t r = 0; r < ranks; ++r) {
    require(hs[r].n == h.n, errc::size_mismatch,
            "{}: rank {}: tensor {} of {} elements, rank {} has {} (call it with the same tensor on every rank)", what,
            t.rank(), ctx.tensor, h.n, r, hs[r].n);
    require(hs[r].seed == h.seed && hs[r].step == h.step && hs[r].tensor == h.tensor, errc::invalid_argument,
            "{}: rank {}: indices drawn for seed {}, step {}, tensor {}, rank {} for seed {}, step {}, tensor {} "
            "(a shared draw needs the same ctx.seed, ctx.step and ctx.tensor on every rank)",
            what, t.rank(), h.seed, h.step, h.tensor, r, hs[r].seed, hs[r].step, hs[r].tensor);
  }
  if (n == 0) return result;
  check(cudaMemsetAsync(sum.data(), 0, n * sizeof(float), stream), what);
  // One launch per rank, in rank order on `stream`: each element receives the ranks' values in the
  // CPU decode_add's order (a sparse rank's indices are distinct, so its adds never race).
  for (std::size_t r = 0; r < ranks; ++r)
    check(dc::add(sum, codec, ws.scratch_, std::span<std::byte const>(all + r * slot + sizeof h, slot - sizeof h),
                  stream),
          what);
  return result;
}

}  // namespace sluice::cuda
