// PowerSGD (rank r) on a row-major rows x cols fp32 gradient: encode reads M twice (P = M Q, then
// Q = M^T P), decode writes it once (M' = P Q^T). The peer is PyTorch's PowerSGD step (the
// powerSGD_hook's products and Gram-Schmidt, here through libtorch's matmul) on the same matrix.
#include <cstdint>
#include <vector>

#include <sluice/compress/decode.hpp>
#include <sluice/compress/power_sgd.hpp>

#include "compress/bench_data.hpp"
#include "support/bench.hpp"

#if defined(SLUICE_BENCH_HAVE_TORCH)
#include <torch/torch.h>
#endif

namespace {

// Args: {rows, cols, rank}.
struct shape_args {
  std::size_t rows, cols, shape[2];
  unsigned rank;
  explicit shape_args(benchmark::State const& s)
      : rows(static_cast<std::size_t>(s.range(0))),
        cols(static_cast<std::size_t>(s.range(1))),
        shape{rows, cols},
        rank(static_cast<unsigned>(s.range(2))) {}
};

/// The gradient of the benchmark's shape, the codec, its workspace and a frame buffer.
struct setup : shape_args {
  sluice::bench::tensor const& x;
  sluice::power_sgd c;
  sluice::power_sgd::workspace<float> ws;
  std::vector<std::byte> out;
  sluice::encode_context ctx;
  explicit setup(benchmark::State const& s)
      : shape_args(s),
        x(sluice::bench::gradient(rows * cols)),
        c{.rank = rank},
        out(c.max_encoded_bytes(x.size())),
        ctx{.seed = 1, .shape = shape} {}
  std::size_t encode() { return c.encode(std::span<float const>(x), ctx, ws, std::span(out)); }
};

void BM_power_sgd_encode(benchmark::State& state) {
  setup b(state);
  std::size_t bytes = 0;
  for (auto _ : state) benchmark::DoNotOptimize(bytes = b.encode());
  state.counters["ratio"] = static_cast<double>(b.x.size() * 4) / static_cast<double>(bytes);
  sluice::bench::report(state, b.x.size(), {.read = 8});
}

void BM_power_sgd_decode(benchmark::State& state) {
  setup b(state);
  b.out.resize(b.encode());
  std::vector<float> y(b.x.size());
  for (auto _ : state) {
    sluice::decode(b.c, std::span<std::byte const>(b.out), b.ctx, b.ws, std::span(y));
    benchmark::DoNotOptimize(y.data());
  }
  sluice::bench::report(state, b.x.size(), {.write = 4});
}

#if defined(SLUICE_BENCH_HAVE_TORCH)
// torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook's per-matrix work: P = M Q,
// Gram-Schmidt on P's columns, Q = M^T P (encode), and M' = P Q^T (decode), one intra-op thread
// as sluice's codec runs on one.
void BM_baseline_torch_power_sgd_encode(benchmark::State& state) {
  shape_args const a(state);
  auto& x = sluice::bench::gradient(a.rows * a.cols);
  at::set_num_threads(1);
  auto const m = torch::from_blob(x.data(), {static_cast<std::int64_t>(a.rows), static_cast<std::int64_t>(a.cols)},
                                  torch::kFloat32);
  auto q = torch::rand({static_cast<std::int64_t>(a.cols), static_cast<std::int64_t>(a.rank)}) * 2 - 1;
  for (auto _ : state) {
    auto p = torch::matmul(m, q);
    for (std::int64_t c = 0; c < p.size(1); ++c) {  // the hook's _orthogonalize_gram_schmidt
      auto col = p.select(1, c);
      col.div_(torch::norm(col) + 1e-8);
      if (c + 1 < p.size(1)) {
        auto rest = p.narrow(1, c + 1, p.size(1) - c - 1);
        rest.sub_(torch::sum(col.unsqueeze(1) * rest, 0) * col.unsqueeze(1));
      }
    }
    q = torch::matmul(m.t(), p);
    benchmark::DoNotOptimize(q.data_ptr());
  }
  sluice::bench::report(state, x.size(), {.read = 8});
}

void BM_baseline_torch_power_sgd_decode(benchmark::State& state) {
  shape_args const a(state);
  auto const p = torch::randn({static_cast<std::int64_t>(a.rows), static_cast<std::int64_t>(a.rank)});
  auto const q = torch::randn({static_cast<std::int64_t>(a.cols), static_cast<std::int64_t>(a.rank)});
  at::set_num_threads(1);
  auto y = torch::empty({static_cast<std::int64_t>(a.rows), static_cast<std::int64_t>(a.cols)});
  for (auto _ : state) {
    torch::matmul_out(y, p, q.t());
    benchmark::DoNotOptimize(y.data_ptr());
  }
  sluice::bench::report(state, a.rows * a.cols, {.write = 4});
}
#endif

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({4096, 4096, 4})
      ->Args({1024, 16384, 4})
      ->Args({16384, 1024, 4})
      ->Args({4096, 4096, 1})
      ->Args({4096, 4096, 16});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_power_sgd_encode)->Apply(shapes);
BENCHMARK(BM_power_sgd_decode)->Apply(shapes);
#if defined(SLUICE_BENCH_HAVE_TORCH)
BENCHMARK(BM_baseline_torch_power_sgd_encode)->Apply(shapes);
BENCHMARK(BM_baseline_torch_power_sgd_decode)->Apply(shapes);
#endif
