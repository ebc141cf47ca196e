// ef21: EF21 (Richtárik, Sokolov, Fatkhullin 2021): each worker keeps an estimate h of its
// gradient and sends encode(g - h), then h += decode(message). Receivers keep the running sum of
// the decoded differences (aggregate h), which the optimizer uses as the gradient.
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
namespace detail::feedback {

template <class S, class C, class T>
std::size_t ef21_unfused(C const& c, feedback_slice const& s, std::span<T const> grad, encode_context const& ctx,
                         feedback_workspace<C, T>& ws, std::span<std::byte> out) {
  std::size_t const n = grad.size();
  auto const h = s.template buffer<S>(0);
  fit(ws.compensated, n);
  float* const cf = ws.compensated.data();
  if (auto const bad = for_each_counting(n, [&](std::size_t i) { return cf[i] = to_float(grad[i]) - to_float(h[i]); }))
    s.state().record_non_finite(bad);
  std::size_t bytes = 0;
  bytes = encode_narrowed<T>(c, std::span<float const>(cf, n), ctx, ws, out);
  fit(ws.decoded, n);
  c.decode_into(std::span<std::byte const>(out.data(), bytes), ctx, ws.codec, std::span<T>(ws.decoded), overwrite);
  T const* const d = ws.decoded.data();
  auto const rs = state_stream(ctx, s.tensor());
  parallel_chunks(n, grain, [&](std::size_t b, std::size_t end, int) {
    store_range<S>(h.data(), b, end, rs, s.offset(), [&](std::size_t i) { return to_float(h[i]) + to_float(d[i]); });
  });
  return bytes;
}

}  // namespace detail::feedback

/// EF21 with one fp32 or bf16 gradient estimate h per tensor element. The message is a
/// difference: aggregate by adding decoded messages into a running sum (decode_add), never by
/// overwriting.
struct ef21 {
  using feedback_concept = feedback_tag;
  static constexpr std::uint16_t state_kind = 3;
  static constexpr std::size_t state_buffers = 1;
  element_type precision = element_type::f32;                     ///< estimate storage: f32 or bf16
  non_finite_policy non_finite = non_finite_policy::throw_error;  ///< what NaN/Inf gradients do
  friend bool operator==(ef21 const&, ef21 const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, ef21 const& v) { h("ef21", v.precision, v.non_finite); }

  /// Encodes g - h and moves h by what was sent; see FeedbackFor.
  template <class C, Element T>
  requires Codec<C, T> std::size_t encode(C const& codec, feedback_slice s,
                                          std::type_identity_t<std::span<T const>> grad, encode_context const& ctx,
                                          feedback_workspace<C, T>& ws, std::span<std::byte> out)
  const {
    C const c = detail::feedback::codec_at(s.warmup(), codec, ctx.step);
    detail::feedback::check_call(c, s, grad.size(), 1, out.size(), ctx, "ef21");
    return detail::feedback::with_state_type(s.precision(), [&]<class S>() -> std::size_t {
      if (non_finite != non_finite_policy::propagate && !ctx.finite) {
        auto const at = detail::feedback::first_non_finite_of(grad);
        if (at != detail::feedback::npos && detail::feedback::on_non_finite(non_finite, s, at, ctx.step, "ef21"))
          return 0;
      }
      return detail::feedback::ef21_unfused<S>(c, s, grad, ctx, ws, out);
    });
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::ef21> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::ef21 const& f, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "ef21{{.precision = {}, .non_finite = {}}}", sluice::to_string(f.precision),
                          f.non_finite);
  }
};
