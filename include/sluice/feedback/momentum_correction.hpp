// momentum_correction: Deep Gradient Compression's local momentum with factor masking (Lin et
// al. 2018, §3.2): momentum is accumulated before selection, and momentum and accumulator are
// zeroed where values were sent, so stale momentum never pushes already-applied directions.
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

/// u' = m u + g (Nesterov: u' = m (u + g)), c = v + u' (Nesterov: v + u' + g); send encode(c);
/// v = c - decode(encode(c)) (zero where an exact value was sent); u = 0 where sent, else u'.
/// Sent positions: the indices of a sparse codec's message; for a dense codec, where the decoded
/// value is non-zero.
template <class S, class C, class T>
std::size_t momentum_unfused(C const& c, feedback_slice const& s, std::span<T const> grad, encode_context const& ctx,
                             feedback_workspace<C, T>& ws, std::span<std::byte> out, float m, bool nesterov) {
  std::size_t const n = grad.size();
  auto const u = s.template buffer<S>(0);
  auto const v = s.template buffer<S>(1);
  fit(ws.compensated, n);
  fit(ws.momentum, n);
  float* const cf = ws.compensated.data();
  float* const uf = ws.momentum.data();
  auto const bad = for_each_counting(n, [&](std::size_t i) {
    float const g = to_float(grad[i]);
    if (nesterov) {
      uf[i] = m * (to_float(u[i]) + g);
      return cf[i] = to_float(v[i]) + uf[i] + g;
    }
    uf[i] = m * to_float(u[i]) + g;
    return cf[i] = to_float(v[i]) + uf[i];
  });
  if (bad != 0) s.state().record_non_finite(bad);
  std::size_t bytes = 0;
  bytes = encode_narrowed<T>(c, std::span<float const>(cf, n), ctx, ws, out);
  auto const msg = std::span<std::byte const>(out.data(), bytes);
  fit(ws.decoded, n);
  c.decode_into(msg, ctx, ws.codec, std::span<T>(ws.decoded), overwrite);
  T const* const d = ws.decoded.data();
  auto const ru = state_stream(ctx, s.tensor(), 0), rv = state_stream(ctx, s.tensor(), 1);
  constexpr bool sparse = SparseCodec<C, T>;
  parallel_chunks(n, grain, [&](std::size_t b, std::size_t end, int) {
    store_range<S>(v.data(), b, end, rv, s.offset(), [&](std::size_t i) { return cf[i] - to_float(d[i]); });
    if constexpr (sparse)
      store_range<S>(u.data(), b, end, ru, s.offset(), [&](std::size_t i) { return uf[i]; });
    else
      store_range<S>(u.data(), b, end, ru, s.offset(),
                     [&](std::size_t i) { return to_float(d[i]) != 0.0f ? 0.0f : uf[i]; });
  });
  if constexpr (sparse) {
    c.decode_sparse(msg, ctx, ws.codec, ws.sparse);
    for_each_sent(ws.sparse, n, [&](std::size_t i, float) { u[i] = S(0.0f); });
  }
  return bytes;
}

}  // namespace detail::feedback

/// DGC momentum correction: two buffers per tensor, momentum u and accumulator v, fp32 or bf16.
/// Use with the top-k family; the optimizer then runs without momentum (DGC §3.2).
struct momentum_correction {
  using feedback_concept = feedback_tag;
  static constexpr std::uint16_t state_kind = 2;
  static constexpr std::size_t state_buffers = 2;
  double momentum = 0.9;                                          ///< m in [0, 1)
  bool nesterov = false;                                          ///< Nesterov momentum (DGC Appendix)
  element_type precision = element_type::f32;                     ///< state storage: f32 or bf16
  non_finite_policy non_finite = non_finite_policy::throw_error;  ///< what NaN/Inf gradients do
  friend bool operator==(momentum_correction const&, momentum_correction const&) = default;
  /// Identity of the value (attach checks, checkpoints): its fields, not its printed form.
  friend void hash_append(serial::hasher& h, momentum_correction const& v) {
    h("momentum_correction", v.momentum, v.nesterov, v.precision, v.non_finite);
  }

  /// Accumulates momentum, encodes the accumulator, masks what was sent; see FeedbackFor.
  template <class C, Element T>
  requires Codec<C, T> std::size_t encode(C const& codec, feedback_slice s,
                                          std::type_identity_t<std::span<T const>> grad, encode_context const& ctx,
                                          feedback_workspace<C, T>& ws, std::span<std::byte> out)
  const {
    require(momentum >= 0 && momentum < 1, errc::invalid_argument,
            "momentum_correction: momentum must be in [0, 1), got {} (tensor '{}', step {})", momentum, s.name(),
            ctx.step);
    C const c = detail::feedback::codec_at(s.warmup(), codec, ctx.step);
    detail::feedback::check_call(c, s, grad.size(), 2, out.size(), ctx, "momentum_correction");
    auto const m = static_cast<float>(momentum);
    return detail::feedback::with_state_type(s.precision(), [&]<class S>() -> std::size_t {
      if (non_finite != non_finite_policy::propagate && !ctx.finite) {
        auto const at = detail::feedback::first_non_finite_of(grad);
        if (at != detail::feedback::npos &&
            detail::feedback::on_non_finite(non_finite, s, at, ctx.step, "momentum_correction"))
          return 0;
      }
      return detail::feedback::momentum_unfused<S>(c, s, grad, ctx, ws, out, m, nesterov);
    });
  }
};

// Conformance to its concepts: tests/static/test_conformance.cpp (checked there, not in every unit).

}  // namespace sluice

template <>
struct fmt::formatter<sluice::momentum_correction> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(sluice::momentum_correction const& f, Ctx& ctx) const {
    return fmt::format_to(ctx.out(),
                          "momentum_correction{{.momentum = {}, .nesterov = {}, .precision = {}, .non_finite = {}}}",
                          f.momentum, f.nesterov, sluice::to_string(f.precision), f.non_finite);
  }
};
