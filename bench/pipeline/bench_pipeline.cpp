// The cost of assembly: sluice::pipeline with staleness 0 against the hand composition of the same
// primitives (bucket plan, feedback + codec, split-phase collective, mean, optimizer; one thread
// per rank calling them in order), the same work on the same local world of 4 ranks, with the
// gradient layout of a real model (bench/pipeline/layouts/*.json). Both run in the same process,
// alternately, and the benchmark reports each one's median step and their ratio.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/model_layouts.hpp"
#include "pipeline/pipeline_testing.hpp"

namespace {

using namespace sluice;
using clock_type = std::chrono::steady_clock;

constexpr int world = 4;

using bench::load_layout;

// Median seconds per step on rank 0 over `steps` steps after one warm-up step.
template <class C, class F, class O>
double run(bool assembled, layout const& l, C codec, F feedback, O opt, int steps) {
  auto eps = local_transport::create(world);
  std::vector<double> times;
  std::vector<std::thread> threads;
  pipeline_options const po{.seed = 1};
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto& t = eps[static_cast<std::size_t>(r)];
      test::model_params p(l);
      std::vector<std::vector<float>> g;
      test::gradients(r, 0, p, g);
      auto time = [&](int s, auto&& body) {
        auto const t0 = clock_type::now();
        body();
        if (r == 0 && s > 0) times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
      };
      if (assembled) {
        pipeline pipe{codec, feedback, opt, t, po};
        auto spans = p.spans();
        pipe.attach(l, spans);
        auto const grads = test::views(g);
        for (int s = 0; s <= steps; ++s) time(s, [&] { pipe.step(grads); });
      } else {
        test::hand_composition<C, F, O> hand(codec, feedback, opt, t, po, l, p);
        for (int s = 0; s <= steps; ++s)
          time(s, [&] {
            hand.step(static_cast<std::uint64_t>(s), g);
            hand.write(p);
          });
      }
    });
  for (auto& th : threads) th.join();
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <class C, class F, class O>
void pipeline_vs_hand(benchmark::State& state, std::string const& model, C codec, F feedback, O opt) {
  layout const l = load_layout(model);
  int const steps = 3;
  double pipe_s = 0, hand_s = 0;
  for (auto _ : state) {
    std::vector<double> h, p;
    for (int round = 0; round < 2; ++round) {  // alternate, so drifts of the host hit both
      h.push_back(run(false, l, codec, feedback, opt, steps));
      p.push_back(run(true, l, codec, feedback, opt, steps));
    }
    hand_s = std::min(h[0], h[1]);
    pipe_s = std::min(p[0], p[1]);
    state.SetIterationTime(pipe_s);
  }
  double const n = static_cast<double>(l.total_elements());
  state.counters["hand_ms"] = hand_s * 1e3;
  state.counters["pipeline_ms"] = pipe_s * 1e3;
  state.counters["pipeline_vs_hand"] = pipe_s / hand_s;
  state.SetItemsProcessed(static_cast<std::int64_t>(n) * state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(n * sizeof(float)) * state.iterations());
  state.SetLabel(fmt::format("{}, {} tensors, {} ranks (local)", model, l.size(), world));
}

void BM_pipeline_vs_hand_block_top_k(benchmark::State& state) {
  pipeline_vs_hand(state, "resnet50", block_top_k{.ratio = 0.01}, residual{}, adam{.lr = 1e-3});
}
void BM_pipeline_vs_hand_maxmin4(benchmark::State& state) {
  pipeline_vs_hand(state, "resnet50", maxmin_quantize{.bits = 4}, residual{}, adam{.lr = 1e-3});
}
void BM_pipeline_vs_hand_dense(benchmark::State& state) {
  pipeline_vs_hand(state, "resnet50", identity{}, no_feedback{}, adam{.lr = 1e-3});
}
// Overlap with the trainer: each rank's forward and backward replaced by a wait of `compute_ms`
// (the time a consumer GPU spends on them), then the gradients handed in; the median step time over
// the compute time, for staleness 0, 1 and 2. 1.0 means communication and update are hidden.
template <class C, class F, class O>
void overlap(benchmark::State& state, C codec, F feedback, O opt,
             compensation_method compensation = staleness_compensation{}.method) {
  layout const l = load_layout("resnet50");
  auto const staleness = static_cast<unsigned>(state.range(0));
  auto const compute = std::chrono::milliseconds(state.range(1));
  int const steps = 6;
  double step_s = 0;
  for (auto _ : state) {
    auto eps = local_transport::create(world);
    std::vector<double> times;
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        test::model_params p(l);
        std::vector<std::vector<float>> g;
        test::gradients(r, 0, p, g);
        pipeline pipe{
            codec, feedback, opt, eps[static_cast<std::size_t>(r)],
            pipeline_options{
                .staleness = staleness, .seed = 1, .kernel_threads = 1, .compensation = {.method = compensation}}};
        auto spans = p.spans();
        pipe.attach(l, spans);
        auto const grads = test::views(g);
        for (int s = 0; s <= steps; ++s) {
          auto const t0 = clock_type::now();
          std::this_thread::sleep_for(compute);
          pipe.step(grads);
          if (r == 0 && s > 0) times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
        }
        pipe.synchronize();
      });
    for (auto& th : threads) th.join();
    std::sort(times.begin(), times.end());
    step_s = times[times.size() / 2];
    state.SetIterationTime(step_s);
  }
  double const c = std::chrono::duration<double>(compute).count();
  state.counters["step_ms"] = step_s * 1e3;
  state.counters["compute_ms"] = c * 1e3;
  state.counters["step_vs_compute"] = step_s / c;
  state.SetItemsProcessed(static_cast<std::int64_t>(l.total_elements()) * state.iterations());
  state.SetLabel(fmt::format("resnet50, {} ranks (local), staleness {}, compensation {}", world, staleness,
                             to_string(compensation)));
}
void BM_overlap_block_top_k(benchmark::State& state) {
  overlap(state, block_top_k{.ratio = 0.01}, residual{}, adam{.lr = 1e-3});
}
// The same without staleness compensation (the trainer gets the master weights as they are): what
// the default local_step's scratch optimizer step per update costs in step time.
void BM_overlap_block_top_k_uncompensated(benchmark::State& state) {
  overlap(state, block_top_k{.ratio = 0.01}, residual{}, adam{.lr = 1e-3}, compensation_method::none);
}
void BM_overlap_maxmin4(benchmark::State& state) {
  overlap(state, maxmin_quantize{.bits = 4}, residual{}, adam{.lr = 1e-3});
}
// Dense training through the ring allreduce (DDP's exchange); MPI_Allreduce: bench_pipeline_mpi.
void BM_overlap_dense_ring(benchmark::State& state) { overlap(state, identity{}, no_feedback{}, adam{.lr = 1e-3}); }
BENCHMARK(BM_overlap_block_top_k)
    ->ArgsProduct({{0, 1, 2}, {150}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_overlap_block_top_k_uncompensated)
    ->ArgsProduct({{1, 2}, {150}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_overlap_maxmin4)
    ->ArgsProduct({{0, 1, 2}, {150}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_overlap_dense_ring)
    ->ArgsProduct({{0, 1, 2}, {150}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

BENCHMARK(BM_pipeline_vs_hand_block_top_k)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_pipeline_vs_hand_maxmin4)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_pipeline_vs_hand_dense)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
