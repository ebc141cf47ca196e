// Warm-up: one schedule of a codec's strength over the first steps, for every codec (DGC's
// exponential ramp of sparsity, a bits ramp for quantizers), applied through with_strength().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include <sluice/core/error.hpp>

namespace sluice {

/// How the strength moves from `start` to the codec's own value.
enum class ramp_shape : std::uint8_t {
  exponential = 0,  ///< geometric interpolation (DGC: density 25% -> 6.25% -> 1.56% -> 0.4% -> 0.1%)
  linear = 1,       ///< arithmetic interpolation (a bits ramp 8 -> 4)
};

/// A codec's strength: the one number warm-up moves, found in this order: a codec's own
/// `double strength() const` + `C with_strength(double) const`; `ratio` (top-k family, random-k:
/// fraction kept); `bits` (max-min quantizer); `levels` (QSGD); `rank` (PowerSGD). Codecs with
/// none of these (identity, cast, sign) have no strength and are never ramped.
template <class C>
struct strength_traits {
  static constexpr bool custom = requires(C const& c, double s) {
    { c.strength() } -> std::convertible_to<double>;
    { c.with_strength(s) } -> std::convertible_to<C>;
  };
  static constexpr bool has_ratio = requires(C c) { requires std::is_floating_point_v<decltype(c.ratio)>; };
  static constexpr bool has_bits = requires(C c) { requires std::is_integral_v<decltype(c.bits)>; };
  static constexpr bool has_levels = requires(C c) { requires std::is_integral_v<decltype(c.levels)>; };
  static constexpr bool has_rank = requires(C c) { requires std::is_integral_v<decltype(c.rank)>; };
  /// Whether the codec has a strength at all.
  static constexpr bool has_strength = custom || has_ratio || has_bits || has_levels || has_rank;
  /// Strength values are rounded to integers (bits, levels, rank).
  static constexpr bool integral = !custom && !has_ratio && (has_bits || has_levels || has_rank);
  /// Where a schedule with start == 0 begins for a codec of strength `target`: DGC's 25% density,
  /// 8 bits, 127 QSGD levels, or 4x the PowerSGD rank.
  static constexpr double warm_start(double target) noexcept {
    if constexpr (custom || has_ratio)
      return 0.25;
    else if constexpr (has_bits)
      return 8.0;
    else if constexpr (has_levels)
      return 127.0;
    else
      return 4.0 * target;
  }
};

/// The codec's strength (its ratio or bits), or 0 for a codec without one.
template <class C>
double strength_of(C const& c) {
  using tr = strength_traits<C>;
  if constexpr (tr::custom)
    return static_cast<double>(c.strength());
  else if constexpr (tr::has_ratio)
    return static_cast<double>(c.ratio);
  else if constexpr (tr::has_bits)
    return static_cast<double>(c.bits);
  else if constexpr (tr::has_levels)
    return static_cast<double>(c.levels);
  else if constexpr (tr::has_rank)
    return static_cast<double>(c.rank);
  else
    return 0.0;
}

/// A copy of `c` with strength `s` (rounded to the nearest integer for bits); `c` itself for a
/// codec without strength.
template <class C>
C with_strength(C const& c, double s) {
  using tr = strength_traits<C>;
  if constexpr (tr::custom) {
    return c.with_strength(s);
  } else if constexpr (tr::has_ratio) {
    C r = c;
    r.ratio = static_cast<decltype(r.ratio)>(s);
    return r;
  } else if constexpr (tr::has_bits) {
    C r = c;
    r.bits = static_cast<decltype(r.bits)>(std::lround(s));
    return r;
  } else if constexpr (tr::has_levels) {
    C r = c;
    r.levels = static_cast<decltype(r.levels)>(std::lround(s));
    return r;
  } else if constexpr (tr::has_rank) {
    C r = c;
    r.rank = static_cast<decltype(r.rank)>(std::lround(s));
    return r;
  } else {
    (void)s;
    return c;
  }
}

/// The warm-up schedule: a regular value, saved with feedback_state so a restored run ramps
/// exactly as the original would have. steps == 0 turns it off.
struct warmup {
  std::uint64_t steps = 0;   ///< steps the ramp lasts; at and after it the codec's own strength
  double start = 0.0;        ///< strength at step 0 in the codec's unit; 0: strength_traits::warm_start
  std::uint64_t stages = 0;  ///< 0: changes every step; s > 0: s constant stages (DGC: one per epoch)
  ramp_shape shape = ramp_shape::exponential;  ///< interpolation between start and the target
  friend bool operator==(warmup const&, warmup const&) = default;

  /// Strength at `step` for a codec whose own strength is `target`, starting from `from`.
  [[nodiscard]] double strength(std::uint64_t step, double target, double from) const noexcept {
    if (steps == 0 || step >= steps) return target;
    double frac = static_cast<double>(step) / static_cast<double>(steps);
    if (stages > 0) frac = std::floor(frac * static_cast<double>(stages)) / static_cast<double>(stages);
    if (shape == ramp_shape::exponential && from > 0 && target > 0) return from * std::pow(target / from, frac);
    return from + (target - from) * frac;
  }

  /// errc::invalid_argument for a negative or non-finite start.
  void validate() const {
    require(std::isfinite(start) && start >= 0, errc::invalid_argument, "warmup: start must be finite and >= 0, got {}",
            start);
  }

  /// The codec to use at `step`: `c` ramped from start towards c's own strength.
  template <class C>
  [[nodiscard]] C apply(C const& c, std::uint64_t step) const {
    using tr = strength_traits<C>;
    if constexpr (!tr::has_strength) {
      (void)step;
      return c;
    } else {
      if (steps == 0 || step >= steps) return c;
      double const from = start > 0 ? start : tr::warm_start(strength_of(c));
      return with_strength(c, strength(step, strength_of(c), from));
    }
  }

  /// The weakest codec the schedule ever uses (its step-0 codec): size output buffers with
  /// its max_encoded_bytes, since a ramp starts with more data per message than the target.
  template <class C>
  [[nodiscard]] C peak(C const& c) const {
    return apply(c, 0);
  }
};

}  // namespace sluice

template <>
struct fmt::formatter<sluice::warmup> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::warmup const& w, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "warmup{{.steps = {}, .start = {}, .stages = {}, .shape = {}}}", w.steps, w.start,
                          w.stages, w.shape == sluice::ramp_shape::exponential ? "exponential" : "linear");
  }
};
