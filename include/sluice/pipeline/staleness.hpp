// sluice::staleness_compensation: what the trainer's parameters are when updates lag behind.
// With staleness s, step(t) leaves the trainer parameters holding updates 0 .. t - s, so its next
// gradient is computed s updates behind the master weights it will be applied to. On a quadratic
// (curvature h, step a = lr h) heavy-ball momentum 0.9 is stable for a < 3.8 with fresh gradients
// but only for a < 0.097 with a delay of one step; the compensations below publish parameters that
// estimate where the master weights will be when the gradient is applied.
#pragma once

#include <cstdint>
#include <string_view>

#include <fmt/core.h>

#include <sluice/core/detail/spec_formatter.hpp>
#include <sluice/core/serial.hpp>

namespace sluice {

/// How the pipeline estimates the parameters s updates ahead (pipeline_options::compensation).
enum class compensation_method : std::uint8_t {
  /// The master weights as they are (updates 0 .. t - s): the delayed-SGD definition.
  none = 0,
  /// The master weights extrapolated along the last update: w + s (w - w_prev). Optimizer-agnostic,
  /// one buffer of the model; the same on every rank.
  weight_prediction = 1,
  /// The master weights advanced by the optimizer over the s steps still in flight, each with this
  /// rank's own gradient of that step in place of the average the exchange will deliver (a
  /// scratch copy of the optimizer state; the master weights and the state are not changed).
  /// Exact on a quadratic shared by all ranks; ranks' trainer parameters differ by their own
  /// gradients until synchronize(), which leaves nothing in flight and identical parameters.
  local_step = 2,
};

/// Human-readable name ("none", "weight_prediction", "local_step").
constexpr std::string_view to_string(compensation_method m) noexcept {
  switch (m) {
    case compensation_method::none:
      return "none";
    case compensation_method::weight_prediction:
      return "weight_prediction";
    case compensation_method::local_step:
      return "local_step";
  }
  return "?";
}

/// Staleness compensation of a pipeline: a regular value (pipeline_options::compensation). It
/// changes only the parameters handed to the trainer between synchronize() calls; the master
/// weights, the optimizer state and what is exchanged follow the delayed-SGD definition.
struct staleness_compensation {
  compensation_method method = compensation_method::local_step;
  friend constexpr bool operator==(staleness_compensation const&, staleness_compensation const&) = default;
  friend void hash_append(serial::hasher& h, staleness_compensation const& c) { h("staleness_compensation", c.method); }
};

}  // namespace sluice

template <>
struct fmt::formatter<sluice::compensation_method> : sluice::detail::spec_formatter {
  template <class Ctx>
  auto format(sluice::compensation_method m, Ctx& ctx) const {
    return format_with_spec(sluice::to_string(m), ctx);
  }
};

template <>
struct fmt::formatter<sluice::staleness_compensation> {
  constexpr auto parse(fmt::format_parse_context& ctx) -> decltype(ctx.begin()) { return ctx.begin(); }
  template <class Ctx>
  auto format(sluice::staleness_compensation const& c, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "staleness_compensation{{.method = {}}}", c.method);
  }
};
