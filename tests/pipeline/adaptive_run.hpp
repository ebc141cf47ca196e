// One rank's runs for the adaptive pipeline tests (local threads and MPI). The adaptive run: a
// pipeline with the solver's controller bound to it, whose bandwidth monitor reads the pipeline's
// own exchange telemetry timed as if the link dropped from 1 Gbit/s to 1 Mbit/s at step 10. The
// hand run: the same pipeline without a controller, calling set_codec at the switch's step.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <sluice/pipeline/all.hpp>
#include <sluice/solver/all.hpp>

#include "pipeline/pipeline_testing.hpp"

namespace sluice::test {

inline constexpr std::uint64_t adaptive_steps = 24, adaptive_drop_at = 10;

inline double link_rate(std::uint64_t step) { return step < adaptive_drop_at ? 125e6 : 125e3; }

/// The job the controller solves: pipeline_testing's model on `world` equal workers, top_k at two
/// ratios, the pipeline's bucket cap and staleness (fixed for the run).
inline problem adaptive_job(int world, unsigned staleness) {
  problem p;
  for (int i = 0; i < world; ++i) p.workers.push_back({{0.01, 0.0005}, 64});
  p.links = {{static_cast<std::size_t>(world), 125e6, 50e-6}};
  p.model = model();
  p.codecs = {{top_k{.ratio = 0.2}, 1e-9}, {top_k{.ratio = 0.01}, 1e-9}};
  p.global_batches = {16 * static_cast<std::size_t>(world)};
  pipeline_options const o = small_buckets(staleness);
  p.bucket_caps = {o.bucketing.cap_bytes};
  p.staleness = {static_cast<int>(staleness)};
  p.bucketing.first_cap_bytes = o.bucketing.first_cap_bytes;
  return p;
}

/// The pipeline's exchange samples (bytes this rank sent), timed as if the link ran at
/// link_rate(step), fed to a bandwidth monitor: the monitor's public input, from real telemetry.
class shaped_link_sink {
 public:
  void record(stage_sample const& s) noexcept {
    if (s.which != stage::exchange) return;
    std::lock_guard lock(m_);
    mon_.observe(s.bytes, static_cast<double>(s.bytes) / link_rate(s.step), static_cast<double>(s.step));
  }
  void record(step_report const&) noexcept {}
  [[nodiscard]] std::vector<double> bandwidths() const {
    std::lock_guard lock(m_);
    return {mon_.samples() ? mon_.estimate() : 125e6};
  }

 private:
  mutable std::mutex m_;
  bandwidth_monitor mon_;
};

struct adaptive_outcome {
  std::vector<top_k> planned{};  // adaptive_control::current() before each step
  std::vector<top_k> codecs{};   // the pipeline's codec after each step (the one that step ran with)
  std::vector<switch_event> log{};
  model_params params{model()};  // after synchronize()
  model_params hand{model()};    // the hand run's, after synchronize()
};

/// The adaptive run, then the hand run on the same transport (set_codec at the logged switch).
template <Transport T>
adaptive_outcome adaptive_and_hand(T& t, solver const& s, unsigned staleness) {
  int const r = t.rank();
  adaptive_outcome out;
  std::vector<std::vector<float>> g;
  {
    shaped_link_sink link;
    pipeline pipe{top_k{.ratio = 0.5}, residual{}, sgd{.lr = 0.05}, t, small_buckets(staleness)};
    pipe.set_telemetry(link);
    adaptive_control const adapt(pipe, controller(s, {}, {.switch_delay = staleness + 1, .min_dwell = 4}),
                                 [&link] { return link.bandwidths(); });
    auto spans = out.params.spans();
    pipe.attach(model(), spans);
    for (std::uint64_t k = 0; k < adaptive_steps; ++k) {
      out.planned.push_back(std::get<top_k>(adapt.current().codec));
      gradients(r, k, out.params, g);
      pipe.step(views(g));
      out.codecs.push_back(pipe.codec());
    }
    pipe.synchronize();
    out.log = adapt.log();
  }
  if (out.log.size() != 1) return out;
  auto const& e = out.log.front();
  pipeline pipe{std::get<top_k>(e.from.codec), residual{}, sgd{.lr = 0.05}, t, small_buckets(staleness)};
  auto spans = out.hand.spans();
  pipe.attach(model(), spans);
  for (std::uint64_t k = 0; k < adaptive_steps; ++k) {
    if (k == e.effective_step) pipe.set_codec(std::get<top_k>(e.to.codec));
    gradients(r, k, out.hand, g);
    pipe.step(views(g));
  }
  pipe.synchronize();
  return out;
}

/// Checks that hold on every rank: one switch, to stronger compression, decided after the drop
/// and effective staleness + 1 steps later; every step ran the planned codec, the switch at
/// exactly its effective step; the parameters equal the hand run's bit for bit.
inline bool adaptive_checks(adaptive_outcome const& o, unsigned staleness, std::string& why) {
  if (o.log.size() != 1) return why = fmt::format("{} switches, 1 expected", o.log.size()), false;
  auto const& e = o.log.front();
  if (e.decided_step < adaptive_drop_at || e.effective_step != e.decided_step + staleness + 1 || e.reason.empty())
    return why = fmt::format("switch decided at {}, effective at {}", e.decided_step, e.effective_step), false;
  if (!(density(e.to.codec) < density(e.from.codec))) return why = "the switch does not compress more", false;
  for (std::uint64_t k = 0; k < adaptive_steps; ++k) {
    top_k const want = std::get<top_k>(k < e.effective_step ? e.from.codec : e.to.codec);
    if (!(o.codecs[k] == want) || !(o.planned[k] == want))
      return why = fmt::format("step {} ran {} (planned {}), {} expected", k, o.codecs[k], o.planned[k], want), false;
  }
  if (!(o.params == o.hand)) return why = "parameters differ from the hand run's", false;
  return true;
}

/// A rank's observable outcome as text (codec per step, the switch, a checksum of the parameters),
/// equal on every rank.
inline std::string adaptive_digest(adaptive_outcome const& o) {
  std::string s;
  for (auto const& c : o.codecs) s += fmt::format("{};", c);
  for (auto const& e : o.log)
    s += fmt::format("|{}->{}@{}/{}:{}", e.from.codec, e.to.codec, e.decided_step, e.effective_step, e.reason);
  double sum = 0;
  for (auto const& v : o.params.tensors)
    for (float x : v) sum = sum * 1.0000001 + static_cast<double>(x);
  return s + fmt::format("|{:a}", sum);
}

}  // namespace sluice::test
