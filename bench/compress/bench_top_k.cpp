// Exact top-k selection against std::nth_element and torch::topk on the same tensors and threads:
// a one-read kernel (4 bytes read per element, the k entries written are negligible).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <sluice/compress/top_k.hpp>

#include "compress/bench_data.hpp"
#include "support/bench.hpp"

#if defined(SLUICE_BENCH_HAVE_TORCH)
#include <torch/torch.h>
#endif

namespace {

// Args: {n, kept per 10000}.
double ratio_of(benchmark::State const& state) { return static_cast<double>(state.range(1)) / 10000.0; }

void BM_top_k(benchmark::State& state) {
  auto const& x = sluice::bench::gradient(static_cast<std::size_t>(state.range(0)));
  sluice::top_k const c{.ratio = ratio_of(state)};
  sluice::top_k::workspace<float> ws;
  std::vector<std::byte> out(c.max_encoded_bytes(x.size()));
  std::size_t bytes = 0;
  for (auto _ : state) benchmark::DoNotOptimize(bytes = c.encode(std::span<float const>(x), {}, ws, std::span(out)));
  state.counters["ratio"] = static_cast<double>(x.size() * 4) / static_cast<double>(bytes);
  state.counters["radix_path"] = ws.select.used_radix ? 1 : 0;
  sluice::bench::report(state, x.size(), {.read = 4});
}

// Receiver side: parse + index decode + scatter-add of one frame into a dense tensor (decode_add),
// as each received message costs a rank in a sparse allreduce.
void BM_top_k_decode_add(benchmark::State& state) {
  auto const& x = sluice::bench::gradient(static_cast<std::size_t>(state.range(0)));
  sluice::top_k const c{.ratio = ratio_of(state)};
  sluice::top_k::workspace<float> ws;
  std::vector<std::byte> msg(c.max_encoded_bytes(x.size()));
  msg.resize(c.encode(std::span<float const>(x), {}, ws, std::span(msg)));
  sluice::bench::tensor acc(x.size(), 0.0f);
  for (auto _ : state) {
    sluice::decode_add(c, std::span<std::byte const>(msg), {}, ws, std::span<float>(acc.data(), acc.size()));
    benchmark::DoNotOptimize(acc.data());
  }
  // Traffic per element: the message read once, a cache line updated per kept element.
  auto const n = static_cast<double>(x.size());
  sluice::bench::report(
      state, x.size(),
      {.read = static_cast<double>(msg.size()) / n, .update = 64.0 * static_cast<double>(c.keep(x.size())) / n});
}

void BM_baseline_nth_element_top_k(benchmark::State& state) {
  auto const& x = sluice::bench::gradient(static_cast<std::size_t>(state.range(0)));
  std::size_t const k = sluice::detail::compress::keep_count(ratio_of(state), x.size());
  std::vector<std::uint32_t> idx(x.size());
  for (auto _ : state) {
    std::iota(idx.begin(), idx.end(), 0u);
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return std::abs(x[a]) > std::abs(x[b]); });
    std::sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k));
    benchmark::DoNotOptimize(idx.data());
  }
  sluice::bench::report(state, x.size(), {.read = 4});
}

#if defined(SLUICE_BENCH_HAVE_TORCH)
void BM_baseline_torch_top_k(benchmark::State& state) {
  auto& x = sluice::bench::gradient(static_cast<std::size_t>(state.range(0)));
  std::size_t const k = sluice::detail::compress::keep_count(ratio_of(state), x.size());
  at::set_num_threads(2);
  auto const t = torch::from_blob(x.data(), {static_cast<std::int64_t>(x.size())}, torch::kFloat32);
  for (auto _ : state) {
    auto r = torch::topk(t.abs(), static_cast<std::int64_t>(k));
    benchmark::DoNotOptimize(std::get<1>(r).data_ptr());
  }
  sluice::bench::report(state, x.size(), {.read = 4});
}
#endif

void args(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {std::int64_t{1} << 24, std::int64_t{1} << 26})
    for (std::int64_t per : {100, 10}) b->Args({n, per});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_top_k)->Apply(args);
BENCHMARK(BM_top_k_decode_add)->Apply(args);
BENCHMARK(BM_baseline_nth_element_top_k)->Apply(args);
#if defined(SLUICE_BENCH_HAVE_TORCH)
BENCHMARK(BM_baseline_torch_top_k)->Apply(args);
#endif
