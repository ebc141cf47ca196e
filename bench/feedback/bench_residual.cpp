// Error feedback throughput: residual (EF-SGD) fused with the codec against the unfused
// composition (compensate into scratch, encode, decode into scratch, subtract), whole tensors.
// Bytes per element counted for the fused limit: read g, read e, write e, plus the message.
#include <cstdint>
#include <vector>

#include <sluice/bucket/plan.hpp>
#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/core/memory.hpp>
#include <sluice/feedback/residual.hpp>
#if __has_include(<sluice/compress/maxmin_quantize.hpp>)
#include <sluice/compress/maxmin_quantize.hpp>
#define SLUICE_BENCH_HAVE_MAXMIN 1
#endif

#include "support/bench.hpp"

namespace {

// n gradient-like floats (Gaussian, scale varying every 64 Ki elements), generated once per n.
std::vector<float, sluice::line_allocator<float>> const& gradient(std::size_t n) {
  static std::vector<float, sluice::line_allocator<float>> g;
  if (g.size() != n) {
    g.resize(n);
    sluice::parallel_chunks(n, std::size_t{1} << 16, [&](std::size_t b, std::size_t e, int) {
      std::uint64_t x = 0x9E3779B97F4A7C15ull ^ b;
      for (std::size_t i = b; i < e; ++i) {
        // Sum of 4 uniforms: close enough to Gaussian for selection and quantization costs.
        float acc = 0;
        for (int k = 0; k < 4; ++k) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          acc += static_cast<float>(x >> 40) * 0x1p-24f - 0.5f;
        }
        g[i] = acc * 1e-3f * static_cast<float>(1 + (i >> 16) % 13);
      }
    });
  }
  return g;
}

// One encode of the whole tensor per iteration; the residual carries over between iterations.
template <class C>
void bm_residual(benchmark::State& state, C codec, bool fuse, sluice::non_finite_policy policy, double message_bytes) {
  auto const n = static_cast<std::size_t>(state.range(0));
  auto const& g = gradient(n);
  sluice::residual const f{.non_finite = policy, .fuse = fuse};
  sluice::feedback_state s(f, std::vector<std::size_t>{n});
  sluice::feedback_workspace<C, float> ws;
  std::vector<std::byte> out(codec.max_encoded_bytes(n));
  std::uint64_t step = 0;
  std::size_t bytes = 0;
  // First call sizes the workspaces (page faults) outside the timing.
  bytes = f.encode(codec, s.slice(0), std::span<float const>(g), {.step = step++}, ws, std::span(out));
  for (auto _ : state) {
    bytes = f.encode(codec, s.slice(0), std::span<float const>(g), {.step = step++}, ws, std::span(out));
    benchmark::DoNotOptimize(bytes);
    benchmark::ClobberMemory();
  }
  state.counters["ratio"] = static_cast<double>(n * 4) / static_cast<double>(bytes);
  sluice::bench::report(state, n, {.read = 4, .update = 4, .write = message_bytes});
}

// The codec alone on the same data (no feedback): reads 4 B per element, writes the message.
template <class C>
void bm_codec_alone(benchmark::State& state, C codec, double message_bytes) {
  auto const n = static_cast<std::size_t>(state.range(0));
  auto const& g = gradient(n);
  sluice::codec_workspace<C, float> ws;
  std::vector<std::byte> out(codec.max_encoded_bytes(n));
  std::size_t bytes = codec.encode(std::span<float const>(g), {}, ws, std::span(out));
  for (auto _ : state) {
    bytes = codec.encode(std::span<float const>(g), {}, ws, std::span(out));
    benchmark::DoNotOptimize(bytes);
    benchmark::ClobberMemory();
  }
  sluice::bench::report(state, n, {.read = 4, .write = message_bytes});
}

// The pipeline's pattern: one encode per cache-sized chunk (bucket_plan's default chunk size),
// chunks spread over threads, one frame per chunk. The non-finite scan then reads g from cache.
template <class C>
void bm_residual_chunked(benchmark::State& state, C codec, sluice::non_finite_policy policy, double message_bytes) {
  auto const n = static_cast<std::size_t>(state.range(0));
  auto const& g = gradient(n);
  sluice::residual const f{.non_finite = policy};
  sluice::feedback_state s(f, std::vector<std::size_t>{n});
  std::size_t const chunk = sluice::bucket_plan::default_chunk_bytes() / 4 / 1024 * 1024;
  std::size_t const chunks = (n + chunk - 1) / chunk, frame = codec.max_encoded_bytes(chunk);
  std::vector<std::byte> out(chunks * frame);
  std::vector<sluice::feedback_workspace<C, float>> ws(static_cast<std::size_t>(sluice::max_threads()) + 1);
  std::uint64_t step = 0;
  auto once = [&] {
    sluice::parallel_chunks(chunks, 1, [&](std::size_t cb, std::size_t ce, int w) {
      for (std::size_t c = cb; c < ce; ++c) {
        std::size_t const off = c * chunk, len = std::min(chunk, n - off);
        f.encode(codec, s.slice(0, off, len), std::span<float const>(g).subspan(off, len), {.step = step, .tensor = c},
                 ws[static_cast<std::size_t>(w)], std::span(out).subspan(c * frame, frame));
      }
    });
    ++step;
  };
  once();
  for (auto _ : state) {
    once();
    benchmark::ClobberMemory();
  }
  state.counters["chunk_elements"] = static_cast<double>(chunk);
  sluice::bench::report(state, n, {.read = 4, .update = 4, .write = message_bytes});
}

using sluice::non_finite_policy;
constexpr auto propagate = non_finite_policy::propagate;
constexpr auto throw_error = non_finite_policy::throw_error;

}  // namespace

// block_top_k, 1%: message ~0.04 B/element (values + one index per 16-element block).
BENCHMARK_CAPTURE(bm_residual, block_top_k_fused, sluice::block_top_k{.ratio = 0.01}, true, propagate, 0.04)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_residual, block_top_k_unfused, sluice::block_top_k{.ratio = 0.01}, false, propagate, 0.04)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_residual, block_top_k_fused_checked, sluice::block_top_k{.ratio = 0.01}, true, throw_error, 0.04)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_residual, top_k_fused, sluice::top_k{.ratio = 0.01}, true, propagate, 0.06)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_residual, top_k_unfused, sluice::top_k{.ratio = 0.01}, false, propagate, 0.06)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_codec_alone, block_top_k, sluice::block_top_k{.ratio = 0.01}, 0.04)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
#ifdef SLUICE_BENCH_HAVE_MAXMIN
BENCHMARK_CAPTURE(bm_codec_alone, maxmin4, sluice::maxmin_quantize{.bits = 4}, 0.5)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// maxmin_quantize 4-bit, bucket 1024: message 0.5 B/element (+ 8 B per bucket).
BENCHMARK_CAPTURE(bm_residual, maxmin4_fused, sluice::maxmin_quantize{.bits = 4}, true, propagate, 0.5)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_residual, maxmin4_unfused, sluice::maxmin_quantize{.bits = 4}, false, propagate, 0.5)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_residual, maxmin4_fused_checked, sluice::maxmin_quantize{.bits = 4}, true, throw_error, 0.5)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_residual_chunked, maxmin4_fused_checked, sluice::maxmin_quantize{.bits = 4}, throw_error, 0.5)
    ->Arg(1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
#endif
