// Max-min quantization (CGX): 4 bytes read and bits/8 written per element, plus 8 bytes of range
// per bucket; one fused pass over L1-resident buckets.
#include <vector>

#include <sluice/compress/maxmin_quantize.hpp>

#include "compress/bench_data.hpp"
#include "support/bench.hpp"

namespace {

// Args: {n, bits, bucket, stochastic}.
void BM_maxmin_quantize(benchmark::State& state) {
  auto const& x = sluice::bench::gradient(static_cast<std::size_t>(state.range(0)));
  sluice::maxmin_quantize const c{
      .bits = static_cast<unsigned>(state.range(1)),
      .bucket = static_cast<std::size_t>(state.range(2)),
      .round = state.range(3) != 0 ? sluice::rounding::stochastic : sluice::rounding::nearest};
  sluice::codec_workspace<sluice::maxmin_quantize, float> ws;
  std::vector<std::byte> out(c.max_encoded_bytes(x.size()));
  std::size_t bytes = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(bytes = c.encode(std::span<float const>(x), {.seed = 1}, ws, std::span(out)));
  state.counters["ratio"] = static_cast<double>(x.size() * 4) / static_cast<double>(bytes);
  sluice::bench::report(state, x.size(), {.read = 4, .write = static_cast<double>(c.bits) / 8.0});
}

void BM_maxmin_dequantize(benchmark::State& state) {
  auto const& x = sluice::bench::gradient(static_cast<std::size_t>(state.range(0)));
  sluice::maxmin_quantize const c{.bits = static_cast<unsigned>(state.range(1)),
                                  .bucket = static_cast<std::size_t>(state.range(2))};
  sluice::codec_workspace<sluice::maxmin_quantize, float> ws;
  std::vector<std::byte> out(c.max_encoded_bytes(x.size()));
  out.resize(c.encode(std::span<float const>(x), {}, ws, std::span(out)));
  std::vector<float> y(x.size());
  for (auto _ : state) {
    sluice::decode(c, std::span<std::byte const>(out), {}, ws, std::span(y));
    benchmark::DoNotOptimize(y.data());
  }
  sluice::bench::report(state, x.size(), {.read = static_cast<double>(c.bits) / 8.0, .write = 4});
}

}  // namespace

BENCHMARK(BM_maxmin_quantize)
    ->Args({1 << 24, 4, 1024, 0})
    ->Args({1 << 26, 4, 1024, 0})
    ->Args({1 << 24, 4, 1024, 1})
    ->Args({1 << 24, 8, 512, 0})
    ->Args({1 << 24, 2, 1000, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_maxmin_dequantize)->Args({1 << 24, 4, 1024})->UseRealTime()->Unit(benchmark::kMillisecond);
