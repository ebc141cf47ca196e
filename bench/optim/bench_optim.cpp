// CPU optimizer throughput against the bandwidth reference with the same streams: dense Adam
// (fp32 and bf16 states), SGD with momentum, sparse Adam (block and element indices), an in-cache
// Adam for per-core compute, and torch::optim::Adam on the same data as the baseline.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include <sluice/core/memory.hpp>
#include <sluice/optim/all.hpp>

#include "support/bench.hpp"

#if defined(SLUICE_BENCH_HAVE_TORCH)
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <torch/torch.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#endif

namespace {

// 64-byte aligned float arrays, so that a 16-float block is one cache line in every array.
struct aligned_floats {
  // Storage as a tuned trainer allocates it (cache-line aligned, huge pages for large arrays).
  struct line_deleter {
    std::size_t n = 0;
    void operator()(float* p) const noexcept { sluice::line_allocator<float>{}.deallocate(p, n); }
  };
  std::unique_ptr<float[], line_deleter> data;
  std::size_t n = 0;
  explicit aligned_floats(std::size_t count, float fill = 0.0f)
      : data(sluice::line_allocator<float>{}.allocate(std::max<std::size_t>(count, 1)),
             line_deleter{std::max<std::size_t>(count, 1)}),
        n(count) {
    sluice::parallel_chunks(n, 1 << 16,
                            [&](std::size_t b, std::size_t e, int) { std::fill(&data[b], &data[e], fill); });
  }
  std::span<float> span() const noexcept { return {data.get(), n}; }
};

// CPU seconds used by all threads of this process.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

aligned_floats random_gradient(std::size_t n) {
  aligned_floats g(n);
  sluice::parallel_chunks(n, 1 << 16, [&](std::size_t b, std::size_t e, int) {
    std::mt19937 rng(static_cast<unsigned>(b));
    std::normal_distribution<float> d(0.0f, 1e-2f);
    for (std::size_t i = b; i < e; ++i) g.data[i] = d(rng);
  });
  return g;
}

// A dense step over n elements, each iteration paired with a reference pass (run_interleaved).
template <class O>
void dense(benchmark::State& state, O const& o, sluice::bench::traffic t) {
  auto const n = static_cast<std::size_t>(state.range(0));
  aligned_floats p(n, 0.5f);
  auto const g = random_gradient(n);
  sluice::optimizer_state<O> s(o, n);
  sluice::step(o, s, p.span(), g.span());  // first touch of the state, outside the timing
  // The reference streams over these very arrays: p and the moments updated, g read.
  using access = sluice::detail::optim::state_access;
  sluice::bench::kernel_arrays a{.elements = n, .read = {{g.data.get(), 4}}, .update = {{p.data.get(), 4}}};
  for (std::size_t k = 0; k < s.layout().moments; ++k) {
    if (s.layout().moment_type == sluice::element_type::f32)
      a.update.push_back({access::f32(s, k), 4});
    else
      a.update.push_back({access::bf16(s, k), 2});
  }
  sluice::bench::run_interleaved(state, a, t, [&] { sluice::step(o, s, p.span(), g.span()); });
}

// Adam fp32: reads p, g, m, v (16 B), writes p, m, v (12 B) per element.
void BM_adam_dense(benchmark::State& state) { dense(state, sluice::adam{}, {.read = 4, .update = 12}); }

// Adam with bf16 moments (stochastic rounding): reads 4 + 4 + 2 + 2, writes 4 + 2 + 2, in four
// arrays (g; p, m, v), as the reference has them.
void BM_adam_bf16_states(benchmark::State& state) {
  dense(state, sluice::adam{.state_type = sluice::element_type::bf16, .seed = 1},
        {.read = 4, .update = 8, .update_streams = {4, 2, 2}});
}

// SGD with momentum: reads p, g, b (12 B), writes p, b (8 B).
void BM_sgd_momentum(benchmark::State& state) {
  dense(state, sluice::sgd{.lr = 0.01, .momentum = 0.9}, {.read = 4, .update = 8});
}

// Two in-cache tensors of state.range(0) elements stepped together (step_all), repeated: compute
// throughput per core, no memory bound.
void BM_adam_incache(benchmark::State& state) {
  auto const n = static_cast<std::size_t>(state.range(0));
  sluice::adam const o{};
  aligned_floats p0(n, 0.5f), p1(n, 0.25f);
  auto const g0 = random_gradient(n), g1 = random_gradient(n);
  sluice::optimizer_state<sluice::adam> s0(o, n, 0), s1(o, n, 1);
  std::vector<sluice::tensor_step<sluice::adam>> items = {{&s0, p0.span(), g0.span()}, {&s1, p1.span(), g1.span()}};
  sluice::step_all(o, items);
  double const cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    sluice::step_all(o, items);
    benchmark::ClobberMemory();
  }
  double const cpu = process_cpu_seconds() - cpu0;
  sluice::bench::report(state, 2 * n, {.read = 4, .update = 12});
  // Per core-second of CPU time of all threads: robust when other processes share the cores
  // (OpenMP threads spinning at barriers count too, so this errs low).
  state.counters["Gelem_per_cpu_s"] =
      static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(n) / std::max(cpu, 1e-9) / 1e9;
  double const cores = std::min(2.0, static_cast<double>(sluice::max_threads()));
  state.counters["Gelem_per_s_per_core"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(n) / cores / 1e9,
                         benchmark::Counter::kIsRate);
}

// A dense fp32 Adam step on a tensor of the sparse step's size, timed once per call: the companion
// of a sparse benchmark's iterations, so that sparse and dense steps alternate and both sample
// the same minutes of the machine (and the sparse step finds its lines out of cache, as it does
// after a training step's forward and backward passes).
struct dense_adam_steps {
  sluice::adam o{};
  aligned_floats p;
  aligned_floats g;
  sluice::optimizer_state<sluice::adam> s;
  std::vector<double> seconds;
  explicit dense_adam_steps(std::size_t n) : p(n, 0.5f), g(random_gradient(n)), s(o, n) {
    sluice::step(o, s, p.span(), g.span());
  }
  void operator()() {
    auto const t0 = std::chrono::steady_clock::now();
    sluice::step(o, s, p.span(), g.span());
    benchmark::ClobberMemory();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // time_vs_dense: median sparse step over median dense step, both from the same iterations.
  void report(benchmark::State& state, double sparse_seconds) const {
    double const dense_s = sluice::bench::detail::median(seconds);
    state.counters["dense_ms"] = dense_s * 1e3;
    state.counters["time_vs_dense"] = sparse_seconds / dense_s;
  }
};

// Passes that read and write the same cache lines a sparse step touches (p, m, v at the given
// element offsets, `block` floats each), with no arithmetic and no software prefetch: the
// random-access limit of this machine, as the reference kernel is the streaming limit. Timed once
// per call, as a companion of the sparse step (after a reference pass, so its lines are cold too).
// A second pass, on arrays of its own (so equally cold), touches the same blocks with m and v
// interleaved line by line (16 floats of m, then the same 16 of v): the layout a sparse step would
// find if optimizer_state paired the moments (paired_seconds; blocks of whole lines only).
struct random_lines {
  aligned_floats a, b, c;
  aligned_floats pa, mv;  // the paired layout: p, and m/v interleaved per 16 floats
  std::vector<std::uint32_t> const& idx;
  std::size_t block;
  std::vector<double> seconds, paired_seconds;
  random_lines(std::size_t n, std::vector<std::uint32_t> const& idx_, std::size_t block_)
      : a(n, 1.0f),
        b(n, 1.0f),
        c(n, 1.0f),
        pa(block_ % 16 == 0 ? n : 0),
        mv(block_ % 16 == 0 ? 2 * n : 0),
        idx(idx_),
        block(block_) {}
  void operator()() {
    auto t0 = std::chrono::steady_clock::now();
    sluice::parallel_chunks(idx.size(), 1 << 10, [&](std::size_t jb, std::size_t je, int) {
      for (std::size_t j = jb; j < je; ++j) {
        std::size_t const base = static_cast<std::size_t>(idx[j]) * block;
        for (std::size_t e = 0; e < block; ++e) {
          a.data[base + e] += 1.0f;
          b.data[base + e] += 1.0f;
          c.data[base + e] += 1.0f;
        }
      }
    });
    benchmark::ClobberMemory();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (block % 16 != 0) return;  // the paired pass is for whole lines only (block indices)
    t0 = std::chrono::steady_clock::now();
    sluice::parallel_chunks(idx.size(), 1 << 10, [&](std::size_t jb, std::size_t je, int) {
      for (std::size_t j = jb; j < je; ++j) {
        std::size_t const base = static_cast<std::size_t>(idx[j]) * block;
        // Per line of p (16 elements): that line, then the adjacent lines of m and v.
        for (std::size_t e = 0; e < block; e += 16) {
          std::size_t const i = base + e;
          float* SLUICE_RESTRICT pp = pa.data.get() + i;
          float* SLUICE_RESTRICT mm = mv.data.get() + 2 * i;
          for (std::size_t l = 0; l < 16; ++l) pp[l] += 1.0f;
          for (std::size_t l = 0; l < 16; ++l) mm[l] += 1.0f;
          for (std::size_t l = 0; l < 16; ++l) mm[l + 16] += 1.0f;
        }
      }
    });
    benchmark::ClobberMemory();
    paired_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  void report(benchmark::State& state, double step_seconds) const {
    double const sep = sluice::bench::detail::median(seconds), pair = sluice::bench::detail::median(paired_seconds);
    state.counters["random_lines_ms"] = sep * 1e3;
    if (!paired_seconds.empty()) state.counters["paired_lines_ms"] = pair * 1e3;
    state.counters["time_vs_random_lines"] = step_seconds / sep;
  }
};

// Sparse Adam at 1% density from block_top_k-style block indices of state.range(1) floats (16 =
// one cache line, block_top_k's default).
// time_vs_dense: median time of a sparse step over the median of the dense steps of the same tensor
// size that alternate with it (dense_adam_steps); time_vs_random_lines: over touching the same
// cache lines with no arithmetic (random_lines), alternating with them too. Each timed sparse step
// follows a dense step, so its lines come from memory; time_vs_dense_warm times the same step
// repeated at once (its lines in cache), as session 4's back-to-back loop did.
void BM_adam_sparse_block(benchmark::State& state) {
  auto const n = static_cast<std::size_t>(state.range(0));
  auto const b = static_cast<std::size_t>(state.range(1));
  std::size_t const blocks = n / b;
  dense_adam_steps dense(n);
  sluice::adam const o{};
  aligned_floats p(n, 0.5f);
  sluice::optimizer_state<sluice::adam> s(o, n);
  std::vector<std::uint32_t> idx;
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(0, 1);
  for (std::size_t j = 0; j < blocks; ++j)
    if (u(rng) < 0.01) idx.push_back(static_cast<std::uint32_t>(j));
  auto const vals = random_gradient(idx.size() * b);
  sluice::sparse_view<float const> const g{idx, std::span<float const>(vals.data.get(), vals.n), n, b};
  sluice::step(o, s, p.span(), g);
  // Touched: the lines of p, m, v read and written per block, plus the gradient block and index.
  double const per = static_cast<double>(b);
  random_lines lines(n, idx, b);
  std::vector<double> warm;  // the same step repeated at once, its lines still in cache (session 4's method)
  auto const med = sluice::bench::run_interleaved(
      state, idx.size() * b, {.read = (4 * per + 4) / per, .update = 12}, [&] { sluice::step(o, s, p.span(), g); },
      [&] {
        lines();
        sluice::step(o, s, p.span(), g);  // brings the step's lines into cache, then a warm step is timed
        auto const t0 = std::chrono::steady_clock::now();
        sluice::step(o, s, p.span(), g);
        benchmark::ClobberMemory();
        warm.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        dense();
      });
  dense.report(state, med.kernel_seconds);
  state.counters["time_vs_dense_warm"] =
      sluice::bench::detail::median(warm) / sluice::bench::detail::median(dense.seconds);
  state.counters["nnz_blocks"] = static_cast<double>(idx.size());
  lines.report(state, med.kernel_seconds);
}

// Sparse Adam at 1% density from random element indices; bytes are the cache lines touched.
void BM_adam_sparse_element(benchmark::State& state) {
  auto const n = static_cast<std::size_t>(state.range(0));
  dense_adam_steps dense(n);
  sluice::adam const o{};
  aligned_floats p(n, 0.5f);
  sluice::optimizer_state<sluice::adam> s(o, n);
  std::vector<std::uint32_t> idx;
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> u(0, 1);
  for (std::size_t i = 0; i < n; ++i)
    if (u(rng) < 0.01) idx.push_back(static_cast<std::uint32_t>(i));
  std::size_t line_count = 0;
  for (std::size_t j = 0; j < idx.size(); ++j)
    if (j == 0 || idx[j] / 16 != idx[j - 1] / 16) ++line_count;
  auto const vals = random_gradient(idx.size());
  sluice::sparse_view<float const> const g{idx, std::span<float const>(vals.data.get(), vals.n), n, 1};
  sluice::step(o, s, p.span(), g);
  double const nnz = static_cast<double>(idx.size()), l = static_cast<double>(line_count);
  random_lines lines(n, idx, 1);
  auto const med = sluice::bench::run_interleaved(
      state, idx.size(), {.read = 8, .update = 3 * 64 * l / nnz}, [&] { sluice::step(o, s, p.span(), g); },
      [&] { lines(), dense(); });
  dense.report(state, med.kernel_seconds);
  lines.report(state, med.kernel_seconds);
}

#if defined(SLUICE_BENCH_HAVE_TORCH)
// torch::optim::Adam on the same data (from_blob), 2 intra-op threads.
void BM_baseline_torch_adam(benchmark::State& state) {
  at::set_num_threads(2);
  auto const n = static_cast<std::size_t>(state.range(0));
  aligned_floats p(n, 0.5f);
  auto g = random_gradient(n);
  auto const len = static_cast<long>(n);
  auto tp = torch::from_blob(p.data.get(), {len}, torch::kFloat).set_requires_grad(true);
  tp.mutable_grad() = torch::from_blob(g.data.get(), {len}, torch::kFloat);
  torch::optim::Adam opt(std::vector<torch::Tensor>{tp}, torch::optim::AdamOptions(1e-3));
  opt.step();
  sluice::bench::run_interleaved(state, n, {.read = 4, .update = 12}, [&] { opt.step(); });
}
BENCHMARK(BM_baseline_torch_adam)->Arg(1 << 26)->UseManualTime()->Unit(benchmark::kMillisecond);
#endif

}  // namespace

// Streaming benchmarks time each iteration themselves (run_interleaved: manual time); the sparse
// ones run a fixed number of iterations, each followed by a reference pass and a dense step.
BENCHMARK(BM_adam_dense)->Arg(1 << 26)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adam_bf16_states)->Arg(1 << 26)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sgd_momentum)->Arg(1 << 26)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adam_incache)->Arg(1 << 16)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_adam_sparse_block)
    ->Args({1 << 26, 16})
    ->Args({1 << 26, 256})
    ->UseManualTime()
    ->Iterations(60)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adam_sparse_element)->Arg(1 << 26)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);
