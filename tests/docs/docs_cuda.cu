// docs/cuda.md's blocks, compiled by nvcc exactly as the page shows them (test_docs keeps them
// equal), each in a function that declares what its block assumes. Not run: test_cuda_gpu runs the
// same calls on a device against the CPU codecs.
#include <cstddef>
#include <span>
#include <vector>

#include <sluice/cuda/frame.hpp>
#include <sluice/cuda/kernels.cuh>
#include <sluice/cuda/transfer.cuh>
#include <sluice/feedback/residual.hpp>
#include <sluice/feedback/state.hpp>
#if SLUICE_DOCS_NCCL
#include <sluice/cuda/nccl.cuh>
#include <sluice/transport/local.hpp>
#endif

namespace sc = sluice::cuda;

// Max-min quantization of bucket 3 with error feedback on the device, then the CPU codec's frame.
std::vector<std::byte> docs_maxmin(std::span<float> grad, std::span<float> residual, std::size_t n,
                                   sluice::encode_context const& ctx, cudaStream_t stream) {
  // example-begin maxmin
  sluice::maxmin_quantize const codec{.bits = 4, .bucket = 1024};
  sc::maxmin_params const p{codec.bits, static_cast<unsigned>(codec.bucket), false};
  sc::device_buffer<std::byte> payload(sc::maxmin_payload_bytes(n, p));  // once per bucket size
  sc::check(sc::feedback_maxmin(grad, residual, p, ctx.key(), payload.span(), stream), "bucket 3");
  auto const layout = sc::layout_of(codec, n);
  std::vector<std::byte> frame(layout.frame_bytes);  // pinned memory in practice
  sc::check(cudaMemcpyAsync(frame.data() + layout.ranges_offset, payload.data(), layout.payload_bytes(),
                            cudaMemcpyDeviceToHost, stream),
            "bucket 3");
  sc::check(cudaStreamSynchronize(stream), "bucket 3");
  frame.resize(sc::finish_maxmin_frame(codec, ctx, n, frame));  // what codec.encode() would have written
  // example-end maxmin
  return frame;
}

// The same with residual's non-finite policy.
std::size_t docs_non_finite(std::span<float> grad, std::span<float> residual, sluice::residual const& policy,
                            sluice::feedback_state& state, sc::maxmin_params const& p,
                            sc::device_buffer<std::byte>& payload, sluice::encode_context const& ctx,
                            cudaStream_t stream) {
  // example-begin non-finite
  sc::non_finite_counter nf;  // once; one device word per counter
  if (policy.non_finite != sluice::non_finite_policy::propagate &&
      sc::apply_non_finite_policy(policy.non_finite, state.slice(3), nf.find(grad, stream), ctx.step))
    return 0;  // skip_step: nothing sent, the skip counted in state.report(); throw_error has thrown
  sc::check(sc::feedback_maxmin(grad, residual, p, ctx.key(), payload.span(), nf.count(), stream), "bucket 3");
  // ... copy back and finish the frame as above ...
  state.record_non_finite(nf.take(stream));  // report().non_finite_values, as the CPU counts
  // example-end non-finite
  return 1;
}

// Random-k with error feedback, sending the CPU codec's frame.
std::vector<std::byte> docs_random_k(std::span<float> grad, std::span<float> residual, std::size_t n,
                                     sluice::encode_context const& ctx, cudaStream_t stream) {
  // example-begin random-k
  sluice::random_k const codec{.ratio = 0.01};
  std::size_t const k = codec.keep(n);
  sc::random_k_workspace ws(n, k);  // once per bucket size
  sc::device_buffer<std::uint32_t> indices(k);
  sc::device_buffer<float> values(k);
  sc::check(sc::random_k_select(grad, residual, k, ctx.key().shared(), sc::random_k_element::of(n, k, codec.rescale),
                                ws, indices.span(), values.span(), stream),
            "bucket 3");
  std::vector<float> sent(k);  // pinned memory in practice
  sc::check(cudaMemcpyAsync(sent.data(), values.data(), 4 * k, cudaMemcpyDeviceToHost, stream), "bucket 3");
  sc::check(cudaStreamSynchronize(stream), "bucket 3");
  std::vector<std::byte> frame(codec.max_encoded_bytes(n));
  frame.resize(sc::write_random_k_frame(codec, ctx, n, sent, frame));  // what codec.encode() would have written
  // example-end random-k
  return frame;
}

#if SLUICE_DOCS_NCCL
// The compressed allreduce over NCCL (here over a local_transport host; MPI or ZeroMQ in a job).
void docs_allreduce(sluice::local_transport& host, std::span<float> grad, std::span<float> residual,
                    std::span<float> sum, std::size_t n, std::uint64_t step, std::uint64_t seed,
                    sluice::feedback_state& state, cudaStream_t stream) {
  // example-begin allreduce
  sluice::nccl_transport gpu(host, {.device = -1});
  sluice::maxmin_quantize const codec{.bits = 4, .bucket = 1024, .round = sluice::rounding::stochastic};
  sluice::residual const feedback{.non_finite = sluice::non_finite_policy::skip_step};
  sc::allreduce_workspace<sluice::maxmin_quantize> ws(n, codec, gpu.size());  // once per bucket size
  sluice::collective_context const ctx{.step = step, .tensor = 3, .seed = seed};
  auto const r = sc::allreduce(gpu, codec, feedback, grad, residual, sum, ctx, ws, stream);
  sc::check(cudaStreamSynchronize(stream), "bucket 3");  // sum: the same bits on every rank
  if (!r.skipped) state.record_non_finite(r.non_finite);

  sluice::top_k const tk{.ratio = 0.01};
  sc::allreduce_workspace<sluice::top_k> tws(n, tk, gpu.size());
  (void)sc::allreduce(gpu, tk, sluice::no_feedback{}, grad, {}, sum, ctx, tws, stream);
  // example-end allreduce
}
#endif

int main() { return 0; }
