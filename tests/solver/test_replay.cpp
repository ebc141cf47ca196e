// Trace replay through the cost model (the scenario of bench/solver, docs/solver.md): the adaptive
// controller, fed only by its bandwidth monitor, is never slower than the best single static
// configuration and stays within 5% of an oracle that knows the trace.
#include <doctest/doctest.h>

#include <sluice/solver/replay.hpp>

#include "support/solver_scenario.hpp"

using namespace sluice;

TEST_CASE("adaptive beats every static configuration and is within 5% of the oracle") {
  solver const s(test::replay_problem());
  auto const trace = test::replay_trace();
  auto const o = test::replay_settings();
  std::vector<switch_event> log;
  auto const adaptive = replay_adaptive(s, {}, trace, o, &log);
  auto const oracle = replay_oracle(s, {}, trace, o);
  auto const [cfg, fixed] = test::best_static(s, trace, o);
  plan const first = s.solve({}, std::vector<double>{trace.front().bytes_per_second});
  auto const tuned_at_start = replay_static(s, first, trace, o);
  MESSAGE(
      fmt::format("adaptive {:.0f} s ({} steps, {} switches), oracle {:.0f} s, best static {:.0f} s ({}), "
                  "tuned at start {:.0f} s",
                  adaptive.time_to_accuracy, adaptive.steps, adaptive.switches, oracle.time_to_accuracy,
                  fixed.time_to_accuracy, cfg.codec, tuned_at_start.time_to_accuracy));
  CHECK(fixed.time_to_accuracy > adaptive.time_to_accuracy);
  CHECK(tuned_at_start.time_to_accuracy > 1.2 * adaptive.time_to_accuracy);
  CHECK(adaptive.time_to_accuracy <= 1.05 * oracle.time_to_accuracy);
  CHECK(adaptive.switches == log.size());
  for (auto const& e : log) CHECK(!e.reason.empty());
}
