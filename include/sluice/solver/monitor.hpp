// Bandwidth monitor: goodput of one link level from the transport's own completions (bytes moved,
// seconds taken), with no probe traffic. An EWMA follows the goodput the transfers got; a windowed
// minimum gives a pessimistic bound; a windowed upper quantile estimates the link itself; a level
// shift (several samples in a row far from the EWMA) is detected and the EWMA and the window
// restart from the new level, so a changed link is tracked within a few samples.
//
// Why an upper quantile for the link: a sample is a collective's wall time, which waiting only
// lengthens (for a peer that started later, for a CPU), never shortens, so a sample reads at most
// the link's rate and usually below it. The EWMA of such samples sits well under the link (by a
// fifth on 100 Mbit/s between two ranks of a loaded machine); the samples that met no wait, the
// upper part of the window, read the link.
//
// Integration: call observe(bytes, seconds, now) for each completed communication of this level
// (a collective's bytes sent by this rank and its wall time). monitor_sink adapts a monitor to the
// pipeline's telemetry: it is a TelemetrySink (record(sample) noexcept, thread-safe) that forwards
// the samples whose stage is "exchange".
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <string_view>
#include <vector>

#include <sluice/core/error.hpp>

namespace sluice {

/// How a bandwidth_monitor weighs samples.
struct monitor_options {
  double alpha = 0.25;             ///< EWMA weight of a new sample, in (0, 1]
  std::size_t window = 16;         ///< samples in the windowed minimum, >= 1
  double change_ratio = 0.3;       ///< |sample / ewma - 1| above this counts towards a change, > 0
  std::size_t change_samples = 3;  ///< consecutive such samples (same direction) that make a change, >= 1
  double latency_seconds = 0;      ///< subtracted from each sample's time (the level's known latency), >= 0
  std::size_t min_bytes = 1;       ///< samples with fewer bytes are ignored (latency dominates), >= 1
  double link_quantile = 0.9;      ///< quantile of the window that link_estimate() reads, in [0, 1]
  friend bool operator==(monitor_options const&, monitor_options const&) = default;
};

/// Goodput estimate of one link level, in bytes per second. Deterministic in its inputs.
class bandwidth_monitor {
 public:
  explicit bandwidth_monitor(monitor_options o = {}) : o_(o) {
    require(o.alpha > 0 && o.alpha <= 1, errc::invalid_argument, "bandwidth_monitor: alpha {} is outside (0, 1]",
            o.alpha);
    require(o.window >= 1 && o.change_samples >= 1 && o.min_bytes >= 1, errc::invalid_argument,
            "bandwidth_monitor: window, change_samples and min_bytes must be >= 1");
    require(o.change_ratio > 0 && std::isfinite(o.change_ratio), errc::invalid_argument,
            "bandwidth_monitor: change_ratio {} must be finite and > 0", o.change_ratio);
    require(o.latency_seconds >= 0 && std::isfinite(o.latency_seconds), errc::invalid_argument,
            "bandwidth_monitor: latency_seconds {} must be finite and >= 0", o.latency_seconds);
    require(o.link_quantile >= 0 && o.link_quantile <= 1, errc::invalid_argument,
            "bandwidth_monitor: link_quantile {} is outside [0, 1]", o.link_quantile);
  }

  /// One completion: `bytes` moved in `seconds`, finished at time `now` (seconds on any clock that
  /// does not go backwards). Samples with too few bytes or a non-positive time are ignored; returns
  /// whether this sample completed a level change.
  bool observe(std::size_t bytes, double seconds, double now) noexcept {
    double const t = seconds - o_.latency_seconds;
    if (bytes < o_.min_bytes || !(t > 0) || !std::isfinite(t) || !std::isfinite(now)) return false;
    double const g = static_cast<double>(bytes) / t;
    last_time_ = now;
    ++samples_;
    window_.push_back(g);
    if (window_.size() > o_.window) window_.pop_front();
    if (samples_ == 1) {
      ewma_ = g;
      return false;
    }
    // Level-shift detection: change_samples consecutive samples beyond change_ratio, same side.
    double const dev = g / ewma_ - 1;
    int const side = dev > o_.change_ratio ? 1 : dev < -o_.change_ratio ? -1 : 0;
    if (side != 0 && side == side_) {
      ++run_;
      run_sum_ += g;
    } else {
      side_ = side;
      run_ = side != 0 ? 1 : 0;
      run_sum_ = side != 0 ? g : 0;
    }
    if (side_ != 0 && run_ >= o_.change_samples) {
      ewma_ = run_sum_ / static_cast<double>(run_);
      // The window restarts at the new level so the minimum does not hold on to the old one.
      window_.erase(window_.begin(), window_.end() - static_cast<std::ptrdiff_t>(std::min(run_, window_.size())));
      ++changes_;
      last_change_ = now;
      side_ = 0;
      run_ = 0;
      run_sum_ = 0;
      return true;
    }
    ewma_ += o_.alpha * (g - ewma_);
    return false;
  }

  /// EWMA goodput, bytes/s; 0 before the first sample.
  [[nodiscard]] double estimate() const noexcept { return ewma_; }
  /// Smallest goodput of the last `window` samples (since the last change), bytes/s; 0 before the first.
  [[nodiscard]] double windowed_min() const noexcept {
    return window_.empty() ? 0 : *std::min_element(window_.begin(), window_.end());
  }
  /// The link's rate, bytes/s: the link_quantile of the goodputs in the window (since the last
  /// change; nearest rank, so always one of the samples); 0 before the first sample. Waits only
  /// lower a sample, so this reads the link where estimate() reads what the transfers got.
  [[nodiscard]] double link_estimate() const {
    if (window_.empty()) return 0;
    std::vector<double> w(window_.begin(), window_.end());
    auto const k = static_cast<std::size_t>(std::lround(o_.link_quantile * static_cast<double>(w.size() - 1)));
    std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(k), w.end());
    return w[k];
  }
  /// Samples accepted so far.
  [[nodiscard]] std::uint64_t samples() const noexcept { return samples_; }
  /// Level changes detected so far, and when the last one completed (NaN before the first).
  [[nodiscard]] std::uint64_t changes() const noexcept { return changes_; }
  [[nodiscard]] double last_change_time() const noexcept { return last_change_; }
  /// Whether no sample arrived for `idle_seconds` before `now`: the only time a caller should send
  /// probe traffic (and then feed its completions to observe()).
  [[nodiscard]] bool idle(double now, double idle_seconds) const noexcept {
    return samples_ == 0 || now - last_time_ >= idle_seconds;
  }
  [[nodiscard]] monitor_options const& options() const noexcept { return o_; }

 private:
  monitor_options o_;
  double ewma_ = 0;
  std::deque<double> window_{};
  std::uint64_t samples_ = 0, changes_ = 0;
  double last_time_ = 0, last_change_ = std::numeric_limits<double>::quiet_NaN();
  int side_ = 0;
  std::size_t run_ = 0;
  double run_sum_ = 0;
};

/// A thread-safe telemetry sink feeding one bandwidth_monitor with the "exchange" samples of a
/// pipeline (any sample type with `which`, `bytes` and `seconds`, whose `to_string(which)` names the
/// stage). Times are taken from the steady clock at record().
class monitor_sink {
 public:
  explicit monitor_sink(monitor_options o = {}) : m_(o) {}

  /// Forwards exchange samples (bytes this rank sent, wall time of the collective); ignores the
  /// other stages and the per-step reports.
  template <class Sample>
  void record(Sample const& s) noexcept {
    if constexpr (requires { s.which; }) {
      if (to_string(s.which) != std::string_view("exchange")) return;
      double const now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
      std::lock_guard lock(mu_);
      m_.observe(s.bytes, s.seconds, now);
    }
  }
  /// A copy of the monitor's state (thread-safe).
  [[nodiscard]] bandwidth_monitor snapshot() const {
    std::lock_guard lock(mu_);
    return m_;
  }

 private:
  mutable std::mutex mu_{};
  bandwidth_monitor m_;
};

}  // namespace sluice
