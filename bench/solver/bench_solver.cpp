// The solver's speed (one solve of the GPT-2 small scenario: 11 codecs x 3 bucket caps x 5 global
// batches x 3 staleness values) and the trace replay of docs/solver.md: predicted time-to-accuracy
// of the adaptive controller against the best static configuration, the configuration tuned at
// the trace's start, dense gradients and an oracle. The replay also writes its per-step record to
// build/bench/solver_trace.json and .tsv (SLUICE_SOLVER_TRACE overrides the path stem) for
// scripts/plot_solver.sh.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <sluice/solver/replay.hpp>

#include "../../tests/support/solver_scenario.hpp"

namespace {

using namespace sluice;

void BM_solve(benchmark::State& state) {
  solver const s(test::replay_problem());
  std::vector<double> bw{static_cast<double>(state.range(0)) * 1e6 / 8};
  config_request const req{};
  for (auto _ : state) {
    plan p = s.solve(req, bw);
    benchmark::DoNotOptimize(p);
  }
  state.counters["candidates"] = 11 * 3 * 5 * 3;
  state.counters["mbps"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_solve)->Arg(50)->Arg(1000)->Unit(benchmark::kMicrosecond);

void write_trace(std::string const& stem, replay_result const& r, std::vector<switch_event> const& log) {
  std::string json = "{\n  \"points\": [\n";
  std::string tsv = "# time_s bandwidth_mbps estimate_mbps density global_batch staleness progress\n";
  for (std::size_t i = 0; i < r.points.size(); ++i) {
    auto const& p = r.points[i];
    json += fmt::format(
        "    {{\"step\": {}, \"time\": {:.3f}, \"bandwidth_mbps\": {:.3f}, \"estimate_mbps\": {:.3f}, "
        "\"density\": {}, \"global_batch\": {}, \"staleness\": {}, \"progress\": {:.6f}}}{}\n",
        p.step, p.time, p.bandwidth * 8e-6, p.estimate * 8e-6, p.density, p.global_batch, p.staleness, p.progress,
        i + 1 < r.points.size() ? "," : "");
    tsv += fmt::format("{:.3f} {:.3f} {:.3f} {} {} {} {:.6f}\n", p.time, p.bandwidth * 8e-6, p.estimate * 8e-6,
                       p.density, p.global_batch, p.staleness, p.progress);
  }
  json += "  ],\n  \"switches\": [\n";
  for (std::size_t i = 0; i < log.size(); ++i)
    json += fmt::format("    {{\"decided_step\": {}, \"effective_step\": {}, \"reason\": \"{}\"}}{}\n",
                        log[i].decided_step, log[i].effective_step, log[i].reason, i + 1 < log.size() ? "," : "");
  json += "  ]\n}\n";
  for (auto const& [ext, text] : {std::pair{".json", &json}, std::pair{".tsv", &tsv}})
    if (std::FILE* f = std::fopen((stem + ext).c_str(), "w")) {
      std::fputs(text->c_str(), f);
      std::fclose(f);
    }
}

void BM_trace_replay(benchmark::State& state) {
  solver const s(test::replay_problem());
  auto const trace = test::replay_trace();
  auto const o = test::replay_settings();
  replay_result adaptive, oracle, fixed, start, dense;
  std::vector<switch_event> log;
  plan best;
  for (auto _ : state) {
    adaptive = replay_adaptive(s, {}, trace, o, &log);
    oracle = replay_oracle(s, {}, trace, o);
    std::tie(best, fixed) = test::best_static(s, trace, o);
    plan const first = s.solve({}, std::vector<double>{trace.front().bytes_per_second});
    start = replay_static(s, first, trace, o);
    plan d = first;
    d.codec = identity{};
    dense.time_to_accuracy = test::static_time(s, d, trace);
  }
  char const* env = std::getenv("SLUICE_SOLVER_TRACE");
  write_trace(env ? env : "build/bench/solver_trace", adaptive, log);
  state.counters["adaptive_s"] = adaptive.time_to_accuracy;
  state.counters["oracle_s"] = oracle.time_to_accuracy;
  state.counters["best_static_s"] = fixed.time_to_accuracy;
  state.counters["tuned_at_start_s"] = start.time_to_accuracy;
  state.counters["dense_s"] = dense.time_to_accuracy;
  state.counters["vs_best_static"] = fixed.time_to_accuracy / adaptive.time_to_accuracy;
  state.counters["vs_tuned_at_start"] = start.time_to_accuracy / adaptive.time_to_accuracy;
  state.counters["vs_dense"] = dense.time_to_accuracy / adaptive.time_to_accuracy;
  state.counters["oracle_gap"] = adaptive.time_to_accuracy / oracle.time_to_accuracy - 1;
  state.counters["switches"] = static_cast<double>(adaptive.switches);
  state.SetLabel(fmt::format("best static: {} B={} s={}", best.codec, best.global_batch, best.staleness));
}
BENCHMARK(BM_trace_replay)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
