// no_feedback: the codec alone, with the same warm-up and non-finite policy as every feedback.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>

#include <fmt/core.h>

#include <sluice/compress/detail/archetype.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/feedback/concepts.hpp>
#include <sluice/feedback/detail/kernels.hpp>

namespace sluice {

/// Encodes the gradient as it is: what was not sent is lost. State has no buffers.
struct no_feedback {
  using feedback_concept = feedback_tag;
  static constexpr std::uint16_t state_kind = 0;
  static constexpr std::size_t state_buffers = 0;
  non_finite_policy non_finite = non_finite_policy::throw_error;  ///< what NaN/Inf gradients do
  friend bool operator==(no_feedback const&, no_feedback const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, no_feedback const& v) { h("no_feedback", v.non_finite); }

  /// Encodes `grad` with the warmed-up codec; see FeedbackFor.
  template <class C, Element T>
  requires Codec<C, T> std::size_t encode(C const& codec, feedback_slice s,
                                          std::type_identity_t<std::span<T const>> grad, encode_context const& ctx,
                                          feedback_workspace<C, T>& ws, std::span<std::byte> out)
  const {
    C const c = detail::feedback::codec_at(s.warmup(), codec, ctx.step);
    detail::feedback::check_call(c, s, grad.size(), 0, out.size(), ctx, "no_feedback");
    if (non_finite != non_finite_policy::propagate && !ctx.finite) {
      auto const at = detail::feedback::first_non_finite_of(grad);
      if (at != detail::feedback::npos && detail::feedback::on_non_finite(non_finite, s, at, ctx.step, "no_feedback"))
        return 0;
    } else {
      s.state().record_non_finite(
          detail::feedback::count_non_finite(grad.size(), [&](std::size_t i) { return to_float(grad[i]); }));
    }
    return c.encode(grad, ctx, ws.codec, out);
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::no_feedback> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::no_feedback const& f, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "no_feedback{{.non_finite = {}}}", f.non_finite);
  }
};
