// How much of the pipeline's CPU work hides behind the trainer's compute when each rank has one
// core of its own (StellaTrain's setting: a consumer GPU computes, its host core runs the
// pipeline). ResNet-50's layout; a sleep stands in for the GPU's forward and backward.
//
// Each rank is a thread pinned to core r, its stage threads pinned there too. On these pipelines
// the benchmark first measures W, the pipeline's CPU work per step and rank: steps without
// compute, process CPU time per step over the ranks (on the same buffers as the steps measured
// next: how fast a pass runs depends on where its pages landed, by up to 30 % from one process to
// the next on the 2-vCPU host). Then each rank runs steps of compute C = c x W:
//   spread 0: sleep C, then hand every gradient in through step(grads);
//   spread 1: sleep C / 3 (forward), then hand the gradients in one by one through gradient_ready,
//             spread evenly over the remaining 2 C / 3 (a simulated backward), then step();
//   spread 2: the same spread evenly over the whole of C (a compute that is all backward: the
//             bound on the step is then C plus the last bucket's work, where spread 1's is 4/3 C
//             at C = W).
// Where the trainer's parameters and gradients live (`homes`): its own memory (copied in and
// out), parameters in the pipeline's buffers, or both; with the gradients in the pipeline's
// buffers they are written there once (the GPU's device-to-host copy, not the CPU's work) and
// handed in by index every step.
// Counters: step_over_compute (median step / C; 1.0: everything hidden), cpu_work_ms (W, with the
// same homes), trainer_cpu_frac (CPU time of the trainer's thread inside sluice calls per step,
// over W).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include "pipeline/model_layouts.hpp"
#include "pipeline/pipeline_testing.hpp"

namespace {

using namespace sluice;
using clock_type = std::chrono::steady_clock;

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}
double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
void pin_to(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}

// 0: parameters and gradients in the trainer's memory; 1: parameters in the pipeline's buffers;
// 2: parameters and gradients in the pipeline's buffers.
struct homes {
  parameter_home parameters = parameter_home::trainer;
  gradient_home gradients = gradient_home::trainer;
  explicit homes(long arg)
      : parameters(arg >= 1 ? parameter_home::pipeline : parameter_home::trainer),
        gradients(arg >= 2 ? gradient_home::pipeline : gradient_home::trainer) {}
};

// Hands step `s`'s gradients in: through the trainer's spans, or (gradient_home::pipeline) by
// index into the buffers gradients() hands out, which the first staleness + 1 steps fill.
template <class P>
void hand_in(P& pipe, std::vector<std::span<float const>> const& grads, std::size_t k) {
  if (pipe.options().gradients == gradient_home::pipeline)
    pipe.gradient_ready(k);
  else
    pipe.gradient_ready(k, grads[k]);
}
template <class P>
void step_all(P& pipe, std::vector<std::span<float const>> const& grads) {
  for (std::size_t k = grads.size(); k-- > 0;) hand_in(pipe, grads, k);
  pipe.step();
}

struct run_figures {
  double work_s = 0;         // W: the pipeline's CPU work per step and rank, measured on these pipelines
  double step_s = 0;         // median step (wall)
  double trainer_cpu_s = 0;  // median CPU time of rank 0's trainer thread inside sluice calls per step
};

// On `ranks` pinned ranks: one warm-up step, then W (process CPU time over `work_steps` steps
// without compute, per step and rank), then `steps` measured steps of compute C = factor x W on
// the same pipelines (their buffers and pages: W and the steps see the same memory).
template <class C, class F, class O>
run_figures run(C codec, F feedback, O opt, layout const& l, int ranks, unsigned staleness, double factor, int spread,
                int nice, compensation_method compensation, homes home, int steps) {
  int const work_steps = 12;
  auto eps = local_transport::create(ranks);
  std::vector<double> times, trainer_cpu;
  std::vector<std::thread> threads;
  std::barrier sync(ranks);
  double cpu0 = 0, work_s = 0;
  std::barrier work_begins(ranks, [&]() noexcept { cpu0 = process_cpu_seconds(); });
  std::barrier work_ends(ranks, [&]() noexcept { work_s = (process_cpu_seconds() - cpu0) / work_steps / ranks; });
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      pin_to(r);
      test::model_params p(l);
      std::vector<std::vector<float>> g;
      test::gradients(r, 0, p, g);
      pipeline_options o{.staleness = staleness, .seed = 1, .kernel_threads = 1};
      o.scheduling.cpus = {r};
      o.scheduling.nice = nice;
      o.compensation.method = compensation;
      o.parameters = home.parameters;
      o.gradients = home.gradients;
      pipeline pipe{codec, feedback, opt, eps[static_cast<std::size_t>(r)], o};
      auto spans = p.spans();
      pipe.attach(l, spans);
      auto const grads = test::views(g);
      int s = 0;
      auto begin_step = [&] {
        if (home.gradients != gradient_home::pipeline) return;
        auto const into = pipe.gradients();
        if (s <= static_cast<int>(staleness))  // fills the staleness + 1 buffers once
          for (std::size_t k = 0; k < grads.size(); ++k) std::copy(grads[k].begin(), grads[k].end(), into[k].begin());
        ++s;
      };
      begin_step();
      step_all(pipe, grads);  // warm-up
      work_begins.arrive_and_wait();
      for (int w = 0; w < work_steps; ++w) {
        begin_step();
        step_all(pipe, grads);
      }
      pipe.synchronize();
      work_ends.arrive_and_wait();
      auto const compute = std::chrono::duration<double>(factor * work_s);
      for (int m = 0; m < steps; ++m) {
        auto const t0 = clock_type::now();
        double inside = 0;
        auto timed = [&](auto&& call) {
          double const c0 = thread_cpu_seconds();
          call();
          inside += thread_cpu_seconds() - c0;
        };
        // Backward starts after the forward (C / 3, or 0 for spread 2): the gradient buffers
        // must be free by then.
        auto const forward = spread == 2 ? compute * 0 : compute / 3;
        std::this_thread::sleep_until(t0 + forward);
        timed(begin_step);
        if (spread != 0) {
          auto const n = grads.size();
          for (std::size_t k = n; k-- > 0;) {
            std::this_thread::sleep_until(t0 + forward + (compute - forward) * (double(n - k) / double(n)));
            timed([&] { hand_in(pipe, grads, k); });
          }
          timed([&] { pipe.step(); });
        } else {
          std::this_thread::sleep_until(t0 + compute);
          timed([&] { step_all(pipe, grads); });
        }
        if (r == 0) {
          times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
          trainer_cpu.push_back(inside);
        }
      }
      sync.arrive_and_wait();  // the last measured step is over on every rank
      pipe.synchronize();
    });
  for (auto& th : threads) th.join();
  std::sort(times.begin(), times.end());
  std::sort(trainer_cpu.begin(), trainer_cpu.end());
  return {work_s, times[times.size() / 2], trainer_cpu[trainer_cpu.size() / 2]};
}

template <class C, class F, class O>
void overlap_core_per_rank(benchmark::State& state, std::string const& key, C codec, F feedback, O opt) {
  int const ranks = static_cast<int>(state.range(0));
  auto const staleness = static_cast<unsigned>(state.range(1));
  double const factor = static_cast<double>(state.range(2)) / 100.0;
  int const spread = static_cast<int>(state.range(3));
  int const nice = static_cast<int>(state.range(4));
  auto const compensation = state.range(5) != 0 ? compensation_method::local_step : compensation_method::none;
  homes const home(state.range(6));
  if (static_cast<unsigned>(ranks) > std::thread::hardware_concurrency()) {
    state.SkipWithError("fewer cores than ranks");
    return;
  }
  layout const l = bench::load_layout("resnet50");
  run_figures f;
  for (auto _ : state) {
    f = run(codec, feedback, opt, l, ranks, staleness, factor, spread, nice, compensation, home, 24);
    state.SetIterationTime(f.step_s);
  }
  double const w = f.work_s, compute = factor * w;
  state.counters["step_over_compute"] = f.step_s / compute;
  state.counters["step_ms"] = f.step_s * 1e3;
  state.counters["compute_ms"] = compute * 1e3;
  state.counters["cpu_work_ms"] = w * 1e3;
  state.counters["trainer_cpu_frac"] = f.trainer_cpu_s / w;
  double const n = static_cast<double>(l.total_elements());
  state.SetItemsProcessed(static_cast<std::int64_t>(n) * state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(n * sizeof(float)) * state.iterations());
  state.SetLabel(fmt::format("{}, resnet50, {} rank(s) with a core each, staleness {}{}, C = {:.1f} W{}, nice {}{}",
                             key, ranks, staleness, staleness > 0 ? fmt::format(" ({})", compensation) : "", factor,
                             spread == 1   ? ", gradients spread over backward"
                             : spread == 2 ? ", gradients spread over all of C"
                                           : "",
                             nice,
                             home.gradients == gradient_home::pipeline ? ", parameters and gradients in the pipeline"
                             : home.parameters == parameter_home::pipeline ? ", parameters in the pipeline"
                                                                           : ""));
}

// ranks, staleness, C as % of W, spread, nice of encode/apply, compensation (0: none, 1:
// local_step, the default), homes (0: the trainer's memory, 1: parameters in the pipeline, 2:
// parameters and gradients in the pipeline).
void grid(benchmark::internal::Benchmark* b) {
  for (int home : {0, 1, 2})
    for (int ranks : {1, 2})
      for (int s : {0, 1, 2})
        for (int c : {100, 150})
          for (int comp : {0, 1})
            if (s > 0 || comp == 1) b->Args({ranks, s, c, 0, 10, comp, home});
  for (int home : {0, 1, 2})
    for (int ranks : {1, 2})
      for (int c : {100, 150}) {
        b->Args({ranks, 0, c, 1, 10, 1, home});
        b->Args({ranks, 1, c, 1, 10, 0, home});
        b->Args({ranks, 0, c, 2, 10, 1, home});
      }
  b->Args({1, 1, 100, 0, 0, 0, 0});  // the stage threads at the trainer's priority
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
}
void small_grid(benchmark::internal::Benchmark* b) {
  for (int home : {0, 1, 2}) {
    b->Args({1, 0, 100, 0, 10, 1, home});
    b->Args({1, 1, 100, 0, 10, 0, home});
    b->Args({1, 0, 100, 1, 10, 1, home});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
}

void BM_overlap_core_per_rank(benchmark::State& state) {
  overlap_core_per_rank(state, "block_top_k 1%", block_top_k{.ratio = 0.01}, residual{}, adam{.lr = 1e-3});
}
void BM_overlap_core_per_rank_maxmin4(benchmark::State& state) {
  overlap_core_per_rank(state, "maxmin_quantize 4 bits", maxmin_quantize{.bits = 4}, residual{}, adam{.lr = 1e-3});
}
void BM_overlap_core_per_rank_dense(benchmark::State& state) {
  overlap_core_per_rank(state, "dense ring", identity{}, no_feedback{}, adam{.lr = 1e-3});
}
BENCHMARK(BM_overlap_core_per_rank)->Apply(grid);
BENCHMARK(BM_overlap_core_per_rank_maxmin4)->Apply(small_grid);
BENCHMARK(BM_overlap_core_per_rank_dense)->Apply(small_grid);

}  // namespace
