// Trace replay through the cost model: how long training to the target takes when one link
// level's bandwidth follows a trace, for a static configuration, for the adaptive controller (fed
// by a bandwidth monitor that sees the link only through its own completions) and for an oracle
// that knows the bandwidth of every step in advance. Training progress per step is
// 1 / steps_to_target of the configuration run at that step; a run ends when progress reaches 1.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <sluice/core/error.hpp>
#include <sluice/solver/controller.hpp>
#include <sluice/solver/monitor.hpp>
#include <sluice/solver/solve.hpp>

namespace sluice {

/// `seconds` of wall time at `bytes_per_second` on the traced level.
struct trace_segment {
  double seconds = 60;
  double bytes_per_second = 125e6;
};

/// How the replay runs. The trace repeats when training outlasts it.
struct replay_options {
  std::size_t level = 0;                 ///< the link level the trace drives
  double noise = 0.05;                   ///< relative spread of each monitored sample (deterministic), in [0, 0.5]
  std::uint64_t seed = 1;                ///< seed of the sample noise
  std::uint64_t max_steps = 10'000'000;  ///< gives up (errc::unsupported) past this many steps
  std::size_t record_every = 1;          ///< keep one replay_point every this many steps, >= 1
  controller_options control{};
  monitor_options monitor{};
};

/// One recorded step.
struct replay_point {
  std::uint64_t step = 0;
  double time = 0;       ///< seconds since the start, at the step's start
  double bandwidth = 0;  ///< true bytes/s of the traced level
  double estimate = 0;   ///< what the controller was given, bytes/s
  double density = 0;    ///< density() of the codec run
  std::size_t global_batch = 0;
  int staleness = 0;
  double progress = 0;  ///< fraction of the way to the target, after the step
};

struct replay_result {
  double time_to_accuracy = 0;  ///< seconds until progress reached 1
  std::uint64_t steps = 0;
  std::size_t switches = 0;  ///< configuration changes
  std::vector<replay_point> points{};
};

namespace detail {

// The bandwidth of the trace at time t (the trace repeats).
inline double trace_at(std::span<trace_segment const> trace, double t) {
  double total = 0;
  for (auto const& s : trace) total += s.seconds;
  double u = std::fmod(t, total);
  for (auto const& s : trace) {
    if (u < s.seconds) return s.bytes_per_second;
    u -= s.seconds;
  }
  return trace.back().bytes_per_second;
}

inline void check_trace(std::span<trace_segment const> trace, solver const& s, replay_options const& o) {
  require(!trace.empty(), errc::invalid_argument, "replay: the trace is empty");
  for (std::size_t i = 0; i < trace.size(); ++i)
    require(trace[i].seconds > 0 && trace[i].bytes_per_second > 0 && std::isfinite(trace[i].seconds) &&
                std::isfinite(trace[i].bytes_per_second),
            errc::invalid_argument, "replay: trace segment {} needs seconds and bytes_per_second finite and > 0", i);
  require(o.level < s.description().links.size(), errc::invalid_argument, "replay: level {} is not a link level",
          o.level);
  require(o.noise >= 0 && o.noise <= 0.5 && o.record_every >= 1, errc::invalid_argument,
          "replay: noise must be in [0, 0.5] and record_every >= 1");
}

// A deterministic factor in [1 - noise, 1 + noise] (splitmix64 of seed and step).
inline double noise_factor(std::uint64_t seed, std::uint64_t step, double noise) noexcept {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + step + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  double const u = static_cast<double>(z >> 11) * 0x1.0p-53;
  return 1 + noise * (2 * u - 1);
}

// Predictions of configurations at bandwidths, cached (traces revisit few levels).
class prediction_cache {
 public:
  explicit prediction_cache(solver const& s) : s_(&s) {}
  prediction const& at(plan const& p, std::vector<double> const& bw) {
    for (auto const& e : entries_)
      if (e.bw == bw && e.p.same_config(p)) return e.pred;
    entries_.push_back({p, bw, s_->predict(p, bw)});
    return entries_.back().pred;
  }

 private:
  struct entry {
    plan p;
    std::vector<double> bw;
    prediction pred;
  };
  solver const* s_;
  std::vector<entry> entries_{};
};

// Runs to progress 1; `choose(step, time, true_bw)` returns the plan of each step and the
// bandwidth estimate it used; `after(step, plan, pred, bw, time)` sees each finished step.
template <class Choose, class After>
replay_result run_replay(solver const& s, std::span<trace_segment const> trace, replay_options const& o,
                         Choose&& choose, After&& after) {
  check_trace(trace, s, o);
  prediction_cache cache(s);
  std::vector<double> bw = s.configured_bandwidths();
  replay_result r;
  double t = 0, progress = 0;
  plan last;
  for (std::uint64_t k = 0; progress < 1; ++k) {
    require(k < o.max_steps, errc::unsupported, "replay: no convergence within {} steps", o.max_steps);
    bw[o.level] = trace_at(trace, t);
    auto const [p, estimate] = choose(k, t, bw);
    if (k > 0 && !p.same_config(last)) ++r.switches;
    last = p;
    prediction const& pr = cache.at(p, bw);
    progress += 1 / pr.steps_to_target;
    if (k % o.record_every == 0)
      r.points.push_back({k, t, bw[o.level], estimate, density(p.codec), p.global_batch, p.staleness, progress});
    t += pr.step_seconds;
    after(k, p, pr, bw, t);
    r.steps = k + 1;
  }
  r.time_to_accuracy = t;
  return r;
}

}  // namespace detail

/// One configuration for the whole trace.
inline replay_result replay_static(solver const& s, plan const& fixed, std::span<trace_segment const> trace,
                                   replay_options const& o = {}) {
  return detail::run_replay(
      s, trace, o,
      [&](std::uint64_t, double, std::vector<double> const& bw) {
        return std::pair{fixed, bw[o.level]};
      },
      [](auto&&...) {});
}

/// The best configuration for each step's true bandwidth, switching instantly.
inline replay_result replay_oracle(solver const& s, config_request const& req, std::span<trace_segment const> trace,
                                   replay_options const& o = {}) {
  std::vector<std::pair<std::vector<double>, plan>> best;
  return detail::run_replay(
      s, trace, o,
      [&](std::uint64_t, double, std::vector<double> const& bw) {
        for (auto const& [b, p] : best)
          if (b == bw) return std::pair{p, bw[o.level]};
        best.emplace_back(bw, s.solve(req, bw));
        return std::pair{best.back().second, bw[o.level]};
      },
      [](auto&&...) {});
}

/// The controller, fed each step with a bandwidth_monitor's estimate of the traced level; the
/// monitor sees each step's bytes and exchange time at the true bandwidth, times a deterministic
/// noise factor. Other levels are given at their configured bandwidths. `log`, when given,
/// receives the controller's switch events.
inline replay_result replay_adaptive(solver const& s, config_request const& req, std::span<trace_segment const> trace,
                                     replay_options const& o = {}, std::vector<switch_event>* log = nullptr) {
  controller ctl(s, req, o.control);
  bandwidth_monitor mon(o.monitor);
  auto r = detail::run_replay(
      s, trace, o,
      [&](std::uint64_t k, double, std::vector<double> const&) {
        std::vector<double> est = s.configured_bandwidths();
        if (mon.samples() > 0) est[o.level] = mon.estimate();
        return std::pair{ctl.step(k, est), est[o.level]};
      },
      [&](std::uint64_t k, plan const&, prediction const& pr, std::vector<double> const& bw, double now) {
        double const bytes = pr.bytes_per_step;
        if (bytes < 1) return;
        double const secs = bytes / (bw[o.level] * detail::noise_factor(o.seed, k, o.noise));
        mon.observe(static_cast<std::size_t>(bytes), secs, now);
      });
  if (log) log->assign(ctl.log().begin(), ctl.log().end());
  return r;
}

}  // namespace sluice
