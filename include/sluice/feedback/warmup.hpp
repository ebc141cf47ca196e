// Warm-up: one schedule of a codec's strength over the first steps (DGC's exponential ramp of
// sparsity, a bits ramp for quantizers). A codec declares what its strength is (codec_strength in
// compress/concepts.hpp); the schedule never guesses it from field names.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/core/error.hpp>

namespace sluice {

/// How the strength moves from `start` to the codec's own value.
enum class ramp_shape : std::uint8_t {
  exponential = 0,  ///< geometric interpolation (DGC: density 25% -> 6.25% -> 1.56% -> 0.4% -> 0.1%)
  linear = 1,       ///< arithmetic interpolation (a bits ramp 8 -> 4)
};

/// The codec's strength: the value of the member its `strength` declaration names.
template <WarmableCodec C>
double strength_of(C const& c) {
  return static_cast<double>(c.*C::strength.member);
}

/// A copy of `c` with strength `s` (rounded to nearest for an integral member).
template <WarmableCodec C>
C with_strength(C const& c, double s) {
  using value = std::remove_cvref_t<decltype(c.*C::strength.member)>;
  C r = c;
  if constexpr (std::is_integral_v<value>)
    r.*C::strength.member = static_cast<value>(std::lround(s));
  else
    r.*C::strength.member = static_cast<value>(s);
  return r;
}

/// Where a ramp with warmup::start == 0 begins for `c`: its declared warm start, scaled by its own
/// strength when the declaration is relative.
template <WarmableCodec C>
double warm_start_of(C const& c) {
  return C::strength.relative ? C::strength.warm_start * strength_of(c) : C::strength.warm_start;
}

/// The warm-up schedule: a regular value, saved with feedback_state so a restored run ramps
/// exactly as the original would have. steps == 0 turns it off.
struct warmup {
  std::uint64_t steps = 0;   ///< steps the ramp lasts; at and after it the codec's own strength
  double start = 0.0;        ///< strength at step 0 in the codec's unit; 0: the codec's declared warm start
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

  /// The codec to use at `step`: `c` ramped from start towards c's own strength. Only a codec
  /// that declares its strength (WarmableCodec) can be ramped.
  template <class C>
  [[nodiscard]] C apply(C const& c, std::uint64_t step) const {
    static_assert(WarmableCodec<C>,
                  "sluice::warmup::apply: this codec declares no strength (`static constexpr "
                  "sluice::codec_strength<C, V> strength`), so a warm-up cannot ramp it; warm up top_k, block_top_k, "
                  "random_k, threshold_top_k, maxmin_quantize, qsgd or power_sgd, or leave warmup::steps at 0 for "
                  "identity, cast and sign");
    if (steps == 0 || step >= steps) return c;
    double const from = start > 0 ? start : warm_start_of(c);
    return with_strength(c, strength(step, strength_of(c), from));
  }

  /// The weakest codec the schedule ever uses (its step-0 codec; `c` itself for a codec without
  /// strength): size output buffers with its max_encoded_bytes, since a ramp starts with more
  /// data per message than the target.
  template <class C>
  [[nodiscard]] C peak(C const& c) const {
    if constexpr (WarmableCodec<C>)
      return apply(c, 0);
    else
      return c;
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
