// Block top-k (StellaTrain's cache-aware selection over the whole tensor): one read of the data
// for the scores, then selection on n/16 scores; 4 bytes read per element, output negligible.
#include <vector>

#include <sluice/compress/block_top_k.hpp>

#include "compress/bench_data.hpp"
#include "support/bench.hpp"

namespace {

void BM_block_top_k(benchmark::State& state) {
  auto const& x = sluice::bench::gradient(static_cast<std::size_t>(state.range(0)));
  sluice::block_top_k const c{.ratio = static_cast<double>(state.range(1)) / 10000.0};
  sluice::block_top_k::workspace<float> ws;
  std::vector<std::byte> out(c.max_encoded_bytes(x.size()));
  std::size_t bytes = 0;
  for (auto _ : state) benchmark::DoNotOptimize(bytes = c.encode(std::span<float const>(x), {}, ws, std::span(out)));
  state.counters["ratio"] = static_cast<double>(x.size() * 4) / static_cast<double>(bytes);
  sluice::bench::report(state, x.size(), {.read = 4});
}

}  // namespace

BENCHMARK(BM_block_top_k)
    ->Args({1 << 24, 100})
    ->Args({1 << 24, 10})
    ->Args({1 << 26, 100})
    ->Args({1 << 26, 10})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
