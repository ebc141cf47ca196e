// The controller: rank 0 re-solves the configuration from its bandwidth estimates, and when a
// better one clears the hysteresis it broadcasts it with the step at which it takes effect; every
// rank switches at that step, so all ranks always run the same configuration. Every switch is
// logged with its reason on every rank.
//
// Integration (one controller per rank, same problem and request on every rank):
//   sluice::controller ctl(solver, request, options);
//   for (std::uint64_t step = 0;; ++step) {
//     sluice::plan const& cfg = ctl.step(transport, step, {monitor.link_estimate()});  // collective call
//     ... run the step with cfg.codec, cfg.batches[rank], cfg.bucket_cap_bytes, cfg.staleness ...
//   }
// step() must be called by every rank for every step, in order. On steps that are multiples of
// decide_every it exchanges one small message from rank 0 to each other rank (tag options().tag).
// Only rank 0's bandwidths are used. Switching the codec mid-run keeps the error-feedback residual:
// residuals are per tensor, independent of the codec, so the next step compensates as usual.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include <sluice/core/error.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/solver/solve.hpp>
#include <sluice/transport/concepts.hpp>

namespace sluice {

/// How often and how reluctantly the controller switches.
struct controller_options {
  std::uint64_t decide_every = 1;  ///< rank 0 decides (one broadcast) every this many steps, >= 1
  std::uint64_t switch_delay = 2;  ///< a switch decided at step t takes effect at step t + switch_delay, >= 1
  double min_gain = 0.05;       ///< switch only when predicted time-to-accuracy drops by more than this fraction, >= 0
  std::uint64_t min_dwell = 8;  ///< steps after a switch before the next may be decided
  message_tag tag{tag_limit - 16};           ///< tag of the controller's messages (keep it apart from collectives')
  std::chrono::milliseconds timeout{60000};  ///< deadline of each receive
};

/// One configuration switch, as logged on every rank.
struct switch_event {
  std::uint64_t decided_step = 0;    ///< step at which rank 0 decided
  std::uint64_t effective_step = 0;  ///< first step run with `to`
  plan from{}, to{};                 ///< predictions are rank 0's at the decision
  std::string reason{};              ///< why, in words, with the numbers
};

namespace detail {

inline void put_plan(std::vector<std::byte>& out, plan const& p) {
  using serial::put;
  put(out, static_cast<std::uint8_t>(p.codec.index()));
  std::visit(
      [&](auto const& c) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, top_k>) put(out, c.ratio);
        if constexpr (std::is_same_v<C, block_top_k>) {
          put(out, c.ratio);
          put(out, static_cast<std::uint64_t>(c.block));
          put(out, static_cast<std::uint8_t>(c.score));
        }
        if constexpr (std::is_same_v<C, maxmin_quantize>) {
          put(out, static_cast<std::uint32_t>(c.bits));
          put(out, static_cast<std::uint64_t>(c.bucket));
          put(out, static_cast<std::uint8_t>(c.round));
        }
      },
      p.codec);
  put(out, static_cast<std::uint64_t>(p.global_batch));
  put(out, static_cast<std::uint32_t>(p.batches.size()));
  for (std::size_t b : p.batches) put(out, static_cast<std::uint64_t>(b));
  put(out, static_cast<std::uint64_t>(p.bucket_cap_bytes));
  put(out, static_cast<std::int32_t>(p.staleness));
  put(out, p.predicted.step_seconds);
  put(out, p.predicted.time_to_accuracy);
}

inline bool get_plan(serial::reader& r, plan& p, std::size_t workers) {
  std::uint8_t kind = 0;
  if (!r.get(kind)) return false;
  if (kind == 0) {
    p.codec = identity{};
  } else if (kind == 1) {
    top_k c;
    if (!r.get(c.ratio)) return false;
    p.codec = c;
  } else if (kind == 2) {
    block_top_k c;
    std::uint64_t block = 0;
    std::uint8_t score = 0;
    if (!r.get(c.ratio) || !r.get(block) || !r.get(score)) return false;
    c.block = static_cast<std::size_t>(block);
    c.score = static_cast<block_score>(score);
    p.codec = c;
  } else if (kind == 3) {
    maxmin_quantize c;
    std::uint32_t bits = 0;
    std::uint64_t bucket = 0;
    std::uint8_t round = 0;
    if (!r.get(bits) || !r.get(bucket) || !r.get(round)) return false;
    c.bits = bits;
    c.bucket = static_cast<std::size_t>(bucket);
    c.round = static_cast<rounding>(round);
    p.codec = c;
  } else {
    return false;
  }
  std::uint64_t g = 0, cap = 0;
  std::uint32_t n = 0;
  std::int32_t s = 0;
  if (!r.get(g) || !r.get(n) || n != workers) return false;
  p.batches.resize(n);
  std::uint64_t sum = 0;
  for (auto& b : p.batches) {
    std::uint64_t v = 0;
    if (!r.get(v)) return false;
    b = static_cast<std::size_t>(v);
    sum += v;
  }
  if (!r.get(cap) || !r.get(s) || !r.get(p.predicted.step_seconds) || !r.get(p.predicted.time_to_accuracy))
    return false;
  p.global_batch = static_cast<std::size_t>(g);
  p.bucket_cap_bytes = static_cast<std::size_t>(cap);
  p.staleness = s;
  try {
    validate(p.codec);
  } catch (error const&) {
    return false;
  }
  return sum == g && cap > 0 && s >= 0 && s <= 2;
}

}  // namespace detail

/// Keeps all ranks on one configuration and switches them together (see the file comment).
class controller {
 public:
  /// Starts from the solver's choice at the configured bandwidths (the same on every rank).
  controller(solver const& s, config_request req, controller_options o = {})
      : s_(&s), req_(std::move(req)), o_(o), current_(s.solve(req_)) {
    require(o.decide_every >= 1 && o.switch_delay >= 1, errc::invalid_argument,
            "controller: decide_every and switch_delay must be >= 1");
    require(o.min_gain >= 0, errc::invalid_argument, "controller: min_gain {} must be >= 0", o.min_gain);
    require(to_underlying(o.tag) < tag_limit, errc::invalid_argument, "controller: tag {} is not below tag_limit",
            to_underlying(o.tag));
  }

  /// Collective: every rank calls it once per step, in step order, before running `step`. Applies a
  /// switch due at this step, then (on decision steps) rank 0 decides from `bandwidths` (bytes/s,
  /// one per link level) and tells every rank. Returns the configuration to run this step with.
  /// errc::timeout / peer_lost from the transport; errc::malformed_message for a bad message.
  template <Transport T>
  plan const& step(T& t, std::uint64_t step, std::span<double const> bandwidths) {
    if (t.size() == 1) return this->step(step, bandwidths);
    apply_due(step);
    if (step % o_.decide_every != 0) return current_;
    if (t.rank() == 0) {
      std::vector<std::byte> msg;
      decide(step, bandwidths, &msg);
      std::vector<typename T::request> reqs;
      for (int peer = 1; peer < t.size(); ++peer) reqs.push_back(t.send(peer, o_.tag, msg));
      auto const d = deadline::after(o_.timeout);
      for (auto& r : reqs) r.wait(d);
    } else {
      auto const bytes = t.recv(0, o_.tag, buf_, deadline::after(o_.timeout));
      receive(step, bytes);
    }
    return current_;
  }

  /// The same without a transport, for a single process (or a caller that broadcasts itself):
  /// applies a due switch, decides on decision steps, returns the configuration for `step`.
  plan const& step(std::uint64_t step, std::span<double const> bandwidths) {
    apply_due(step);
    if (step % o_.decide_every == 0) decide(step, bandwidths, nullptr);
    return current_;
  }

  /// The configuration in force.
  [[nodiscard]] plan const& current() const noexcept { return current_; }
  /// Every switch so far (the last may still be pending).
  [[nodiscard]] std::span<switch_event const> log() const noexcept { return log_; }
  [[nodiscard]] controller_options const& options() const noexcept { return o_; }
  /// The solver and the request rank 0 decides with.
  [[nodiscard]] solver const& decision_solver() const noexcept { return *s_; }
  [[nodiscard]] config_request const& request() const noexcept { return req_; }

 private:
  void apply_due(std::uint64_t step) {
    if (pending_ && step >= log_.back().effective_step) {
      current_ = log_.back().to;
      pending_ = false;
    }
  }

  // Rank 0: decides and, when `msg`, writes the message for the other ranks.
  void decide(std::uint64_t step, std::span<double const> bandwidths, std::vector<std::byte>* msg) {
    bool sw = false;
    if (!pending_ && (log_.empty() || step >= log_.back().effective_step + o_.min_dwell)) {
      plan best = s_->solve(req_, bandwidths);
      plan now = current_;
      now.predicted = s_->predict(current_, bandwidths);
      if (!best.same_config(now) &&
          best.predicted.time_to_accuracy < now.predicted.time_to_accuracy * (1 - o_.min_gain)) {
        std::string bw;
        for (double b : bandwidths) bw += fmt::format("{}{:.1f}", bw.empty() ? "" : ", ", b * 8e-6);
        std::string reason = fmt::format(
            "bandwidth [{}] Mbit/s: predicted time-to-accuracy {:.1f} s -> {:.1f} s ({:.1f}% less); codec {} -> {}", bw,
            now.predicted.time_to_accuracy, best.predicted.time_to_accuracy,
            100 * (1 - best.predicted.time_to_accuracy / now.predicted.time_to_accuracy), now.codec, best.codec);
        log_.push_back({step, step + o_.switch_delay, std::move(now), std::move(best), std::move(reason)});
        pending_ = true;
        sw = true;
      }
    }
    if (!msg) return;
    serial::put(*msg, static_cast<std::uint8_t>(sw ? 1 : 0));
    serial::put(*msg, step);
    if (!sw) return;
    auto const& e = log_.back();
    serial::put(*msg, e.effective_step);
    detail::put_plan(*msg, e.from);
    detail::put_plan(*msg, e.to);
    serial::put(*msg, static_cast<std::uint32_t>(e.reason.size()));
    serial::append(*msg, std::as_bytes(std::span(e.reason)));
  }

  // Other ranks: applies rank 0's message for `step`.
  void receive(std::uint64_t step, std::span<std::byte const> bytes) {
    serial::reader r(bytes);
    std::uint8_t sw = 0;
    std::uint64_t at = 0;
    bool ok = r.get(sw) && sw <= 1 && r.get(at) && at == step;
    switch_event e;
    std::uint32_t len = 0;
    std::span<std::byte const> text;
    std::size_t const n = s_->description().workers.size();
    if (ok && sw == 1)
      ok = r.get(e.effective_step) && e.effective_step > step && detail::get_plan(r, e.from, n) &&
           detail::get_plan(r, e.to, n) && r.get(len) && r.take(len, text);
    ok = ok && r.left() == 0;
    require(ok, errc::malformed_message,
            "controller: rank 0's message for step {} is malformed ({} bytes); are all ranks at the same step "
            "with the same problem?",
            step, bytes.size());
    if (sw == 0) return;
    e.decided_step = step;
    e.reason.assign(reinterpret_cast<char const*>(text.data()), text.size());
    log_.push_back(std::move(e));
    pending_ = true;
  }

  solver const* s_;
  config_request req_;
  controller_options o_;
  plan current_;
  std::vector<switch_event> log_{};
  bool pending_ = false;
  std::vector<std::byte> buf_{};
};

}  // namespace sluice
