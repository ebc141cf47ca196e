// residual: error feedback as in EF-SGD (Karimireddy et al. 2019): compensate c = g + e, send
// encode(c), keep e = c - decode(encode(c)). Fused where the codec offers encode_compensated
// (block_top_k, maxmin_quantize) and for every sparse codec; the fused paths are bit-identical to
// the unfused composition.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>

#include <fmt/core.h>

#include <sluice/compress/concepts.hpp>
#include <sluice/compress/detail/archetype.hpp>
#include <sluice/core/serial.hpp>
#include <sluice/feedback/concepts.hpp>
#include <sluice/feedback/detail/kernels.hpp>

namespace sluice {

namespace detail::feedback {

/// The reference composition: c = g + e into scratch, encode(c), decode into scratch, e = c - d.
template <class S, class C, class T>
std::size_t residual_unfused(C const& c, feedback_slice const& s, std::span<T const> grad, encode_context const& ctx,
                             feedback_workspace<C, T>& ws, std::span<std::byte> out) {
  std::size_t const n = grad.size();
  auto const e = s.template buffer<S>(0);
  fit(ws.compensated, n);
  float* const cf = ws.compensated.data();
  if (auto const bad = for_each_counting(n, [&](std::size_t i) { return cf[i] = to_float(grad[i]) + to_float(e[i]); }))
    s.state().record_non_finite(bad);
  std::size_t bytes = 0;
  bytes = encode_narrowed<T>(c, std::span<float const>(cf, n), ctx, ws, out);
  fit(ws.decoded, n);
  c.decode_into(std::span<std::byte const>(out.data(), bytes), ctx, ws.codec, std::span<T>(ws.decoded), overwrite);
  auto const rs = state_stream(ctx, s.tensor());
  T const* const d = ws.decoded.data();
  parallel_chunks(n, grain, [&](std::size_t b, std::size_t end, int) {
    store_range<S>(e.data(), b, end, rs, s.offset(), [&](std::size_t i) { return cf[i] - to_float(d[i]); });
  });
  return bytes;
}

/// Sparse codecs: compensate (in place for fp32 state and float gradients), encode, then subtract
/// only what was sent, read back from the message as indices and values; no dense decode. Equal
/// bit for bit to residual_unfused, since a sparse decode is 0 wherever nothing was sent.
template <class S, class C, class T>
std::size_t residual_fused_sparse(C const& c, feedback_slice const& s, std::span<T const> grad,
                                  encode_context const& ctx, feedback_workspace<C, T>& ws, std::span<std::byte> out) {
  std::size_t const n = grad.size();
  auto const e = s.template buffer<S>(0);
  std::size_t bytes = 0;
  if constexpr (std::is_same_v<S, float> && std::is_same_v<T, float>) {
    float* const ep = e.data();
    float const* const gp = grad.data();
    std::uint64_t const bad = for_each_counting(n, [&](std::size_t i) { return ep[i] = gp[i] + ep[i]; });
    if (bad != 0) s.state().record_non_finite(bad);
    bytes = c.encode(std::span<float const>(ep, n), ctx, ws.codec, out);
    c.decode_sparse(std::span<std::byte const>(out.data(), bytes), ctx, ws.codec, ws.sparse);
    for_each_sent(ws.sparse, n, [&](std::size_t i, float v) { ep[i] = ep[i] - v; });
    if (bad != 0)
      parallel_chunks(n, grain, [&](std::size_t b, std::size_t end, int) {
        for (std::size_t i = b; i < end; ++i) ep[i] = non_finite(ep[i]) ? 0.0f : ep[i];
      });
  } else {
    fit(ws.compensated, n);
    float* const cf = ws.compensated.data();
    if (auto const bad =
            for_each_counting(n, [&](std::size_t i) { return cf[i] = to_float(grad[i]) + to_float(e[i]); }))
      s.state().record_non_finite(bad);
    bytes = encode_narrowed<T>(c, std::span<float const>(cf, n), ctx, ws, out);
    c.decode_sparse(std::span<std::byte const>(out.data(), bytes), ctx, ws.codec, ws.sparse);
    auto const rs = state_stream(ctx, s.tensor());
    parallel_chunks(n, grain, [&](std::size_t b, std::size_t end, int) {
      store_range<S>(e.data(), b, end, rs, s.offset(), [&](std::size_t i) { return cf[i] - 0.0f; });
    });
    for_each_sent(ws.sparse, n, [&](std::size_t i, float v) { e[i] = store<S>(cf[i] - v, rs, s.offset() + i); });
  }
  return bytes;
}

}  // namespace detail::feedback

/// Error feedback with one fp32 or bf16 residual per tensor element (stochastic rounding for
/// bf16). Nothing is lost: the sum of what was sent plus the residual is the sum of gradients.
struct residual {
  using feedback_concept = feedback_tag;
  static constexpr std::uint16_t state_kind = 1;
  static constexpr std::size_t state_buffers = 1;
  element_type precision = element_type::f32;                     ///< residual storage: f32 or bf16
  non_finite_policy non_finite = non_finite_policy::throw_error;  ///< what NaN/Inf gradients do
  bool fuse = true;  ///< use a fused path when the codec has one (false: always the unfused composition)
  friend bool operator==(residual const&, residual const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, residual const& v) { h("residual", v.precision, v.non_finite, v.fuse); }

  /// Compensates, encodes and updates the residual; see FeedbackFor.
  template <class C, Element T>
  requires Codec<C, T> std::size_t encode(C const& codec, feedback_slice s,
                                          std::type_identity_t<std::span<T const>> grad, encode_context const& ctx,
                                          feedback_workspace<C, T>& ws, std::span<std::byte> out)
  const {
    C const c = detail::feedback::codec_at(s.warmup(), codec, ctx.step);
    detail::feedback::check_call(c, s, grad.size(), 1, out.size(), ctx, "residual");
    return detail::feedback::with_state_type(s.precision(), [&]<class S>() -> std::size_t {
      auto run = [&] {
        if (fuse) {
          if constexpr (requires { c.template encode_compensated<S>(grad, s, ctx, ws.codec, out); })
            return c.template encode_compensated<S>(grad, s, ctx, ws.codec, out);
          else if constexpr (SparseCodec<C, T>)
            return detail::feedback::residual_fused_sparse<S>(c, s, grad, ctx, ws, out);
        }
        return detail::feedback::residual_unfused<S>(c, s, grad, ctx, ws, out);
      };
      if (non_finite == non_finite_policy::propagate || ctx.finite) return run();
      if (non_finite == non_finite_policy::throw_error && ctx.fail_stop) {
        // Every path counts the NaN/Inf its compensation pass meets: no scan before it. The
        // caller stops on the error, so the state this call changed is not used again.
        auto const seen = s.state().report().non_finite_values;
        auto check = [&] {
          if (s.state().report().non_finite_values == seen) return;
          if (auto const at = detail::feedback::first_non_finite_of(grad); at != detail::feedback::npos)
            detail::feedback::on_non_finite(non_finite, s, at, ctx.step, "residual");  // throws
        };
        std::size_t bytes = 0;
        try {
          bytes = run();
        } catch (...) {
          check();  // a codec that failed on the value: the NaN/Inf is the error
          throw;
        }
        check();
        return bytes;
      }
      auto const at = detail::feedback::first_non_finite_of(grad);
      if (at != detail::feedback::npos && detail::feedback::on_non_finite(non_finite, s, at, ctx.step, "residual"))
        return 0;
      return run();
    });
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::residual> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::residual const& f, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "residual{{.precision = {}, .non_finite = {}, .fuse = {}}}",
                          sluice::to_string(f.precision), f.non_finite, f.fuse);
  }
};
